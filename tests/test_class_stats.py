"""Per rows-per-rollout class statistics, against plain pandas/numpy references on random batches."""

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_lab.core.groups import group_rows
from agl_lab.core.pipeline import FATES
from agl_lab.lab.class_stats import MAX_CLASS, class_weights, fate_counts, row_classes, size_counts


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), n_modes=st.integers(1, 5))
def test_class_weights_are_numpys_mean_and_percentiles(seed, n, n_modes):
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 9, n)  # as aggregated, some above MAX_CLASS
    kept = np.minimum(rows, rng.integers(0, 9, n))
    relative = rng.choice([0.5, 1.0, 2.0, rng.random()], size=(n_modes, n))  # ties, as real weights have
    relative[-1] = relative[0]  # modes that weigh alike share a computation
    weight = rng.random((n_modes, n))
    stats = class_weights(rows, kept, relative, weight, [f"m{i}" for i in range(n_modes)])
    assert stats.classes.tolist() == list(range(1, min(rows.max(), MAX_CLASS) + 1))
    trained = kept > 0
    for j, cls in enumerate(stats.classes):
        pick = trained & (np.minimum(kept, MAX_CLASS) == cls)
        for m in range(n_modes):
            values = relative[m, pick]
            if not len(values):
                assert np.isnan(stats.mean[j, m]) and np.isnan(stats.low[j, m])
                continue
            np.testing.assert_allclose(stats.mean[j, m], values.mean())
            np.testing.assert_allclose([stats.low[j, m], stats.high[j, m]], np.quantile(values, [0.1, 0.9]))
    np.testing.assert_allclose(stats.totals, weight[:, trained].sum(axis=1))
    assert stats.n_rollouts == trained.sum()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 50))
def test_fate_and_size_counts_are_pandas_crosstabs(seed, n):
    rng = np.random.default_rng(seed)
    rollout = rng.integers(0, max(n // 2, 1), n)
    groups = group_rows(rollout, field="rollout")
    fate = rng.choice(np.array(FATES, dtype=object), n)
    counts = fate_counts(groups, fate)  # (fates, classes)
    classes = np.minimum(groups.sizes[groups.codes], MAX_CLASS)
    table = pd.crosstab(pd.Categorical(fate, categories=list(FATES)), classes, dropna=False)
    for i, name in enumerate(FATES):
        for cls in range(1, counts.shape[1] + 1):
            assert counts[i, cls - 1] == (table.loc[name, cls] if cls in table.columns else 0)
    reward = rng.random(groups.n_groups)
    higher, lower = size_counts(groups.sizes, reward)
    midpoint = (reward.min() + reward.max()) / 2
    assert higher.sum() == (reward >= midpoint).sum() and lower.sum() == (reward < midpoint).sum()
    assert np.bincount(groups.sizes - 1, minlength=len(higher)).tolist() == (higher + lower).tolist()


def test_row_classes_follow_the_data_and_pool_only_when_asked():
    # verl PR #7580's ablation has trajectories of 10 rows: each row count the data has is its own class
    sizes = np.array([1, 10, 3, 10, 14, 1, 7])
    classes, labels = row_classes(sizes)
    assert classes.tolist() == sizes.tolist()
    assert labels == {1: "1", 3: "3", 7: "7", 10: "10", 14: "14"}
    # the weighting panel's figures keep one trace per class: they pool at MAX_CLASS
    pooled, pooled_labels = row_classes(sizes, cap=MAX_CLASS)
    assert pooled.tolist() == [1, 6, 3, 6, 6, 1, 6]
    assert pooled_labels == {1: "1", 2: "2", 3: "3", 4: "4", 5: "5", 6: "6+"}
    assert row_classes(np.array([2, 6]), cap=MAX_CLASS)[1][6] == "6"  # nothing above the cap: no "+"
