import functools

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

from agl_lab import LOSS_MODES, compose_config
from agl_lab.lab import batch_figures, weight_figures
from agl_lab.lab.examples import seed_example
from agl_lab.lab.weighting import analyze_weighting
from conftest import make_rows

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODES = list(LOSS_MODES)


@functools.cache
def analysis():
    """4 rollouts of 1–3 rows in one group, 7 rows; mini-batches of 3 rows with a cap of 1: 3 rows kept."""
    plan = [("q", "a", 1.0, [2]), ("q", "b", 0.0, [1, 2]), ("q", "c", 0.0, [2, 2, 1]), ("q", "d", 1.0, [3])]
    rows = make_rows(plan)
    cfg = compose_config(
        overrides={"algorithm": {"adv_estimator": "grpo"}, "actor_rollout_ref": {"rollout": {"n": 3}}},
        dotlist=["actor_rollout_ref.actor.ppo_mini_batch_size=1", "agentlightning.max_ppo_update_times=1"],
    )
    return analyze_weighting(rows, cfg, seed=1)[0]


def bars(ax):
    return [p for p in ax.patches if p.get_gid() != "highlight"]


def test_figures_are_made_without_pyplot_and_labelled():
    result = analysis()
    open_before = plt.get_fignums()
    figures = {
        "weights": weight_figures.rollout_weight_by_mode(result.rollouts),
        "hist": batch_figures.rows_per_rollout_histogram(result.rows),
        "mass": weight_figures.mass_vs_rows(result.rollouts, mode="token-mean"),
        "cap": batch_figures.cap_drops(result.rows),
    }
    assert plt.get_fignums() == open_before  # nothing left open in pyplot's registry
    for name, fig in figures.items():
        assert isinstance(fig, Figure), name
        ax = fig.axes[0]
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), name
        assert ax.get_legend() is not None, name


def test_drawing_into_a_given_axes_returns_its_figure():
    fig, ax = plt.subplots()
    try:
        assert batch_figures.cap_drops(analysis().rows, ax=ax) is fig
        assert ax.patches
    finally:
        plt.close(fig)


def test_weight_by_mode_bars_are_mean_relative_weights_per_rows_class():
    rows, cfg = seed_example()
    result, _ = analyze_weighting(rows, cfg)
    fig = weight_figures.rollout_weight_by_mode(result.rollouts, modes=["seq-mean-token-mean", "per_rollout_mean:rows"])
    ax = fig.axes[0]
    # classes: B has 1 row, A has 2; seq-mean-token-mean: B 1/3 of the total (× 2 rollouts = 2/3), A 4/3
    heights = [p.get_height() for p in bars(ax)]
    assert heights == pytest.approx([2 / 3, 1.0, 4 / 3, 1.0])  # class 1 for both modes, then class 2
    sums = [t.get_text() for t in ax.texts if t.get_text().startswith("Σ")]
    assert sums == ["Σ = 1", "Σ = 0.667"]  # the batch totals: seq-mean-token-mean 1, v1.0 2/3
    assert [t.get_text() for t in ax.get_legend().get_texts()][-2:] == ["1", "2"]


def test_weight_bars_cover_every_class_up_to_the_largest_rollout():
    # A was split into 3 rows and kept 2, B and C kept their one row, D (3 rows) kept none: the bars are the
    # classes 1, 2, 3 — class 2 holds A although no rollout was aggregated into 2 rows, class 3 is empty.
    rollouts = pd.DataFrame(
        {
            "mode": "token-mean",
            "rollout_level": True,
            "rows": [3, 1, 1, 3],
            "rows_kept": [2, 1, 1, 0],
            "weight": [0.5, 0.2, 0.3, 0.0],
            "relative_weight": [1.5, 0.6, 0.9, 0.0],  # share × 3 trained rollouts
        }
    )
    ax = weight_figures.rollout_weight_by_mode(rollouts).axes[0]
    assert [c.get_label() for c in ax.containers] == ["1", "2", "3"]
    heights = [c.patches[0].get_height() for c in ax.containers]
    assert heights[:2] == pytest.approx([0.75, 1.5]) and np.isnan(heights[2])  # class 1: mean of 0.6 and 0.9
    (whisker_1, whisker_2) = ax.collections[0].get_segments()  # 10th–90th percentile: 0.63–0.87, then 1.5–1.5
    assert whisker_1[:, 1] == pytest.approx([0.63, 0.87]) and whisker_2[:, 1] == pytest.approx([1.5, 1.5])
    assert [t.get_text() for t in ax.texts if t.get_text().startswith("Σ")] == ["Σ = 1"]
    assert ax.get_title().endswith("(3 rollouts trained)")


def test_highlight_moves_to_the_chosen_mode():
    fig = weight_figures.rollout_weight_by_mode(analysis().rollouts, modes=MODES, highlight="token-mean")
    ax = fig.axes[0]
    span = next(p for p in ax.patches if p.get_gid() == "highlight")
    assert span.get_x() == pytest.approx(MODES.index("token-mean") - 0.45)
    weight_figures.highlight_mode(ax, "per_rollout_mean:rollouts", modes=MODES)
    assert [p.get_gid() for p in ax.patches].count("highlight") == 1
    assert span.get_x() == pytest.approx(MODES.index("per_rollout_mean:rollouts") - 0.45)
    weight_figures.highlight_mode(ax, "no-such-mode", modes=MODES)
    assert not span.get_visible()


def test_mass_plot_puts_each_trained_rollout_at_its_mass():
    result = analysis()
    ax = weight_figures.mass_vs_rows(result.rollouts, mode="per_rollout_mean:rows", rollout_level=False).axes[0]
    frame = result.rollouts[(result.rollouts["mode"] == "per_rollout_mean:rows") & ~result.rollouts["rollout_level"]]
    trained = frame[frame["rows_kept"] > 0]
    plotted = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections if isinstance(c, PathCollection)])
    assert sorted(plotted) == pytest.approx(sorted(trained["mass"]))
    assert "rollout-level advantage off" in ax.get_title()


def test_empty_results_draw_a_note_instead_of_failing():
    rows, cfg = seed_example()
    cfg.actor_rollout_ref.actor.ppo_mini_batch_size = 4  # more rows than the batch has: nothing is kept
    with pytest.warns(UserWarning, match="no trainable batch"):
        result, _ = analyze_weighting(rows, cfg)
    texts = [t.get_text() for t in weight_figures.rollout_weight_by_mode(result.rollouts).axes[0].texts]
    assert "no row left after the drops: the trainer skips this step" in texts
    texts = [t.get_text() for t in weight_figures.mass_vs_rows(result.rollouts, mode="token-mean").axes[0].texts]
    assert texts == ["no rollout trained"]
