"""The notebooks in a real JupyterLab, driven by Playwright on Debian's Chromium.

Headless execution proves the code runs; this proves what a person sees: each notebook (a copy, in a
temporary root) runs top to bottom with no error output, its widget panels render with visible, enabled
controls, and the interactive parts respond — a changed control redraws the weighting plot, Run makes the
training curve grow and Stop ends the run, the config form recomposes, and the curve panels of 03 and 04 answer as a
W&B user would click them (hover a point: step, value, run, seed; the smoothing slider moves the curves; a finished
run picked is overlaid and its settings restored; Copy as command writes the ``agl-lab train`` line). A screenshot
of each notebook is saved under ``artifacts/browser/`` (and into ``$AGL_LAB_SCREENSHOTS`` when set: ``make screenshots``
writes ``docs/screenshots/``, the docs' pictures): each shows what a reader needs — the panel's controls at the
top of the window with its figures below (01, 03; in 03 after a run of the notebook's length, finished), the
recomposed config form (02), the band figures (04), the experiments' table (05, whose reports come from its small
``browser_parameters``: its defaults run for up to an hour) and one batch under every proposal (06, its runs small
too). Other views go to ``artifacts/browser/`` only. In the suite every notebook runs with its headless test's tiny
parameters; `make screenshots` runs their defaults. The tests start and stop their own server; they need
``/usr/bin/chromium`` (``apt-get install chromium``) and the ``playwright`` package, both installed by ``make test``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from jupyter_browser import (
    PANEL,
    ChangeTimer,
    copy_notebooks,
    error_outputs,
    jupyter_lab,
    launch_chromium,
    open_notebook,
    run_all,
    save,
    wait_idle,
)
from playwright.sync_api import Locator, Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ARTIFACTS = ROOT / "artifacts" / "browser"

pytestmark = pytest.mark.timeout(900)

# In the suite each notebook runs with the tiny values its headless test uses (metadata.agl_lab.test_parameters):
# what is checked here is what a person sees and clicks, and the training behind it is the headless test's. `make
# screenshots` (AGL_LAB_SCREENSHOTS set) runs the notebooks' own defaults, so the docs' pictures show real runs.
TEST_PARAMETERS = {
    path.stem: nbformat.read(path, as_version=4).metadata.get("agl_lab", {}).get("test_parameters", {})
    for path in NOTEBOOKS
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server from this environment on 127.0.0.1 with a token, serving copies of the notebooks."""
    root = tmp_path_factory.mktemp("lab-root")
    copy_notebooks(NOTEBOOKS, root, parameters=None if os.environ.get("AGL_LAB_SCREENSHOTS") else TEST_PARAMETERS)
    with jupyter_lab(root, log_path=tmp_path_factory.mktemp("lab-log") / "jupyter.log") as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 1100})
    page = context.new_page()
    yield page
    context.close()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_jupyterlab(notebook: Path, lab, page: Page):
    open_notebook(page, lab, notebook.name)
    run_all(page)
    save(page)
    errors = error_outputs(lab["root"] / notebook.name)
    assert not errors, f"{notebook.name} shows errors in JupyterLab:\n" + "\n".join(errors)
    shown = INTERACTIONS[notebook.stem](page)
    screenshot(page, notebook.stem, ending=shown)


# ---- what a person checks in each notebook ----------------------------------------------------------------


def assert_panel_controls(page: Page) -> None:
    """The notebook's widget panel rendered: its controls are visible and its inputs enabled."""
    # inputs and buttons; an HTML text line (a note that is empty until there is something to say) is no control
    controls = page.locator(
        f"{PANEL} .jp-OutputArea .widget-inline-hbox:not(.widget-html), {PANEL} .jp-OutputArea button"
    )
    assert controls.count() > 0, "no widget controls rendered"
    for i in range(min(controls.count(), 12)):
        control = controls.nth(i)
        control.scroll_into_view_if_needed()
        assert control.is_visible(), f"control {i} is not visible"
    inputs = page.locator(f"{PANEL} .jp-OutputArea input, {PANEL} .jp-OutputArea select")
    assert any(inputs.nth(i).is_enabled() for i in range(inputs.count())), "every widget input is disabled"


