"""JupyterLab in headless Chromium, for the browser tests and the browser benchmark (one set-up, both import it).

``jupyter_lab(root)`` serves a folder of notebook copies on a free local port with a token (and without the news
toast); ``launch_chromium`` starts Debian's chromium through Playwright (its own browser download does not work
here); ``open_notebook``/``run_all``/``wait_idle``/``save`` drive JupyterLab's own commands; ``ChangeTimer``
measures, in the page's own clock, from a control's change event to the last redraw it caused (plotly's
``plotly_afterplot``, ``plotly_animated``, ``plotly_transitioned``, ``plotly_relayout`` and DOM mutations in the
panel's cell, each to its next animation frame). Used by ``tests/test_browser.py`` and ``benchmarks/bench_browser.py``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
from playwright.sync_api import Locator, Page

CHROMIUM = "/usr/bin/chromium"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in view (the workspace may hold others)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def copy_notebooks(
    notebooks: list[Path], root: Path, *, parameters: Mapping[str, Mapping[str, Any]] | None = None
) -> None:
    """Copy ``notebooks`` into ``root`` (autosave writes outputs back: never run the repository's own files) as a
    person opens them. A notebook whose defaults take far longer than a test (05: reproductions over up to 10 seeds)
    declares ``metadata.agl_lab.browser_parameters``; those and ``parameters`` (per notebook stem, on top) are
    injected after its ``parameters`` cell, as papermill does."""
    for notebook in notebooks:
        declared = nbformat.read(notebook, as_version=4).metadata.get("agl_lab", {}).get("browser_parameters")
        given = {**(declared or {}), **(parameters or {}).get(notebook.stem, {})}
        if not given:
            shutil.copy(notebook, root / notebook.name)
            continue
        from papermill.iorw import load_notebook_node
        from papermill.parameterize import parameterize_notebook

        nb = parameterize_notebook(load_notebook_node(str(notebook)), given, kernel_name="python3", language="python")
        nbformat.write(nb, root / notebook.name)


@contextmanager
def jupyter_lab(root: Path, *, log_path: Path, env: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """A JupyterLab server from this environment on 127.0.0.1 with a token, serving ``root``; its log goes to
    ``log_path``. Yields ``{"url", "token", "root"}``; the server stops when the block ends."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium (make test does it)"
    config_dir = log_path.parent / "jupyter-config"
    (config_dir / "labconfig").mkdir(parents=True, exist_ok=True)
    (config_dir / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    port, token = free_port(), secrets.token_hex(16)
    server_env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config_dir), WANDB_MODE="disabled", **(env or {}))
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                f"--ServerApp.token={token}", "--allow-root", f"--ServerApp.root_dir={root}",
                "--LabApp.expose_app_in_browser=True",
            ],
            env=server_env, stdout=log, stderr=subprocess.STDOUT, cwd=root,
        )  # fmt: skip
        try:
            _wait_for_server(port, token, server)
            yield {"url": f"http://127.0.0.1:{port}", "token": token, "root": root}
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()


