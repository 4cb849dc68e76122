"""CurveView: plotly curves with a smoothing slider, a run picker over finished runs, copy as command, restore."""

import json

import pytest
from omegaconf import OmegaConf
from test_curves_figures import short_run_history

from agl_lab.curves.history import long_form
from agl_lab.training.runs import finished_runs
from agl_lab.ui.curve_view import CurveView


def fake_run(path, *, seed=0, smoothing=0.6, overlay=(), finished=True):
    """A run directory as agl-lab train leaves it: config.yaml, metrics.jsonl and (when it finished) policy/."""
    path.mkdir(parents=True)
    cfg = {"trainer": {"experiment_name": "short_run"},
           "lab": {"seed": seed, "curve_smoothing": smoothing, "curve_overlay": list(overlay)}}  # fmt: skip
    (path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    lines = short_run_history().to_dict("records")
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if finished:
        (path / "policy").mkdir()
    return path


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake_run(tmp_path / "runs" / "a", seed=4, smoothing=0.9, overlay=["sweeps/s/both_on/seed-0"])
    fake_run(tmp_path / "runs" / "running", finished=False)
    fake_run(tmp_path / "sweeps" / "s" / "both_on" / "seed-0", seed=0)  # a sweep's cell
    return tmp_path


def mean_trace(view, name="both_on (n=1)", axis="x3"):
    return next(t for t in view.figure.data if t.name == name and t.xaxis == axis)


def test_the_picker_offers_finished_runs_and_sweep_cells_only(runs):
    assert [str(p) for p in finished_runs(["runs", "sweeps"])] == ["runs/a", "sweeps/s/both_on/seed-0"]
    assert CurveView().runs.options == ("runs/a", "sweeps/s/both_on/seed-0")


def test_smoothing_moves_the_values_of_the_same_traces_and_zero_is_raw(runs):
    view = CurveView(long_form(short_run_history(), setting="both_on", seed=0), smoothing=0.6)
    traces = view.figure.data
    drops = mean_trace(view)  # the drops panel: rows dropped from same-reward groups 0, 2, 4
    assert list(drops.y) == pytest.approx([0, 2 / 1.6, (4 + 0.6 * 2) / 1.96])  # TensorBoard's debiased EMA
    view.smoothing.value = 0.0
    assert [(t.name, t.xaxis) for t in view.figure.data] == [(t.name, t.xaxis) for t in traces]  # the same traces
    assert list(mean_trace(view).y) == [0, 2, 4]  # raw values
    hover = drops.hovertemplate
    assert all(word in hover for word in ("step %{x}", "%{y", "run: %{customdata[0]}", "seed: %{customdata[1]}"))
    assert tuple(mean_trace(view).customdata[0][:2]) == ("both_on", "0")  # run and seed of each point


def test_picked_runs_are_overlaid_in_grey_and_named_in_hover(runs):
    view = CurveView(long_form(short_run_history(), setting="both_on", seed=0))
    view.runs.value = ("runs/a",)
    overlay = [t for t in view.figure.data if t.legendgroup == "overlay"]
    assert len(overlay) == 3  # one per panel drawn (no loss scale logged)
    assert overlay[0].name == "overlaid runs (1)" and overlay[0].showlegend
    assert overlay[0].customdata[0][0] == "runs/a (agl_lab)" and overlay[0].customdata[0][1] == "4"
    assert view.settings() == {"lab.curve_smoothing": 0.6, "lab.curve_overlay": ["runs/a"]}


def test_restore_takes_a_runs_curve_settings_and_hands_its_config_on(runs):
    restored = []
    view = CurveView(on_restore=restored.append)
    view.restore_button.click()
    assert "pick one run" in view.note.value and not restored
    view.runs.value = ("runs/a",)
    view.restore_button.click()
    assert view.smoothing.value == 0.9 and view.runs.value == ("sweeps/s/both_on/seed-0",)
    assert restored[0].lab.seed == 4 and "restored the settings of <code>runs/a</code>" in view.note.value


def test_a_restored_run_that_is_gone_is_named_not_drawn(runs):
    view = CurveView(overlay=["runs/gone", "runs/a"])
    assert view.runs.value == ("runs/a",) and "not found, not drawn: <code>runs/gone</code>" in view.note.value


def test_copy_as_command_shows_the_line(runs):
    view = CurveView(command=lambda settings: f"agl-lab train lab.curve_smoothing={settings['lab.curve_smoothing']}")
    view.smoothing.value = 0.75
    view.copy_button.click()
    assert view.command_box.value == "agl-lab train lab.curve_smoothing=0.75"  # the view's own settings go along


def test_the_loss_scale_reference_is_a_line_across_its_panel_from_the_mode_catalogue(runs):
    shapes = CurveView().figure.layout.shapes  # no steps needed: a live update never has to move it
    assert [(s.xref, s.yref, s.y0, s.y1, s.name) for s in shapes] == [
        ("x4 domain", "y4", 1.0, 1.0, "token-mean: 1 (catalogue: Σ w = mini-batches per step)")
    ]