def check_curves(page: Page) -> None:
    """The sweep finished every cell, its curve panel answers (:func:`check_curve_view`) and its figures (bands,
    W&B overlay) are drawn as images."""
    table = page.locator(f"{PANEL} .jp-OutputArea-output table").filter(has_text="status").first
    table.scroll_into_view_if_needed()
    text = table.text_content()  # the DOM's text: JupyterLab may skip rendering a cell scrolled out of view
    assert "failed" not in text and "done" in text
    check_curve_view(page, "04_reproduce_curves")
    assert_images_drawn(page, min_width=400, missing="the band figures are missing")
    page.locator(f"{PANEL} .jp-OutputArea-output img").first.scroll_into_view_if_needed()


# The y values of the settings' bold lines, to see them move; and the page position of one of their points.
LINES_JS = """gd => gd._fullData.filter(t => /\\(n=\\d+\\)$/.test(t.name || ''))
    .map(t => Array.from(t.y || []).map(v => Number(v).toFixed(6)).join(',')).join('|')"""
POINT_JS = """(gd) => {
  const L = gd._fullLayout, box = gd.getBoundingClientRect();
  const d = gd._fullData.find(t => /\\(n=\\d+\\)$/.test(t.name || '') && t.x.length > 1);
  const xa = L[(d.xaxis || 'x').replace('x', 'xaxis')], ya = L[(d.yaxis || 'y').replace('y', 'yaxis')];
  const i = Math.floor(d.x.length / 2);
  const inward = i === d.x.length - 1 ? -3 : (i === 0 ? 3 : 0);  // a point on the plot's edge: hover just inside
  return {x: box.left + xa._offset + xa.l2p(d.x[i]) + inward, y: box.top + ya._offset + ya.l2p(d.y[i])};
}"""


def curve_views(page: Page):
    """The notebook's curve panels (:class:`agl_lab.ui.curve_view.CurveView`): the outputs with a Copy as command."""
    return page.locator(f"{PANEL} .jp-OutputArea-output").filter(has=page.locator("button", has_text="Copy as command"))


def check_curve_view(page: Page, stem: str) -> None:
    """The notebook's first curve panel, clicked as a W&B user would: hover a point (step, value, run, seed), move
    the smoothing slider (every bold line moves), pick a finished run (its settings restored, then it is overlaid),
    Copy as command (the ``agl-lab train`` line); a screenshot ``<stem>_curves.png``."""
    view = curve_views(page).first
    view.scroll_into_view_if_needed()
    graph = view.locator(".js-plotly-plot").first
    page.wait_for_function("gd => gd._fullData && gd._fullData.length > 0", arg=graph.element_handle(), timeout=60_000)

    graph.scroll_into_view_if_needed()
    point = graph.evaluate(POINT_JS)
    try:
        text = hover_label(page, point["x"], point["y"])
    except AssertionError:
        page.screenshot(path=str(ARTIFACTS / f"{stem}_no_hover.png"))
        raise
    assert "step" in text and "run:" in text and "seed:" in text, text

    before = graph.evaluate(LINES_JS)  # smoothing: the slider's end (0.99) moves every bold line
    handle = view.locator(".widget-slider .noUi-handle").first
    handle.focus()
    handle.press("End")
    page.wait_for_function(f"([gd, before]) => ({LINES_JS})(gd) !== before", arg=[graph.element_handle(), before],
                           timeout=30_000)  # fmt: skip

    picker = view.locator(".widget-select-multiple select").first
    assert picker.locator("option").count() > 0, "the run picker found no finished run"
    picker.select_option(index=0)
    view.locator("button", has_text="Restore settings").click()
    view.locator(".widget-html-content", has_text="restored the settings").wait_for(timeout=30_000)
    picker.select_option(index=0)
    page.wait_for_function(
        "gd => gd._fullData.some(t => t.name === 'overlaid runs (1)' && t.showlegend && t.x.length > 0)",
        arg=graph.element_handle(), timeout=30_000,
    )  # fmt: skip

    view.locator("button", has_text="Copy as command").click()
    box = view.locator("textarea").first
    page.wait_for_function("el => el.value.startsWith('agl-lab train')", arg=box.element_handle(), timeout=30_000)
    assert "lab.curve_overlay=" in box.input_value()
    wait_idle(page)
    screenshot_view(page, view, graph, f"{stem}_curves")


