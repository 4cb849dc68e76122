"""Notebook 01's figure updates drawn by ``LiveFigure``'s own JavaScript in an empty page, beside the kernel's Python.

``bench_browser.py`` times a change in JupyterLab from the change event to the redrawn panel: the kernel, the
server's relay, JupyterLab's own re-renders and the page's drawing together. This one takes the page's drawing alone:
the weighting panel at ``bench_browser.py``'s size (900 prompts × 8 rollouts, ~10,000 rows) records the messages
its two figures send for each control change (each control alternating between two values, as
``bench_weighting.py`` changes them), and a Chromium page renders both figures with ``LiveFigure``'s ES module
itself (the widget's ``_esm``, given a stand-in model that holds the figure) and replays each change's messages
through the module's own message handler. Timed in the page: from handing over the first message to the frame after
the last thing drawn (plotly's afterplot, animated and relayout events and added or removed nodes). Printed per
control: the kernel's Python for that change (``bench_weighting.py``'s timing, its messages serialized), the page's
drawing, and their ratio, with the load each ran at.

Run: ``.venv/bin/python benchmarks/bench_figure_drawing.py [--repeats 5] [--load N]``.
"""

from __future__ import annotations

import agl_lab  # noqa: F401  (first: its process settings reach torch only before torch loads)

# isort: split

import argparse
import statistics
import sys
import time
from pathlib import Path

from bench_weighting import changes, panel_for  # its import puts a serializing comm in place of the kernel's
from busy_load import busy_processes, load_now
from playwright.sync_api import sync_playwright

from agl_lab.lab.synthetic import SyntheticKnobs
from agl_lab.ui.weighting_panel import WeightingPanel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from jupyter_browser import launch_chromium  # noqa: E402  (Debian's Chromium through Playwright)

FIGURES = ("bars", "scatter")

# Renders each figure with the module LiveFigure ships, then replays each change's messages through its handler.
_REPLAY_JS = """
async ({esm, plotlyJs, figures, changes, quietMs}) => {
  const module = await import(URL.createObjectURL(new Blob([esm], {type: "text/javascript"})));
  const handlers = {}, graphs = [];
  for (const [name, figure] of Object.entries(figures)) {
    const el = document.createElement("div");
    document.body.appendChild(el);
    const listeners = {}, state = {_plotly_js: plotlyJs, _figure: figure};
    const model = {get: (key) => state[key], on: (event, f) => { listeners[event] = f; }, off: () => {},
                   send: () => {}};
    await module.default.render({model, el});
    handlers[name] = listeners["msg:custom"];
    graphs.push(el.querySelector(".js-plotly-plot"));
  }
  window.__graphs = Object.fromEntries(Object.keys(figures).map((name, i) => [name, graphs[i]]));  // for the test
  let last = 0;
  const drawn = () => requestAnimationFrame(() => { last = performance.now(); });
  for (const gd of graphs) for (const event of ["plotly_afterplot", "plotly_animated", "plotly_relayout"]) {
    gd.on(event, drawn);
  }
  new MutationObserver(drawn).observe(document.body, {subtree: true, childList: true});
  const settle = (ms) => new Promise((done) => setTimeout(done, ms));
  const out = [];
  for (const messages of changes) {
    await settle(quietMs);
    last = 0;
    const start = performance.now();
    for (const [figure, content] of messages) handlers[figure](content);
    while (performance.now() - Math.max(last, start) < quietMs) await settle(10);
    out.push(last ? last - start : 0);
  }
  return out;
}
"""


def record(panel: WeightingPanel, control: str, values: tuple, repeats: int) -> tuple[list[float], list[list]]:
    """Set ``control`` to alternating ``values``: the kernel's ms per change and each change's figure messages."""
    sent: list = []
    for name in FIGURES:
        figure = getattr(panel, name).widget
        figure.send = lambda content, buffers=None, name=name: sent.append((name, content))
    widget, kernel_ms, messages = panel.controls[control], [], []
    for i in range(-2, 2 * repeats):  # a warm-up pair first
        sent.clear()
        start = time.perf_counter()
        widget.value = values[i % 2]
        if i >= 0:
            kernel_ms.append((time.perf_counter() - start) * 1e3)
            messages.append(list(sent))
        assert panel.error is None, panel.error
    return kernel_ms, messages


def replay(page, panel: WeightingPanel, figures: dict[str, str], changes: list[list], *, quiet_ms: float = 150) -> list:
    """Draw ``figures`` (the first state of each, as a view draws it) in ``page`` with ``panel``'s LiveFigure module,
    then each change's messages in turn: the page's ms per change (0 for a change that sent nothing)."""
    widget = panel.bars.widget
    arg = {"esm": widget._esm, "plotlyJs": widget._plotly_js, "figures": figures, "changes": changes}
    return page.evaluate(_REPLAY_JS, {**arg, "quietMs": quiet_ms})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=900)
    parser.add_argument("--repeats", type=int, default=5, help="changes per control are twice this")
    parser.add_argument("--load", type=int, default=0, metavar="N", help="N busy processes beside the measurement")
    args = parser.parse_args()
    panel = panel_for("grpo_vectorized", SyntheticKnobs(n_prompts=args.prompts, rollouts_per_prompt=8))
    figures = {name: getattr(panel, name).widget._figure for name in FIGURES}  # as the views draw them first
    print(f"load average before: {load_now():.2f}; {args.load} busy processes beside the measurement")
    with busy_processes(args.load), sync_playwright() as playwright:
        recorded = {}
        for label, (control, values) in changes(panel).items():
            if not label.endswith("(first time)"):  # the page draws the same whether the kernel had it cached or not
                recorded[label] = (*record(panel, control, values, args.repeats), load_now())
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1440, "height": 1200})  # both figures in view
        flat = [messages for _, messages, _ in recorded.values() for messages in messages]
        drawn = replay(page, panel, figures, flat)
        page_load = load_now()
        browser.close()
    print(f"{'control':40s} {'kernel':>8s} {'page':>8s} {'page/kernel':>12s} {'messages':>9s}  (ms, medians)")
    at, kernel_total, page_total = 0, 0.0, 0.0
    for label, (kernel_ms, messages, _) in recorded.items():
        page_ms = drawn[at : at + len(messages)]
        at += len(messages)
        kernel, drawing = statistics.median(kernel_ms), statistics.median(page_ms)
        kernel_total, page_total = kernel_total + kernel, page_total + drawing
        ratio = f"{drawing / kernel:12.2f}" if drawing else f"{'(nothing)':>12s}"
        print(f"{label:40s} {kernel:8.1f} {drawing:8.1f} {ratio} {statistics.median(map(len, messages)):9.0f}")
    kernel_load = statistics.median(load for _, _, load in recorded.values())
    print(
        f"figure drawing: the page {statistics.median(drawn):.1f} ms median per change (slowest {max(drawn):.1f}), "
        f"{page_total / kernel_total:.2f}x the kernel's Python over every control; load {kernel_load:.1f} (kernel) "
        f"and {page_load:.1f} (page), {args.load} busy processes"
    )


if __name__ == "__main__":
    main()
