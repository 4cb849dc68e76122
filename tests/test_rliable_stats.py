"""compare_settings(method="rliable") against rliable's own functions on a test table: IQM with stratified-bootstrap
intervals, the IQM difference and the probability of improvement; scipy's point estimates; few runs; the verdict."""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import mannwhitneyu, trim_mean
from test_effects import long_table

from agl_lab.curves.effects import EFFECT_COLUMNS, compare_settings
from agl_lab.curves.rliable_stats import REPS, SEED, TooFewRunsWarning, _rliable, rliable_compare
from agl_lab.curves.verdicts import effects_markdown, effects_text


def test_a_test_table_matches_rliables_own_functions():
    rng = np.random.default_rng(3)
    values = {("base", s): rng.normal(0.5, 0.1, 5).tolist() for s in range(6)}
    values |= {("a", s): rng.normal(0.6, 0.1, 5).tolist() for s in range(6)}
    table = long_table(values)
    effects = compare_settings(table, baseline="base", metric="m", window="all", method="rliable")
    assert list(effects.columns[: len(EFFECT_COLUMNS) + 1]) == [*EFFECT_COLUMNS, "method"]
    (row,) = effects.to_dict("records")
    # rliable's own functions on the same per-run values (each run's mean over its steps), seeded the same way
    x = np.array([np.mean(values[("a", s)]) for s in range(6)])[:, None]
    y = np.array([np.mean(values[("base", s)]) for s in range(6)])[:, None]
    library, metrics = _rliable()
    np.random.seed(SEED)
    points, intervals = library.get_interval_estimates(
        {"setting": x, "baseline": y}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=REPS
    )
    diff, diff_ci = library.get_interval_estimates(
        {"d": (x, y)}, lambda s, t: np.array([metrics.aggregate_iqm(s) - metrics.aggregate_iqm(t)]), reps=REPS
    )
    poi, poi_ci = library.get_interval_estimates({"p": (x, y)}, metrics.probability_of_improvement, reps=REPS)
    assert (row["iqm"], row["iqm_low"], row["iqm_high"]) == pytest.approx(
        (points["setting"][0], *intervals["setting"].ravel())
    )
    assert (row["baseline_iqm"], row["baseline_iqm_low"], row["baseline_iqm_high"]) == pytest.approx(
        (points["baseline"][0], *intervals["baseline"].ravel())
    )
    assert (row["mean_diff"], row["ci_low"], row["ci_high"]) == pytest.approx((diff["d"][0], *diff_ci["d"].ravel()))
    assert (row["poi"], row["poi_low"], row["poi_high"]) == pytest.approx((poi["p"], *poi_ci["p"].ravel()))
    # and the point estimates are scipy's: the 25%-trimmed mean, Mann-Whitney U / (m·n)
    assert row["iqm"] == pytest.approx(trim_mean(x.ravel(), 0.25))
    assert row["poi"] == pytest.approx(mannwhitneyu(x.ravel(), y.ravel(), alternative="greater").statistic / 36)
    assert row["n_pairs"] == 6 and np.isnan([row["sd_diff"], row["p_value"], row["seeds_needed"]]).all()
    assert row["method"] == "rliable" and effects.attrs["method"] == "rliable"


def test_the_global_random_state_is_put_back_and_results_repeat():
    a, b = pd.Series([0.1, 0.4, 0.3, 0.9, 0.5]), pd.Series([0.2, 0.1, 0.3, 0.2, 0.4])
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = rliable_compare(a, b)
    assert (np.random.get_state()[1] == before).all()
    assert rliable_compare(a, b) == pytest.approx(first, nan_ok=True)  # NaN where rliable gives no test


def test_fewer_than_two_runs_and_fewer_than_five_are_said():
    one = rliable_compare(pd.Series([0.3]), pd.Series([0.1]))
    assert one["n_pairs"] == 1 and one["mean_diff"] == pytest.approx(0.2) and np.isnan(one["ci_low"])
    with pytest.warns(TooFewRunsWarning, match="on 3 runs per setting: it recommends 5 or more"):
        three = rliable_compare(pd.Series([0.1, 0.5, 0.3]), pd.Series([0.2, 0.1, 0.0]))
    assert np.isfinite(three["poi_low"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", TooFewRunsWarning)
        rliable_compare(pd.Series(np.arange(5.0)), pd.Series(np.zeros(5)))


def test_the_effects_table_and_its_lines_say_which_method_made_them():
    values = {(s, seed): [v + seed * 0.01] * 3 for s, v in (("base", 0.2), ("a", 0.5)) for seed in range(3)}
    with pytest.warns(TooFewRunsWarning):
        effects = compare_settings(long_table(values), baseline="base", metric="m", method="rliable")
    text = effects_text(effects)
    assert "rliable: IQM difference and probability of improvement" in text
    assert "a vs base: IQM 0.51 [0.50, 0.52] vs 0.21 [0.20, 0.22], difference +0.30 [+0.29, +0.31]" in text
    assert "P(improvement) 1.00 [1.00, 1.00], n=3 runs each; rliable recommends ≥ 5 runs" in text
    assert "rliable (Agarwal et al. 2021)" in effects_markdown(effects)