def screenshot_view(page: Page, view, graph, stem: str) -> None:
    """A curve panel at the top of the window, a hover label showing: ``artifacts/browser/<stem>.png``."""
    view.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)  # JupyterLab draws the outputs it scrolls to
    page.wait_for_function("gd => gd._fullData && gd._fullData.some(t => /\\(n=\\d+\\)$/.test(t.name || ''))",
                           arg=graph.element_handle(), timeout=60_000)  # fmt: skip
    point = graph.evaluate(POINT_JS)
    hover_label(page, point["x"], point["y"])
    box = view.bounding_box()
    height = min(page.viewport_size["height"] - box["y"], box["height"] + 16)
    save_screenshot(page, f"{stem}.png", clip={"x": 0, "y": max(box["y"] - 8, 0),
                                               "width": page.viewport_size["width"], "height": height})  # fmt: skip


def assert_images_drawn(page: Page, *, min_width: int, missing: str) -> None:
    """At least two figures among the notebook's outputs, each loaded and at least ``min_width`` pixels wide."""
    images = page.locator(f"{PANEL} .jp-OutputArea-output img")
    assert images.count() >= 2, missing
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed()
        assert image.evaluate(f"img => img.complete && img.naturalWidth > {min_width}"), f"figure {i} did not render"


def check_reproductions(page: Page) -> None:
    """Each reproduction's report renders as text (claim, verdict, checks table) with its figures as images."""
    report = page.locator(f"{PANEL} .jp-OutputArea-output.jp-RenderedMarkdown").filter(has_text="Reproduction").first
    report.scroll_into_view_if_needed()
    text = report.inner_text()
    assert "Claim." in text and "Verdict." in text and "expected" in text, text[:500]
    assert_images_drawn(page, min_width=300, missing="the forest plot and the bands are missing")


def check_effects(page: Page) -> Locator:
    """Notebook 05's reports (``check_reproductions``); its picture (returned: the picture ends below it) is the
    experiments' table, each claim with its source, settings and checks (the reports' runs are the test's tiny ones)."""
    check_reproductions(page)
    table = page.locator(f"{PANEL} .jp-OutputArea-output table").filter(has_text="max_ppo_update_times=2").first
    assert "Agent Lightning v1.0 docs" in table.text_content() and "both_on_cap2" in table.text_content()
    for _ in range(2):  # JupyterLab renders the cells it scrolls to, which moves the table: scroll again
        table.evaluate("e => e.scrollIntoView({block: 'end'})")
        page.wait_for_timeout(500)
    return table


def check_proposals(page: Page) -> None:
    """The diagnostics table lists the proposals in verl PR #7580's columns; the side-by-side figure, the report of
    the proposals' reproduction and its figures render. The picture: section 1, one batch under every proposal."""
    table = page.locator(f"{PANEL} .jp-OutputArea-output table").filter(has_text="session_equal").first
    text = table.text_content()  # the DOM's text: JupyterLab may skip rendering a cell out of view
    assert "partition_preserving" in text and "ess_fraction" in text and "adv_cosine" in text, text[:500]
    check_reproductions(page)
    side_by_side = page.locator(f"{PANEL} .jp-RenderedMarkdown").filter(has_text="Side by side: each proposal")
    scroll_to_top(page, side_by_side.first)


