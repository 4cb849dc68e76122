"""The live weighting panel: what each control recomputes, what the figures receive, hover texts and the rows
table of a clicked rollout, and the static image headless runs keep."""

import json
import re

import comm
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.ticker import MaxNLocator

from agl_lab import LOSS_MODES, compose_config
from agl_lab.config.modes import mode_from_config
from agl_lab.files.batch_io import load_batch, sample_batch_path
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from agl_lab.lab.weighting import analyze_weighting
from agl_lab.ui.weighting_figures import STICKY_FILL, column_range, sticky_range, tick_range
from agl_lab.ui.weighting_panel import WeightingPanel

KNOBS = SyntheticKnobs(n_prompts=4, rollouts_per_prompt=4, break_prob=0.4, seed=5)
SENT: list[dict] = []


class RecordingComm(comm.base_comm.BaseComm):
    """A kernel's comm without the socket: each message serialized as JSON, buffers checked contiguous."""

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        for buffer in buffers or []:
            assert memoryview(buffer).contiguous, "ipykernel refuses non-contiguous buffers"
        SENT.append(json.loads(json.dumps(data or {}, default=str)))


def from_browser(widget, content):
    """A custom message from the widget's view, as ipywidgets hands it to the kernel's widget."""
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})  # noqa: SLF001


@pytest.fixture
def panel(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))
    panel = WeightingPanel(knobs=KNOBS)
    for figure in (panel.bars.widget, panel.scatter.widget):
        from_browser(figure, {"type": "shown"})  # a view drew it: updates go as messages from now on
    SENT.clear()  # what building the panel sent
    return panel


def expected(panel, *, level=None):
    """The analysis the panel should show, computed directly from its widgets' values (as config overrides)."""
    rows, _ = synthetic_rows(panel.knobs_from_widgets())  # the full rows, through trace aggregation
    # the panel's own estimator: with bf16 scores (as Agent Lightning stores them) grpo and grpo_vectorized round apart
    cfg = compose_config(
        overrides={"algorithm": {"adv_estimator": panel.cfg.algorithm.adv_estimator}}, dotlist=panel.dotlist()
    )
    level = panel.settings()["rollout_level"] if level is None else level
    s = panel.settings()
    result, _ = analyze_weighting(rows, cfg, rollout_levels=(level,), seed=s["seed"], dp_size=s["dp_size"])
    return result


def figure_updates():
    """The figure updates sent since the last call (one message per figure update), and that nothing else went."""
    updates = [json.loads(m["content"]["json"]) for m in SENT if m.get("method") == "custom"]
    assert all(m.get("method") != "custom" or m["content"]["type"] == "update" for m in SENT)
    assert not [m for m in SENT if m.get("method") == "update" and {"_figure", "_plotly_js"} & set(m["state"])]
    SENT.clear()
    return updates


def scatter_points(panel):
    return {trace.name: (np.asarray(trace.x), np.asarray(trace.y)) for trace in panel.scatter.widget.figure.data[:3]}


def test_initial_panel_shows_the_direct_analysis(panel):
    # the panel's default estimator is grpo_vectorized on compact rows; the reference runs verl's grpo on full rows
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts, rtol=1e-5)
    assert panel.cfg.algorithm.adv_estimator == "grpo_vectorized"
    assert panel.error is None
    assert "PPO mini-batch = ppo_mini_batch_size × rollout.n = 4 rows" in panel.status.value  # 1 prompt × 4
    # every rollout is in one marker: kept ones by reward, the rest at 0
    assert sum(int(c.sum()) for c in panel.scatter.counts) == panel.result.rollout_groups.n_groups == 16


