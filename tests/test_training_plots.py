import matplotlib
import pandas as pd
import pytest
from matplotlib.figure import Figure

from agl_lab import training_plots

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def short_run_history():
    """3 steps of a short run; step 3 dropped 4 rows from same-reward groups and 2 at random."""
    return pd.DataFrame(
        {
            "step": [1, 2, 3],
            "lab/success_rate": [0.0, 0.5, 1.0],
            "training/n_sample": [12, 10, 14],
            "training/n_rollouts": [8, 8, 8],
            "training/n_sample_trained": [12, 8, 8],
            "training/n_sample_dropped/same_reward": [0, 2, 4],
            "training/n_sample_dropped/random": [0, 0, 2],
            "training/n_sample_dropped/marked": [0, 0, 0],
        }
    )


def test_figures_are_made_without_pyplot_and_labelled():
    open_before = plt.get_fignums()
    fig = training_plots.n_rows_vs_n_rollouts(pd.DataFrame({"n_rows": [5, 4], "n_rollouts": [3, 3]}))
    assert plt.get_fignums() == open_before and isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and ax.get_legend() is not None


def test_n_rows_vs_n_rollouts_reads_agent_lightnings_metric_names():
    history = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "training/rollout_level_advantage/n_rows": [12, 10, 8],
            "training/rollout_level_advantage/n_rollouts": [6, 6, 6],
        }
    )
    fig = training_plots.n_rows_vs_n_rollouts(history)
    ax, scale = fig.axes
    n_rows, n_rollouts = ax.lines[:2]
    assert n_rows.get_ydata().tolist() == [12, 10, 8] and n_rollouts.get_ydata().tolist() == [6, 6, 6]
    # the v1.0 batch total n_rollouts / n_rows: 1/2, 3/5, 3/4
    assert scale.lines[0].get_ydata() == pytest.approx([0.5, 0.6, 0.75])


def test_success_curve_draws_the_rate_and_its_rolling_mean():
    ax = training_plots.success_curve(short_run_history(), window=2, label="run a").axes[0]
    smooth, raw = ax.lines
    assert raw.get_ydata().tolist() == [0.0, 0.5, 1.0]
    assert smooth.get_ydata().tolist() == pytest.approx([0.0, 0.25, 0.75])  # means of (0), (0, .5), (.5, 1)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["run a"]


def test_step_rows_stacks_trained_and_dropped_rows_to_the_collected_count():
    ax = training_plots.step_rows(short_run_history()).axes[0]
    heights = {}
    for bar in ax.patches:
        heights.setdefault(bar.get_x() + bar.get_width() / 2, []).append(bar.get_height())
    assert [sum(v) for _, v in sorted(heights.items())] == [12, 10, 14]  # = training/n_sample per step
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["kept: 28", "dropped: same-reward group: 6", "dropped: random: 2"]  # no marked drops: no entry


def test_training_overview_and_compare_runs_draw_every_panel():
    history = short_run_history()
    overview = training_plots.training_overview(history, title="t")
    assert len(overview.axes) == 4  # success, n_rows vs n_rollouts (+ its scale axis), rows per step
    figures = training_plots.compare_runs(
        {"on": history, "off": history.assign(**{"lab/success_rate": [0.0, 0.0, 0.5]})}
    )
    assert set(figures) == {"success", "rows_vs_rollouts", "drops"}
    assert [t.get_text() for t in figures["success"].axes[0].get_legend().get_texts()] == ["on", "off"]
    assert [ax.get_title().split("\n")[0] for ax in figures["drops"].axes] == ["on", "off"]
    counts = training_plots.aggregated_counts(history)
    assert counts["n_rows"].tolist() == [12, 10, 14] and counts["n_rollouts"].tolist() == [8, 8, 8]