def scroll_to_top(page: Page, element: Locator) -> None:
    """``element`` at the top of the window, the outputs below it drawn (JupyterLab renders cells as they come in)."""
    element.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)
    element.evaluate("e => e.scrollIntoView({block: 'start'})")


def check_config_form(page: Page) -> None:
    """Unticking rollout-level advantage recomposes the config: the doctor warns about the half-set pair."""
    assert_panel_controls(page)
    view = page.locator(f"{PANEL} .jp-OutputArea .widget-html-content").filter(has_text="Resolved").last
    view.scroll_into_view_if_needed()
    assert "per_rollout_mean is on but rollout-level advantage is off" not in view.inner_text()
    checkbox = page.locator(f"{PANEL} .jp-OutputArea .widget-checkbox input").first
    checkbox.uncheck()
    page.wait_for_function(
        "(el) => el.innerText.includes('per_rollout_mean is on but rollout-level advantage is off')",
        arg=view.element_handle(),
        timeout=30_000,
    )
    checkbox.check()
    page.wait_for_function(
        "(el) => !el.innerText.includes('per_rollout_mean is on but rollout-level advantage is off')",
        arg=view.element_handle(),
        timeout=30_000,
    )
    page.locator(f"{PANEL} .jp-OutputArea .widget-checkbox").first.scroll_into_view_if_needed()


# Page coordinates of every point of a plotly trace, from plotly's own axes (whatever draws the markers), and
# the index of the point farthest from all others: hover and click then reach that point and no other.
POINTS_JS = """
(gd, trace) => {
  const L = gd._fullLayout, box = gd.getBoundingClientRect(), d = gd._fullData[trace];
  const xa = L[(d.xaxis || 'x').replace('x', 'xaxis')], ya = L[(d.yaxis || 'y').replace('y', 'yaxis')];
  const where = (t, i) => [box.left + xa._offset + xa.l2p(t.x[i]), box.top + ya._offset + ya.l2p(t.y[i])];
  const all = [];
  for (const t of gd._fullData.slice(0, 3)) for (let i = 0; i < t.x.length; i++) all.push(where(t, i));
  let best = -1, index = 0;
  for (let i = 0; i < d.x.length; i++) {
    const [x, y] = where(d, i);
    const nearest = Math.min(...all.map(([u, v]) => (u - x) ** 2 + (v - y) ** 2).filter(r => r > 0));
    if (nearest > best) { best = nearest; index = i; }
  }
  const [x, y] = where(d, index);
  return {x, y, index, text: d.hovertext[index]};
}
"""


def plotly_graphs(page: Page):
    """The weighting panel's plotly graphs (the first panel of the notebook): the bars, then the rollouts."""
    graphs = page.locator(f"{PANEL} .jp-OutputArea .js-plotly-plot")
    page.wait_for_function(
        "(n) => document.querySelectorAll(n).length >= 2 && [...document.querySelectorAll(n)].slice(0, 2)"
        ".every(gd => gd._fullData && gd._fullData.length > 0)",
        arg=f"{PANEL} .jp-OutputArea .js-plotly-plot",
        timeout=120_000,
        polling=250,
    )
    return graphs.nth(0), graphs.nth(1)


def hover_label(page: Page, x: float, y: float, tries: int = 3) -> str:
    """plotly's hover label at (x, y): the mouse first leaves the plot so no label from before is read."""
    label = page.locator(".hoverlayer .hovertext")
    for k in range(tries):
        page.mouse.move(1, 1)
        label.first.wait_for(state="detached", timeout=5_000)
        page.mouse.move(x, y + 0.5 * k, steps=3)
        try:
            label.first.wait_for(state="attached", timeout=5_000)
            return label.first.text_content()  # SVG text: inner_text does not apply
        except PlaywrightTimeoutError:
            continue
    raise AssertionError(f"no hover label at ({x:.0f}, {y:.0f})")