def test_rollouts_the_plot_would_draw_on_top_of_each_other_share_a_marker():
    panel = WeightingPanel(knobs=SyntheticKnobs(n_prompts=64, rollouts_per_prompt=8, seed=1))
    view = panel.result.view(panel.settings()["mode"], True)  # per_rollout_mean: a few masses per column
    markers = sum(len(m) for m in panel.scatter.members)
    assert markers < len(view.rollout_id) / 4  # 512 rollouts
    assert sum(int(c.sum()) for c in panel.scatter.counts) == len(view.rollout_id)
    traces = panel.scatter.widget.figure.data[:3]
    for trace, members, counts in zip(traces, panel.scatter.members, panel.scatter.counts, strict=True):
        kept = view.rows_kept[members] > 0
        np.testing.assert_allclose(np.asarray(trace.y), np.where(kept, view.mass[members], 0.0))  # drawn at its mass
        np.testing.assert_allclose(np.round(np.asarray(trace.x)), view.rows_kept[members])  # in its column
        for text, count in zip(trace.hovertext, counts, strict=True):
            assert (f"and {count - 1} more here" in text) == (count > 1), text


def test_a_mode_change_moves_the_points_and_the_shading_without_recomputing(panel):
    result = panel.result
    figure_updates()
    panel.controls["mode"].value = "seq-mean-token-mean"
    assert panel.result is result  # every mode was computed already
    updates = figure_updates()
    assert len(updates) == 2  # the shading (a shape of the bars) and the scatter: one message each
    assert updates[0]["traces"] == [] and list(updates[0]["layout"]) == ["shapes"]  # the bars stay as they are
    (shade,) = updates[0]["layout"]["shapes"]
    assert shade["x0"] < panel.modes.index("seq-mean-token-mean") < shade["x1"] and shade["yref"] == "y domain"
    view = result.view("seq-mean-token-mean", True)
    points = scatter_points(panel)
    members = np.concatenate(panel.scatter.members[:2])  # each marker's rollout
    kept = np.concatenate([points["higher reward"][1], points["lower reward"][1]])
    np.testing.assert_allclose(kept, view.mass[members])
    customdata = np.concatenate([np.asarray(t.customdata) for t in panel.scatter.widget.figure.data[:3]])
    np.testing.assert_allclose(customdata, view.weight[np.concatenate(panel.scatter.members)])  # the hover's weight
    assert "seq-mean-token-mean" in panel.summary.value
    assert mode_from_config(compose_config(dotlist=panel.dotlist())) == "seq-mean-token-mean"


def test_every_axis_has_a_range_that_holds_its_data(panel):
    # a frame without a redraw does not autorange: the panel gives every axis its range (test_sticky_range), and
    # each update only the ones that changed (plotly redraws every axis an update names)
    figure_updates()
    before = [panel.bars.widget.figure.layout, panel.scatter.widget.figure.layout]
    panel.controls["seed"].value = 3
    bars, scatter = figure_updates()
    for update, old, figure in ((bars, before[0], panel.bars.widget), (scatter, before[1], panel.scatter.widget)):
        for path, value in update["layout"].items():
            *parents, last = path.split(".")
            assert list(old[parents[0]][last]) != list(value), path  # sent because it changed
        for axis in [a for a in figure.figure.layout if a.startswith(("xaxis", "yaxis"))]:
            low, high = figure.figure.layout[axis].range
            if f"{axis}.range" not in update["layout"]:
                assert tuple(old[axis].range) == (low, high), axis
    for figure, axes in ((panel.bars.widget.figure, ("", "2", "3")), (panel.scatter.widget.figure, ("",))):
        for axis in axes:
            x_low, x_high = figure.layout[f"xaxis{axis}"].range
            y_low, y_high = figure.layout[f"yaxis{axis}"].range
            on_axis = [t for t in figure.data if (t.xaxis or "x") == f"x{axis}" and t.y is not None and len(t.y)]
            xs = np.concatenate([np.asarray(t.x, dtype=float) for t in on_axis])
            tops = [np.asarray(t.y, dtype=float) + (t.base if getattr(t, "base", None) is not None else 0.0)
                    for t in on_axis]  # fmt: skip
            ys = np.concatenate(tops)
            assert x_low <= np.nanmin(xs) and np.nanmax(xs) <= x_high, (axis, xs)
            assert y_low <= np.nanmin(ys) and np.nanmax(ys) <= y_high, (axis, ys)


