"""Every notebook in notebooks/ runs headless, top to bottom, with the small parameters it declares.

Notebooks are found by glob (no hand-kept list). Each has a cell tagged ``parameters`` holding its real
defaults; the tiny values for the tests live in the notebook's own metadata, ``metadata.agl_lab.test_parameters``,
so a new notebook is tested the day it lands. Execution happens in a temporary directory: run directories
and W&B files a notebook writes never land in the repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import papermill
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_are_present():
    assert NOTEBOOKS, "notebooks/ holds no NN_topic.ipynb"


def strip_anywidget_code(notebook) -> None:
    """Drop the JavaScript anywidget keeps in each widget's saved state (``_esm``): plotly.js, once per figure."""
    widgets = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    for model in widgets.get("state", {}).values():
        model.get("state", {}).pop("_esm", None)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    notebook = nbformat.read(path, as_version=4)
    assert any("parameters" in cell.metadata.get("tags", []) for cell in notebook.cells), "no `parameters` cell"
    parameters = notebook.metadata.get("agl_lab", {}).get("test_parameters", {})
    output = tmp_path / path.name
    papermill.execute_notebook(
        str(path), str(output), parameters=parameters, kernel_name="python3", progress_bar=False, cwd=str(tmp_path)
    )
    executed = nbformat.read(output, as_version=4)
    strip_anywidget_code(executed)
    nbformat.write(executed, output)
    # each plotly FigureWidget ships plotly.js (~5 MB) as its anywidget code; without it the notebook is small
    assert output.stat().st_size < 5_000_000, f"{path.name} executes to {output.stat().st_size / 1e6:.1f} MB"
    errors = [
        o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors, json.dumps(errors, indent=1)[:2000]
    # the notebook shows something: at least one figure or widget
    kinds = {key for c in executed.cells for o in c.get("outputs", []) for key in o.get("data", {})}
    assert kinds & {"image/png", "application/vnd.jupyter.widget-view+json"}, kinds