DRAWN_Y_JS = "gd => Array.from(gd._fullData[0].y)"  # the first trace's y values as drawn
BARS_DRAWN_JS = "gd => gd.querySelectorAll('.barlayer .point').length"  # the bars drawn, in every subplot
SHADE_JS = "gd => gd.querySelector('.shapelayer path').getAttribute('d')"  # the shown mode's shading as drawn
# the loss scale Σ of each mode as drawn above its bars (SVG text) and as the figure's data holds it (the kernel's)
DRAWN_SUMS_JS = "gd => [...gd.querySelectorAll('.textpoint text')].map(t => t.textContent)"
DATA_SUMS_JS = "gd => Array.from(gd._fullData.find(t => t.mode === 'text').text)"
OUT_OF_VIEW_JS = "gd => { const r = gd.getBoundingClientRect(); return r.top >= innerHeight || r.bottom <= 0; }"


def wait_drawn_again(page: Page, graph: Locator, before: list, message: str) -> None:
    """Wait until ``graph`` has drawn y values other than ``before`` in its first trace."""
    try:
        page.wait_for_function(
            "([gd, before]) => JSON.stringify(Array.from(gd._fullData[0].y)) !== JSON.stringify(before)",
            arg=[graph.element_handle(), before],
            timeout=30_000,
        )
    except PlaywrightTimeoutError as exc:
        raise AssertionError(message) from exc


def check_weighting_panel(page: Page) -> None:
    """Hovering a rollout shows its details, clicking it lists its rows, a control change redraws the figures."""
    assert_panel_controls(page)
    bars, scatter = plotly_graphs(page)
    scatter.scroll_into_view_if_needed()
    point = scatter.evaluate(POINTS_JS, 0)
    text = hover_label(page, point["x"], point["y"])
    rollout_id = point["text"].split("rollout ", 1)[1].split("</b>", 1)[0]
    for field in (f"rollout {rollout_id}", "uid", "rows", "kept", "tokens", "reward", "advantage", "weight", "mass"):
        assert field in text, (field, text)
    page.mouse.click(point["x"], point["y"])
    table = page.locator(f"{PANEL} .panel-table table.rollout-rows[data-rollout='{rollout_id}']")
    table.wait_for(state="visible", timeout=30_000)  # a round trip to the kernel
    assert table.locator("tbody tr").count() >= 1
    timings = {}
    timer = ChangeTimer(page, page.locator(f"{PANEL} .jp-Cell").filter(has=page.locator(".js-plotly-plot")).first)
    mode = (
        page.locator(f"{PANEL} .jp-OutputArea .widget-dropdown select")
        .filter(has=page.locator("option", has_text="verl seq-mean-token-mean"))
        .first
    )
    before = scatter.evaluate(DRAWN_Y_JS)
    show_panel(page)  # the settings at the top, the bars below them in view: the change is drawn as it comes
    assert not bars.evaluate(OUT_OF_VIEW_JS)
    bars_drawn, shade = bars.evaluate(BARS_DRAWN_JS), bars.evaluate(SHADE_JS)
    timings["loss mode"] = timer.time(mode, lambda: mode.select_option(label="verl seq-mean-token-mean"))
    # a loss mode moves the shading alone: the frame that draws it keeps every bar of every subplot (plotly drops
    # the traces a frame does not name)
    assert bars.evaluate(BARS_DRAWN_JS) == bars_drawn > 0, "bars went missing when the loss mode changed"
    assert bars.evaluate(SHADE_JS) != shade, "the shading did not move to the new loss mode"
    scatter.scroll_into_view_if_needed()  # below the bars: drawn when it comes into view
    wait_drawn_again(page, scatter, before, "the rollouts' masses did not move with the loss mode")
    table.wait_for(state="visible")  # the clicked rollout's rows stay listed, now under the new mode
    cap = page.locator(f"{PANEL} .jp-OutputArea .widget-inline-hbox").filter(has_text="max_ppo_update_times").first
    seed = page.locator(f"{PANEL} .jp-OutputArea .widget-inline-hbox").filter(has_text="seed").locator("input").first
    seed.scroll_into_view_if_needed()
    before, sums_before = scatter.evaluate(DRAWN_Y_JS), bars.evaluate(DRAWN_SUMS_JS)
    assert sums_before == bars.evaluate(DATA_SUMS_JS) and all(t.startswith("Σ=") for t in sums_before), sums_before
    timings["seed"] = timer.time(seed, lambda: (seed.fill("3"), seed.press("Enter")))
    assert cap.is_visible()
    if scatter.evaluate(OUT_OF_VIEW_JS):
        # out of view the figure took the change into its data without drawing it; in view it draws it
        assert scatter.evaluate(DRAWN_Y_JS) == before, "a figure out of view was drawn"
        scatter.scroll_into_view_if_needed()
    wait_drawn_again(page, scatter, before, "the rollouts' masses did not move with the seed")
    # each mode's Σ as drawn follows the kernel's (drawn as tick text, a frame left them at their first values)
    bars.scroll_into_view_if_needed()
    try:
        page.wait_for_function(
            f"([gd, before]) => {{ const drawn = ({DRAWN_SUMS_JS})(gd);"
            f" return JSON.stringify(drawn) === JSON.stringify(({DATA_SUMS_JS})(gd))"
            " && JSON.stringify(drawn) !== JSON.stringify(before); }",
            arg=[bars.element_handle(), sums_before],
            timeout=30_000,
        )
    except PlaywrightTimeoutError as exc:
        drawn, data = bars.evaluate(DRAWN_SUMS_JS), bars.evaluate(DATA_SUMS_JS)
        raise AssertionError(f"the drawn Σ {drawn} are not the new seed's {data} (before: {sums_before})") from exc
    wait_idle(page)  # leave no work behind for the next notebook
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "01_browser_timings.json").write_text(json.dumps(timings, indent=1))
    print("browser: ms from a control's change event to the figure redrawn:", timings)
    show_panel(page)  # the screenshot: the settings and the figures they drive