@settings(max_examples=300, deadline=None)
@given(
    data=st.tuples(st.floats(-1e3, 1e3), st.floats(0, 1e3)),
    current=st.none() | st.tuples(st.floats(-1e3, 1e3), st.floats(1e-3, 1e3)),
)
def test_sticky_range(data, current):
    low, span = data
    high = low + span
    current = None if current is None else [current[0], current[0] + current[1]]
    got = sticky_range(current, low, high)
    assert got[0] <= low and high <= got[1]  # it holds the data
    assert sticky_range(got, low, high) == got  # and stays for the same data
    holds = current is not None and current[0] <= low and high <= current[1]
    if holds and span >= STICKY_FILL * (current[1] - current[0]):
        assert got == current  # a range that holds the data and is not too wide for them stays
    elif current is None:
        ticks = MaxNLocator(nbins=5).tick_values(low, high)
        assert got == [min(ticks[0], low), max(ticks[-1], high)]  # the data's own range, out to their ticks
    if span > 0:
        assert span >= STICKY_FILL * (got[1] - got[0]) or got == tick_range(low, high)  # not too wide, or the fit's


def test_column_axes_fit_their_columns_and_keep_a_wider_range_that_holds_them():
    assert sticky_range(None, 0.5, 7.5, column_range) == [0.5, 7.5]  # columns: their own range, not rounded out
    assert sticky_range([0.5, 9.5], 0.5, 7.5, column_range) == [0.5, 9.5]
    assert sticky_range([0.5, 30.5], 0.5, 7.5, column_range) == [0.5, 7.5]  # far too wide: back to the columns


def test_each_modes_loss_scale_is_a_trace_that_follows_the_batch(panel):
    # a frame leaves tick text as drawn: the batch's loss scale Σ under each mode is a text trace, sent when it changes
    def drawn_sums():
        trace = panel.bars.widget.figure.data[panel.bars.totals]
        assert trace.mode == "text" and list(trace.y) == [panel.bars.top] * len(panel.modes)  # at the axis' top
        return list(trace.text)

    def batch_sums():
        totals = panel.result.totals.drop_duplicates("mode").set_index("mode")["total_weight"]
        return [f"Σ={totals[mode]:.3g}" for mode in panel.modes]

    assert drawn_sums() == batch_sums()
    before = drawn_sums()
    figure_updates()
    panel.controls["seed"].value = 3
    bars, _ = figure_updates()
    assert drawn_sums() == batch_sums() != before  # the token modes' scales moved with the new rows
    assert bars["data"][bars["traces"].index(panel.bars.totals)]["text"] == batch_sums()
    assert not any(key.endswith("ticktext") for key in bars["layout"])


def test_every_trace_of_the_panel_is_clipped_to_its_axes_as_a_whole(panel):
    # one trace with cliponaxis=False makes plotly clip each bar and error bar of its subplot on its own (216 clip
    # paths at 18 modes), and the page lays out every such clip again in each frame (bench_browser: ~3 ms a change)
    for figure in (panel.bars.widget.figure, panel.scatter.widget.figure):
        assert [t.cliponaxis for t in figure.data if t.cliponaxis is False] == []


