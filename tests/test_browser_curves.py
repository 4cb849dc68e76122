"""The curve panels of notebooks 03 and 04 in a real JupyterLab (Playwright on Debian's Chromium), clicked as a W&B
user would: hover a point (step, value, run, seed), move the smoothing slider (the curves move), pick a finished run
(it is overlaid), restore a run's settings, and Copy as command (the ``agl-lab train`` line appears).

Each notebook runs with its small ``test_parameters`` (a copy, in the JupyterLab server's temporary root). A
screenshot of each curve panel is saved under ``artifacts/browser/`` (and into ``$AGL_LAB_SCREENSHOTS`` when set).
Server, browser and notebook plumbing: ``tests/test_browser.py``.
"""

from __future__ import annotations

import os
import shutil

import nbformat
import pytest
from jupyter_browser import PANEL, error_outputs, open_notebook, run_all, save, wait_idle
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook
from playwright.sync_api import Page
from test_browser import (  # noqa: F401 (lab, browser and page are fixtures)
    ARTIFACTS,
    ROOT,
    browser,
    hover_label,
    lab,
    page,
)

pytestmark = pytest.mark.timeout(900)

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


@pytest.mark.parametrize("stem", ["03_short_training_runs", "04_reproduce_curves"])
def test_curve_panel_smoothing_run_picker_and_copy_as_command(stem, lab, page: Page):  # noqa: F811 (fixtures)
    name = f"curves_{stem}.ipynb"
    source = load_notebook_node(str(ROOT / "notebooks" / f"{stem}.ipynb"))
    small = source.metadata["agl_lab"]["test_parameters"]
    nbformat.write(parameterize_notebook(source, small, kernel_name="python3", language="python"), lab["root"] / name)
    open_notebook(page, lab, name)
    run_all(page)
    save(page)
    assert not error_outputs(lab["root"] / name)
    copy = page.locator("button", has_text="Copy as command")
    views = page.locator(f"{PANEL} .jp-OutputArea-output").filter(has=copy)
    view = views.first
    view.scroll_into_view_if_needed()
    graph = view.locator(".js-plotly-plot").first
    page.wait_for_function("gd => gd._fullData && gd._fullData.length > 0", arg=graph.element_handle(), timeout=60_000)

    # hover: step, value, run and seed of the point under the mouse
    graph.scroll_into_view_if_needed()
    point = graph.evaluate(POINT_JS)
    try:
        text = hover_label(page, point["x"], point["y"])
    except AssertionError:
        page.screenshot(path=str(ARTIFACTS / f"{stem}_no_hover.png"))
        raise
    assert "step" in text and "run:" in text and "seed:" in text, text

    # smoothing: the slider's end (0.99) moves every bold line
    before = graph.evaluate(LINES_JS)
    handle = view.locator(".widget-slider .noUi-handle").first
    handle.focus()
    handle.press("End")
    page.wait_for_function(f"([gd, before]) => ({LINES_JS})(gd) !== before", arg=[graph.element_handle(), before],
                           timeout=30_000)  # fmt: skip

    # the run picker: a finished run restores its settings, then is laid over the curves
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

    # Copy as command: the agl-lab train line(s) of the panel's settings
    view.locator("button", has_text="Copy as command").click()
    box = view.locator("textarea").first
    page.wait_for_function("el => el.value.startsWith('agl-lab train')", arg=box.element_handle(), timeout=30_000)
    assert "lab.curve_overlay=" in box.input_value()
    wait_idle(page)
    screenshot_view(page, view, graph, f"{stem}_curves")
    if views.count() > 1:  # notebook 03's training panel: its live curves after the panel's run
        panel = views.last
        screenshot_view(page, panel, panel.locator(".js-plotly-plot").first, f"{stem}_panel")


def screenshot_view(page: Page, view, graph, stem: str) -> None:  # noqa: F811
    """The curve panel at the top of the window, a hover label showing."""
    view.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)  # JupyterLab draws the outputs it scrolls to
    page.wait_for_function("gd => gd._fullData && gd._fullData.some(t => /\\(n=\\d+\\)$/.test(t.name || ''))",
                           arg=graph.element_handle(), timeout=60_000)  # fmt: skip
    point = graph.evaluate(POINT_JS)
    hover_label(page, point["x"], point["y"])
    box = view.bounding_box()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{stem}.png"
    height = min(page.viewport_size["height"] - box["y"], box["height"] + 16)
    page.screenshot(path=str(path), clip={"x": 0, "y": max(box["y"] - 8, 0), "width": page.viewport_size["width"],
                                          "height": height})  # fmt: skip
    if os.environ.get("AGL_LAB_SCREENSHOTS"):
        target = os.environ["AGL_LAB_SCREENSHOTS"]
        os.makedirs(target, exist_ok=True)
        shutil.copy(path, os.path.join(target, path.name))