def check_training_panel(page: Page) -> None:
    """The first run's curve panel answers (:func:`check_curve_view`); Run in the live panel makes the curve grow
    step by step, and Stop ends the run early and cleanly; then a run of the default length finishes (what the
    screenshots show: the panel's live curves, and the panel)."""
    check_curve_view(page, "03_short_training_runs")
    assert_panel_controls(page)
    steps = page.locator(f"{PANEL} .jp-OutputArea .widget-inline-hbox").filter(has_text="steps").locator("input").first
    steps.scroll_into_view_if_needed()
    default_steps = steps.input_value()
    steps.fill("200")
    steps.press("Enter")
    status = page.locator(f"{PANEL} .jp-OutputArea .widget-html-content").filter(has_text="step")
    button(page, "Run").click()
    # the status line counts finished steps; it must move while the cell's kernel stays responsive
    page.wait_for_function(
        """() => [...document.querySelectorAll('.widget-html-content')]
            .some(e => /Step ([2-9]|[1-9][0-9]) of/.test(e.innerText))""",
        timeout=180_000,
    )
    button(page, "Stop").click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.widget-html-content')].some(e => /stopped/i.test(e.innerText))",
        timeout=120_000,
    )
    assert status.count() > 0
    wait_idle(page)
    # a real run, as a reader would start one: the notebook's own number of steps, to the end
    steps.fill(default_steps)
    steps.press("Enter")
    button(page, "Run").click()
    page.wait_for_function(
        f"""() => [...document.querySelectorAll('.widget-html-content')]
            .some(e => e.innerText.includes('Run finished after {default_steps} of {default_steps} steps'))""",
        timeout=600_000,
    )
    links = page.locator(f"{PANEL} .jp-OutputArea .widget-html-content").filter(has_text="Run directory").first
    assert links.inner_text().split("Run directory: ")[1].startswith("runs/")  # where the notebook is, not /tmp/...
    wait_idle(page)
    panel = curve_views(page).last  # the training panel's live curves, after its run
    screenshot_view(page, panel, panel.locator(".js-plotly-plot").first, "03_short_training_runs_panel")
    check_real_model_transcript(page)
    show_panel(page)