def test_axes_stay_where_they_are_when_a_setting_goes_back_and_forth(panel):
    # toggling a setting back and forth compares two states by eye: the axes keep a range while it holds the data
    # (and each range that moves makes the browser relay the figure out)
    figure_updates()
    for value in (3, 0, 3, 0):
        panel.controls["seed"].value = value
        sent = [sorted(k for k in update["layout"] if k.endswith(".range")) for update in figure_updates()]
        if value == 0 and sent != [[], []]:
            pytest.fail(f"seed {value} again moved {sent}")
    for figure in (panel.bars.widget.figure, panel.scatter.widget.figure):  # and every range still holds its data
        for trace in figure.data:
            if trace.y is None or not len(trace.y) or getattr(trace, "mode", None) == "text":
                continue
            x_axis, y_axis = (trace.xaxis or "x").replace("x", "xaxis"), (trace.yaxis or "y").replace("y", "yaxis")
            base = np.asarray(trace.base, dtype=float) if getattr(trace, "base", None) is not None else 0.0
            ys = np.asarray(trace.y, dtype=float) + base
            xs = np.broadcast_to(np.asarray(trace.x, dtype=float), ys.shape)[np.isfinite(ys)]  # drawn points only
            if not len(xs):  # a class with no rollout in this batch
                continue
            (x_low, x_high), (y_low, y_high) = figure.layout[x_axis].range, figure.layout[y_axis].range
            assert x_low <= np.nanmin(xs) and np.nanmax(xs) <= x_high, trace.name
            assert y_low <= np.nanmin(ys) and np.nanmax(ys) <= y_high, trace.name


def test_hover_text_names_the_rollout_and_its_numbers(panel):
    trace = panel.scatter.widget.figure.data[0]
    index = panel.scatter.members[0][0]
    view = panel.result.view(panel.settings()["mode"], True)
    text = trace.hovertext[0]
    for part in (f"rollout {view.rollout_id[index]}", f"uid {view.uid[index]}", "rows ", "tokens ", "reward ",
                 f"advantage {view.advantage[index]:.3g}", "kept"):  # fmt: skip
        assert part in text, (part, text)
    assert "weight %{customdata:.3g}" in trace.hovertemplate and "mass %{y:.3g}" in trace.hovertemplate


def test_a_click_lists_the_rollouts_rows(panel):
    view = panel.result.view(panel.settings()["mode"], True)
    multi = int(np.flatnonzero(view.rows > 1)[0])  # a rollout split into several rows
    table = panel.show_rollout(multi)
    rollout_id = view.rollout_id[multi]
    assert len(table) == view.rows[multi] and set(table["rollout_id"]) == {rollout_id}
    assert f"data-rollout='{rollout_id}'" in panel.table.value
    assert panel.table.value.count("<tr>") == view.rows[multi] + 1  # a header, then a line per row
    np.testing.assert_allclose(table["weight"].sum(), view.weight[multi])
    # a click in the browser reaches the same table: the trace's n-th point is its n-th member
    trace, point = next((t, len(m) - 1) for t, m in enumerate(panel.scatter.members) if len(m))
    rollout = panel.scatter.members[trace][point]
    from_browser(panel.scatter.widget, {"type": "click", "trace": trace, "point": point})
    assert f"data-rollout='{view.rollout_id[rollout]}'" in panel.table.value
    from_browser(panel.scatter.widget, {"type": "click", "trace": 3, "point": 0})  # a column mean's line: no rollout
    assert f"data-rollout='{view.rollout_id[rollout]}'" in panel.table.value


def test_setting_the_cap_recomputes_and_redraws_both_figures(panel):
    figure_updates()
    panel.controls["max_ppo_update_times"].value = 1
    assert panel.settings()["max_ppo_update_times"] == 1
    assert "agentlightning.max_ppo_update_times=1" in panel.dotlist()
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts, rtol=1e-5)
    assert panel.result.totals["rows_kept"].unique().tolist() == [4]  # one mini-batch of 4 rows
    assert len(figure_updates()) == 2  # bars and scatter, one message each
    dropped = panel.scatter.counts[panel.scatter.GROUPS.index("no row kept")]
    assert dropped.sum() == (panel.result.rows_kept == 0).sum() > 0


