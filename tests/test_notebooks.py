"""Every notebook in notebooks/ runs headless, top to bottom, with the small parameters it declares.

Notebooks are found by glob (no hand-kept list). Each has a cell tagged ``parameters`` holding its real
defaults; the tiny values for the tests live in the notebook's own metadata, ``metadata.agl_lab.test_parameters``,
so a new notebook is tested the day it lands. Execution happens in a temporary directory: run directories
and W&B files a notebook writes never land in the repository.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import papermill
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


# What a notebook's reader did not ask for: Python's warnings (``path:line: SomeWarning: ...``, deprecations), log lines
# (a level word, a timestamp: Ray's, verl's, W&B's), and Ray's processes speaking through the driver. Anything on
# stderr but a progress bar counts too: a notebook's own words go to stdout, its figures and tables to display.
STRAY = re.compile(  # case matters: a notebook may print "warning" or "info" in its own words (the doctor's levels)
    r"\b\w*Warning\b|\bWARNING\b|\bINFO\b|\bDEBUG\b|[Dd]eprecat|^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d"
    r"|\((raylet|pid=\d+)\)|Token authentication",
    re.MULTILINE,
)
PROGRESS_BAR = re.compile(r"\d+%\|.*\|")  # tqdm's text bar (tqdm.auto draws a widget where a frontend is)


def stray_lines(notebook) -> list[str]:
    """Every line of the executed notebook's text outputs a reader did not ask for (:data:`STRAY`)."""
    found = []
    for i, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.output_type != "stream":
                continue
            for line in output.text.splitlines():
                stray = STRAY.search(line) or (
                    output.name == "stderr" and line.strip() and not PROGRESS_BAR.search(line)
                )
                if stray:
                    found.append(f"cell {i} {output.name}: {line}")
    return found


def test_stray_lines_are_found_and_a_notebooks_own_words_are_not():
    cell = nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="success rate 0.85\nwarning lab.max_turns: more info\n"),
        nbformat.v4.new_output("stream", name="stderr", text=" 50%|█████     | 1/2 [00:01<00:01, 1.0it/s]\n"),
        nbformat.v4.new_output("stream", name="stderr", text="2026-12-02 03:40:01,123 WARNING worker.py:1: Token "
                               "authentication is enabled for this Ray cluster.\n"),
        nbformat.v4.new_output("stream", name="stderr", text="/x/y.py:3: FutureWarning: a is deprecated\n  a()\n"),
        nbformat.v4.new_output("stream", name="stdout", text="(raylet) [2026-12-02 03:40:02] started\n"),
    ])  # fmt: skip
    found = stray_lines(nbformat.v4.new_notebook(cells=[cell]))
    assert [line.split(": ", 1)[0] for line in found] == ["cell 0 stderr"] * 3 + ["cell 0 stdout"], found


def test_notebooks_are_present():
    assert NOTEBOOKS, "notebooks/ holds no NN_topic.ipynb"


def strip_anywidget_code(notebook) -> None:
    """Drop the JavaScript anywidget keeps in each widget's saved state: its module (``_esm``) and plotly.js, once
    per figure (``_plotly_js`` of a :class:`agl_lab.ui.live_figure.LiveFigure`)."""
    widgets = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    for model in widgets.get("state", {}).values():
        model.get("state", {}).pop("_esm", None)
        model.get("state", {}).pop("_plotly_js", None)


# Notebook 04 starts a local Ray in its kernel by default (its own cell, then the sweep's cells on it). Its tiny
# test parameters say "serial", which the browser test runs (one JupyterLab, no Ray beside it); here it runs on Ray,
# so Ray's start, its workers' output through the kernel (no stray lines) and the cells on it are checked headless.
ON_RAY = {"04_reproduce_curves": {"EXECUTOR": "ray"}}


@pytest.mark.parametrize(
    "path",
    [pytest.param(path, marks=[pytest.mark.ray] * (path.stem in ON_RAY)) for path in NOTEBOOKS],
    ids=lambda p: p.stem,
)
def test_notebook_executes(path: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    notebook = nbformat.read(path, as_version=4)
    assert any("parameters" in cell.metadata.get("tags", []) for cell in notebook.cells), "no `parameters` cell"
    parameters = {**notebook.metadata.get("agl_lab", {}).get("test_parameters", {}), **ON_RAY.get(path.stem, {})}
    output = tmp_path / path.name
    papermill.execute_notebook(
        str(path), str(output), parameters=parameters, kernel_name="python3", progress_bar=False, cwd=str(tmp_path)
    )
    executed = nbformat.read(output, as_version=4)
    strip_anywidget_code(executed)
    nbformat.write(executed, output)
    # each live figure ships plotly.js (~5 MB) in its saved state; without it the notebook is small
    assert output.stat().st_size < 5_000_000, f"{path.name} executes to {output.stat().st_size / 1e6:.1f} MB"
    errors = [
        o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors, json.dumps(errors, indent=1)[:2000]
    assert not stray_lines(executed), "\n".join(stray_lines(executed))[:2000]
    # the notebook shows something: at least one figure or widget
    kinds = {key for c in executed.cells for o in c.get("outputs", []) for key in o.get("data", {})}
    assert kinds & {"image/png", "application/vnd.jupyter.widget-view+json"}, kinds