def launch_chromium(playwright):
    """Debian's chromium, headless, through Playwright."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def open_notebook(page: Page, lab: dict, name: str) -> None:
    # reset: start from an empty workspace, not with the previous notebook restored (and made current)
    page.goto(f"{lab['url']}/lab/tree/{name}?reset&token={lab['token']}")
    # Wait for the kernel to be ready (or for a kernel dialog to answer): run-all sent earlier is lost.
    page.wait_for_function(
        """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
            const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
            return (k && k.status === 'idle' && w.sessionContext.isReady) || document.querySelector('.jp-Dialog'); }""",
        timeout=120_000,
    )
    if page.locator(".jp-Dialog .jp-mod-accept").count():
        page.locator(".jp-Dialog .jp-mod-accept").click()


def run_all(page: Page, timeout_s: float = 600) -> None:
    # Not awaited on purpose: the command's promise resolves only when every cell has run.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(
        """() => { const w = window.jupyterapp.shell.currentWidget;
            const cells = w.content.widgets.filter(c => c.model.type === 'code');
            const s = w.sessionContext.session;  // null for a moment while a restored session reconnects
            const idle = s && s.kernel && s.kernel.status === 'idle';
            return idle && cells.every(c => c.model.executionCount !== null); }""",
        timeout=timeout_s * 1000,
        polling=500,
    )


def wait_idle(page: Page, timeout_s: float = 60) -> None:
    page.wait_for_function(
        """() => { const s = window.jupyterapp.shell.currentWidget.sessionContext.session;
            return s && s.kernel && s.kernel.status === 'idle'; }""",
        timeout=timeout_s * 1000,
        polling=250,
    )


def save(page: Page) -> None:
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)


def error_outputs(path: Path) -> list[str]:
    """The error outputs of a saved notebook, one line each."""
    notebook = nbformat.read(path, as_version=4)
    return [
        f"cell {i}: {output.ename}: {output.evalue}"
        for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]


# The timer lives in the page: a change's start is the first change/click/commit-key event on the control (capture
# phase, before any handler), its end the later of the kernel's first idle after it (the change handled) and the
# animation frame after the last plotly redraw event or DOM mutation inside the cell, once nothing has moved for
# `quiet` ms (or the first frame at which `until`, a predicate on the cell, holds). Page clock (performance.now), so
# Playwright's own round trips are not counted.
_TIMER_JS = """
(cell) => {
  const t = window.__aglTimer = {control: null, start: 0, events: [], kernel: [], until: null, done: 0};
  const frame = () => requestAnimationFrame(() => { if (t.start) t.events.push(['frame', performance.now()]); });
  const note = (kind) => {
    if (!t.start || t.done) return;
    t.events.push([kind, performance.now()]);
    if (t.until && t.until(cell)) {
      t.done = performance.now();
      requestAnimationFrame(() => { t.done = performance.now(); });
    }
    frame();
  };
  // Content and enabled state; not every attribute (plotly moves thousands, and recording them costs the page time).
  new MutationObserver(() => note('dom')).observe(cell, {subtree: true, childList: true, characterData: true,
                                                          attributeFilter: ['disabled']});
  t.watchGraphs = () => { for (const gd of cell.querySelectorAll('.js-plotly-plot')) {
      if (gd.__aglTimed || !gd.on) continue;
      gd.__aglTimed = true;
      for (const done of ['plotly_afterplot', 'plotly_animated', 'plotly_transitioned', 'plotly_relayout']) {
        gd.on(done, () => note('afterplot'));
      }
  } };
  t.watchGraphs();
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  kernel.statusChanged.connect((_, status) => { if (t.start) t.kernel.push([status, performance.now()]); });
  const keys = new Set(['Enter', 'ArrowRight', 'ArrowLeft', 'ArrowUp', 'ArrowDown']);
  for (const type of ['click', 'change', 'keydown']) document.addEventListener(type, (e) => {
    if (!t.control || t.start || !t.control.contains(e.target)) return;
    if (type === 'keydown' && !keys.has(e.key)) return;
    t.start = performance.now();
  }, true);
}
"""


class ChangeTimer:
    """Times control changes in one notebook cell (the panel's), from the change event to the redrawn panel."""

    def __init__(self, page: Page, cell: Locator, *, quiet_ms: float = 500) -> None:
        self.page, self.quiet_ms = page, quiet_ms
        cell.evaluate(_TIMER_JS)

    def time(self, control: Locator, change: Callable[[], Any], *, until: str | None = None) -> float:
        """Milliseconds from ``control``'s first change event during ``change()`` to the panel redrawn.

        ``until``: a JavaScript predicate ``(cell) => bool``; the change counts as answered at the frame after the
        first DOM mutation at which it holds (for changes whose redraw goes on, like a training run's steps).
        """
        control.evaluate(
            f"""(el) => {{ const t = window.__aglTimer; t.watchGraphs();
                Object.assign(t, {{control: el, start: 0, events: [], kernel: [], done: 0, until: {until or "null"}}});
            }}"""
        )
        change()
        if until:
            self.page.wait_for_function("() => window.__aglTimer.done > 0", timeout=120_000)
            self.page.wait_for_timeout(50)  # the frame after it
            return self.page.evaluate("() => window.__aglTimer.done - window.__aglTimer.start")
        self.page.wait_for_function(
            """(quiet) => { const t = window.__aglTimer; if (!t.start) return false;
                const idle = t.kernel.some(([s]) => s === 'idle');
                const last = Math.max(t.start, ...t.events.map(([, at]) => at));
                return idle && performance.now() - last > quiet; }""",
            arg=self.quiet_ms,
            timeout=120_000,
            polling=50,
        )
        # answered: the kernel has handled the change (its first idle) and the page has drawn all it caused
        return self.page.evaluate(
            """() => { const t = window.__aglTimer;
                const drawn = t.events.filter(([kind]) => kind === 'frame').map(([, at]) => at);
                const idle = t.kernel.filter(([s]) => s === 'idle').map(([, at]) => at);
                return Math.max(Math.min(...idle), ...drawn) - t.start; }"""
        )

    def events(self) -> list[tuple[str, float]]:
        """The last change's events (kind, ms after its start): for profiling which part came when."""
        return [
            (kind, round(at, 1))
            for kind, at in self.page.evaluate(
                "() => [...window.__aglTimer.events, ...window.__aglTimer.kernel.map(([s, at]) => ['kernel:' + s, at])]"
                ".map(([k, at]) => [k, at - window.__aglTimer.start])"
            )
        ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_server(port: int, token: str, server: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {server.returncode} before it served")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer on port {port} within {timeout_s:.0f} s")