def test_micro_batch_and_dp_controls_move_geo_mean(panel):
    panel.controls["ppo_mini_batch_size"].value = 2  # 8 rows per mini-batch
    panel.controls["mode"].value = "geo_mean"
    whole = panel.result.rollout_weight("geo_mean").sum()
    panel.controls["micro"].value = 2  # 4 micro-batches per mini-batch: each adds up to 1
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2" in panel.dotlist()
    assert panel.result.rollout_weight("geo_mean").sum() == pytest.approx(4 * whole, rel=1e-6)
    panel.controls["dp_size"].value = 2  # gradients averaged over 2 ranks: half
    assert panel.result.rollout_weight("geo_mean").sum() == pytest.approx(2 * whole, rel=1e-6)
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts, rtol=1e-5)


def test_a_mode_agent_lightning_cannot_train_is_shown_but_left_out_of_the_overrides(panel):
    panel.controls["mode"].value = "trl:dr_grpo"
    assert not LOSS_MODES["trl:dr_grpo"].trainable
    assert not any("loss_mode" in line or "loss_agg_mode" in line for line in panel.dotlist())
    assert "not trainable in Agent Lightning's trainer" in panel.summary.value


def test_rollout_level_toggle_shows_the_other_advantage(panel):
    on = panel.result
    panel.controls["rollout_level"].value = False
    assert set(panel.result.rollouts["rollout_level"]) == {False}
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts, rtol=1e-5)
    assert "algorithm.enable_rollout_level_advantage=false" in panel.dotlist()
    panel.controls["rollout_level"].value = True
    assert panel.result is on  # cached: toggling back recomputes nothing


def test_generator_knobs_regenerate_the_batch(panel):
    panel.controls["success_prob"].value = 1.0
    assert set(panel.result.rows["reward"]) == {1.0}
    panel.controls["level"].value = "transition"
    panel.controls["calls"].value = "fixed"
    panel.controls["max_calls"].value = 2
    assert set(panel.result.rows["rows_in_rollout"]) == {2}  # 2 calls, one row each
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts, rtol=1e-5)


def test_out_of_range_values_are_clamped_where_they_are_typed(panel):
    panel.controls["n_prompts"].value = -5
    assert panel.controls["n_prompts"].value == 1
    panel.controls["success_prob"].value = 1.7
    assert panel.controls["success_prob"].value == 1.0
    panel.controls["ppo_mini_batch_size"].value = 0
    assert panel.controls["ppo_mini_batch_size"].value == 1
    assert panel.result.rows["rollout_id"].nunique() == 4  # 1 prompt × 4 rollouts, recomputed
    assert panel.error is None


def test_a_refused_combination_is_shown_in_red_and_the_last_result_stays(panel):
    result = panel.result
    figure_updates()
    panel.controls["min_tokens"].value = 40  # above max_tokens (32)
    assert panel.error == "SyntheticKnobs.min_tokens (40) must be <= max_tokens (32)"
    assert "Refused:" in panel.status.value and "#b00020" in panel.status.value
    assert panel.result is result and figure_updates() == []
    with pytest.raises(ValueError, match=re.escape("min_tokens (40) must be <= max_tokens (32)")):
        panel.recompute()
    panel.controls["max_tokens"].value = 48
    assert panel.error is None and panel.result is not result


def test_a_mini_batch_larger_than_the_batch_warns_and_trains_nothing(panel):
    panel.controls["ppo_mini_batch_size"].value = 100  # 400 rows per mini-batch, the batch has ~25
    assert "no trainable batch" in panel.status.value
    assert (panel.result.totals["rows_kept"] == 0).all()


def test_headless_runs_keep_a_static_image(panel):
    data, _ = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["image/png"].startswith("iVBORw0KGgo")  # base64 of a PNG header


def test_panel_on_a_loaded_batch_has_no_generator_knobs():
    rows = load_batch(sample_batch_path())
    panel = WeightingPanel(rows=rows)
    assert "n_prompts" not in panel.controls and "seed" in panel.controls
    assert panel.rollouts_per_prompt == 4  # 12 prompts × 4 rollouts
    assert len(panel.result.rows) == len(rows) == 81
    panel.controls["max_ppo_update_times"].value = 1
    assert (panel.result.rows["fate"] == "kept").sum() == 4 * panel.settings()["ppo_mini_batch_size"]
