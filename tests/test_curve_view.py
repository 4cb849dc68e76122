"""CurveView: plotly curves with a smoothing slider, a run picker over finished runs, copy as command, restore."""

import json

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from test_curves_figures import short_run_history

from agl_lab.curves.bands import bands
from agl_lab.curves.history import long_form
from agl_lab.curves.plotly_curves import panel_traces
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


@pytest.mark.parametrize(("band", "smoothing"), [("std", 0.6), ("ci95", 0.0), ("seeds", 0.9)])
def test_every_drawn_curve_is_bands_numbers_for_its_setting_and_metric(band, smoothing):
    # three settings, two or three seeds of ragged lengths, a NaN, and a setting whose curves copy another's: each
    # bold line, band and faint logged line must be bands()' own numbers for its (setting, metric)
    rng = np.random.default_rng(3)
    parts = []
    for setting, seeds in (("both_on", 3), ("off", 2), ("rl_only", 1)):
        for seed in range(seeds):
            steps = int(rng.integers(4, 12))
            history = pd.DataFrame({"step": np.arange(1, steps + 1), "lab/success_rate": rng.random(steps),
                                    "training/n_sample": rng.integers(8, 20, steps).astype(float)})  # fmt: skip
            history.loc[2, "lab/success_rate"] = np.nan
            parts.append(long_form(history, setting=setting, seed=seed).assign(run=f"{setting}/seed-{seed}"))
    table = pd.concat(parts, ignore_index=True)
    table = pd.concat([table, table[table.setting == "off"].assign(setting="copy", run="copy")], ignore_index=True)
    traces = panel_traces(table, band=band, smoothing=smoothing)
    checked = 0
    for metric in ("lab/success_rate", "training/n_sample"):
        stats = bands(table, [metric], band=band, smoothing=smoothing)
        logged = bands(table, [metric], band="seeds")
        for key, trace in traces.items():
            if not key.startswith("mean|"):
                continue
            _kind, _panel, drawn_metric, group = key.split("|")
            if drawn_metric != metric:
                continue
            settings = group.split("+")
            assert ("off" in settings) == ("copy" in settings)  # the copy shares the curve it copies
            own = stats[stats.setting == settings[0]].sort_values("step")
            np.testing.assert_array_equal(trace["x"], own.step.to_numpy(float))
            np.testing.assert_array_equal(trace["y"], own["mean"].to_numpy(float))
            as_logged = logged[logged.setting == settings[0]].sort_values("step")["mean"]
            assert [row[2] for row in trace["customdata"]] == [f"{v:.4g}" for v in as_logged]
            if f"band|{key[5:]}" in traces:
                edge = traces[f"band|{key[5:]}"]["y"]
                np.testing.assert_array_equal(edge, np.r_[own["high"].to_numpy(), own["low"].to_numpy()[::-1]])
            checked += 1
    assert checked == 2 * 3  # per metric: both_on, off and its copy as one, rl_only