def check_real_model_transcript(page: Page) -> None:
    """The pretrained model's run (the notebook's last section) shows its rollouts as text: the environment's
    question, the model's answers each tagged with its row, the rows' table; a picture of it for the docs."""
    view = page.locator(f"{PANEL} .jp-OutputArea .widget-vbox").filter(has=page.locator(".transcript")).last
    view.scroll_into_view_if_needed()
    page.wait_for_timeout(500)  # let JupyterLab's windowed notebook render the cell now in view
    transcript = view.locator(".transcript").first
    text = transcript.text_content()  # the DOM's text: a cell JupyterLab has not painted yet still holds it
    assert "What is" in text and "call 0 · row 0" in text and "reward" in text, text[:500]
    assert transcript.locator(".transcript-rows tbody tr").count() >= 1
    picker = view.locator("select").last  # the rollout picker: another rollout redraws the conversation
    options = picker.locator("option")
    if options.count() > 1:
        before = transcript.get_attribute("data-rollout")
        picker.select_option(index=1)
        page.wait_for_function(
            "([v, id]) => v.querySelector('.transcript').dataset.rollout !== id", arg=[view.element_handle(), before]
        )
        picker.select_option(index=0)
    box = view.bounding_box()
    save_screenshot(
        page,
        "03_real_model_transcript.png",
        docs=True,
        clip={"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], 900)},
    )


def button(page: Page, label: str):
    """The panel's button labelled exactly ``label`` (``has_text`` matches substrings: "Find runs" holds "Run")."""
    exact = re.compile(rf"^\s*{re.escape(label)}\s*$")
    return page.locator(f"{PANEL} .jp-OutputArea button").filter(has_text=exact).first


def show_panel(page: Page) -> None:
    """Scroll the notebook so its widget panel's settings sit at the top of the window, its figures below."""
    heading = page.locator(f"{PANEL} .jp-OutputArea .widget-html-content").filter(has_text=re.compile(r"^Settings$"))
    heading = heading.first
    heading.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)  # let JupyterLab's windowed notebook render the cells now in view
    heading.evaluate("e => e.scrollIntoView({block: 'start'})")


INTERACTIONS = {
    "01_per_rollout_weighting": check_weighting_panel,
    "02_config_check": check_config_form,
    "03_short_training_runs": check_training_panel,
    "04_reproduce_curves": check_curves,
    "05_reproduce_effects": check_effects,
    "06_weighting_proposals": check_proposals,
}


def screenshot(page: Page, stem: str, *, ending: Locator | None = None) -> None:
    """The window, cut below the panel in view, or below ``ending`` when a check names what its picture shows (when
    that ends above the window's bottom: no empty notebook below)."""
    viewport = page.viewport_size
    if ending is not None:
        bottom = ending.bounding_box()["y"] + ending.bounding_box()["height"]
    else:
        bottom = page.evaluate(
            """(panel) => { const h = [...document.querySelectorAll(panel + ' .jp-OutputArea .widget-html-content')]
                .find(e => e.innerText.trim() === 'Settings');
                const cell = h && h.closest('.jp-Cell');
                return cell ? cell.getBoundingClientRect().bottom : null; }""",
            PANEL,
        )
    height = viewport["height"] if bottom is None else int(min(viewport["height"], max(bottom + 32, 480)))
    save_screenshot(page, f"{stem}.png", clip={"x": 0, "y": 0, "width": viewport["width"], "height": height}, docs=True)


def save_screenshot(page: Page, name: str, *, clip: dict, docs: bool = False) -> None:
    """``clip`` of the window into ``artifacts/browser/name``; a picture the docs show (``docs``: one per notebook)
    also into ``$AGL_LAB_SCREENSHOTS`` when set, so ``make screenshots`` leaves no picture the docs do not use."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), clip=clip)
    if docs and os.environ.get("AGL_LAB_SCREENSHOTS"):
        target = Path(os.environ["AGL_LAB_SCREENSHOTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)
