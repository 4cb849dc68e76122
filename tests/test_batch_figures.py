"""The batch figures: rows per rollout by reward, and rows kept or dropped by fate (static matplotlib)."""

import matplotlib
from test_weight_figures import analysis

from agl_lab.lab import batch_figures

matplotlib.use("Agg")


def test_histogram_counts_rollouts_by_rows_and_reward():
    result = analysis()
    ax = batch_figures.rows_per_rollout_histogram(result.rows).axes[0]
    # a (1 row, reward 1), b (2, 0), c (3, 0), d (1, 1): higher reward has two 1-row rollouts, lower one 2 and one 3
    higher, lower = ax.containers
    assert [p.get_height() for p in higher] == [2, 0, 0]
    assert [p.get_height() for p in lower] == [0, 1, 1]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "higher reward (≥ 0.5): 2 rollouts, 1.00 rows each",
        "lower reward (< 0.5): 2 rollouts, 2.50 rows each",
    ]


def test_cap_drops_stacks_rows_by_fate():
    result = analysis()
    ax = batch_figures.cap_drops(result.rows).axes[0]
    counts = result.rows["fate"].value_counts()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == f"kept: {counts['kept']}" and counts["kept"] == 3
    total = sum(p.get_height() for p in ax.patches)
    assert total == len(result.rows) == 7
    assert ax.get_title().startswith("Rows kept for the update: 3 of 7")
