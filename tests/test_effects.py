"""compare_settings against scipy and statsmodels on random tables: paired and unpaired seeds, one pair, zero
variance, NaN metrics, and the bad input it refuses (the real sweep: test_cli)."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ttest_1samp, ttest_rel
from statsmodels.stats.power import TTestPower

import agl_lab
from agl_lab.curves.effects import (
    EFFECT_COLUMNS,
    METHODS,
    UnpairedSeedsWarning,
    compare_metrics,
    compare_settings,
    default_baseline,
    one_sample,
    run_values,
)
from agl_lab.curves.summary import window_mean


def long_table(values: dict[tuple[str, int], list[float]], metric: str = "m") -> pd.DataFrame:
    """A long-form table from {(setting, seed): the metric's value at steps 1..n}, plus a second metric everywhere."""
    rows = []
    for (setting, seed), series in values.items():
        for step, value in enumerate(series, 1):
            rows.append(("agl_lab", f"{setting}/s{seed}", setting, seed, step, metric, value))
            rows.append(("agl_lab", f"{setting}/s{seed}", setting, seed, step, "other", 1.0))
    return pd.DataFrame(rows, columns=["source", "run", "setting", "seed", "step", "metric", "value"])


def random_table(rng, *, settings=("base", "a", "b"), seeds=range(5), steps=10):
    return long_table({(s, seed): rng.normal(i, 1.0, steps).tolist() for i, s in enumerate(settings) for seed in seeds})


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n_seeds=st.integers(2, 8), steps=st.integers(1, 12), window=st.sampled_from(
    ["last_20pct", "first_20pct", "all", "last_minus_first"]))  # fmt: skip
def test_paired_differences_match_scipys_ttest_rel_and_statsmodels_power(seed, n_seeds, steps, window):
    rng = np.random.default_rng(seed)
    table = random_table(rng, seeds=range(n_seeds), steps=steps)
    effects = compare_settings(table, baseline="base", metric="m", window=window)
    assert list(effects.columns) == [*EFFECT_COLUMNS, "method"] and effects.setting.tolist() == ["a", "b"]
    assert set(effects["method"]) == {"paired_t"}
    for row in effects.itertuples():
        # the reference, by hand: per run the window mean of its steps, then scipy on the pairs by seed
        per_run = {
            (s, sd): window_mean(g.sort_values("step")["value"].to_numpy(), window)
            for (s, sd), g in table[table.metric == "m"].groupby(["setting", "seed"])
        }
        a = np.array([per_run[(row.setting, s)] for s in range(n_seeds)])
        b = np.array([per_run[("base", s)] for s in range(n_seeds)])
        test = ttest_rel(a, b)
        interval = test.confidence_interval(0.95)
        assert row.n_pairs == n_seeds
        assert row.mean_diff == pytest.approx((a - b).mean()) and row.sd_diff == pytest.approx((a - b).std(ddof=1))
        expected = (interval.low, interval.high, test.pvalue)
        assert (row.ci_low, row.ci_high, row.p_value) == pytest.approx(expected, nan_ok=True)
        if not (a - b).any():  # one step and last_minus_first: every difference is 0 (scipy's p is NaN)
            assert row.seeds_needed == math.inf
            continue
        effect = abs((a - b).mean()) / (a - b).std(ddof=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its root finder gives up above ~10 sd (then 2 pairs are plenty)
            needed = TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8, alternative="two-sided")
        assert row.seeds_needed == (max(2, math.ceil(needed)) if np.isfinite(needed) else 2)
    assert effects.attrs == {"window": window, "method": "paired_t", "unpaired_seeds": {}}


def test_unpaired_seeds_are_left_out_reported_and_warned_never_paired():
    rng = np.random.default_rng(1)
    values = {("base", s): rng.normal(0, 1, 5).tolist() for s in (0, 1, 2, 3)}
    values |= {("a", s): rng.normal(1, 1, 5).tolist() for s in (0, 1, 2, 7)}  # a has seed 7, base has 3
    table = long_table(values)
    with pytest.warns(UnpairedSeedsWarning, match=r"a: \[3, 7\]"):
        effects = compare_settings(table, baseline="base", metric="m")
    assert effects.attrs["unpaired_seeds"] == {"a": [3, 7]}
    a = [window_mean(values[("a", s)], "last_20pct") for s in (0, 1, 2)]
    b = [window_mean(values[("base", s)], "last_20pct") for s in (0, 1, 2)]
    assert effects.n_pairs[0] == 3 and effects.p_value[0] == pytest.approx(ttest_rel(a, b).pvalue)


def test_a_run_whose_window_has_no_finite_value_is_left_out_and_nans_inside_a_window_are_skipped():
    # base seed 1's last 20% (its last step of 5) is NaN: that seed has no value, so no pair; a seed 0 has a NaN
    # step inside its window "all", which the mean skips
    nan = float("nan")
    values = {("base", 0): [0, 0, 0, 0, 1.0], ("base", 1): [0, 0, 0, 0, nan], ("base", 2): [0, 0, 0, 0, 2.0]}
    values |= {("a", 0): [nan, 1, 1, 1, 3.0], ("a", 1): [0, 0, 0, 0, 5.0], ("a", 2): [0, 0, 0, 0, 3.0]}
    with pytest.warns(UnpairedSeedsWarning, match=r"a: \[1\]"):
        last = compare_settings(long_table(values), baseline="base", metric="m")
    assert last.n_pairs[0] == 2 and last.mean_diff[0] == pytest.approx(((3 - 1) + (3 - 2)) / 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every run has finite values over all its steps: no warning
        every = compare_settings(long_table(values), baseline="base", metric="m", window="all")
    assert every.n_pairs[0] == 3
    assert every.mean_diff[0] == pytest.approx(np.mean([6 / 4 - 1 / 5, 5 / 5 - 0 / 4, 3 / 5 - 2 / 5]))


def test_runs_without_a_seed_are_never_paired():
    table = random_table(np.random.default_rng(2), settings=("base", "a"), seeds=range(3))
    table.loc[table.run == "a/s2", "seed"] = pd.NA
    with pytest.warns(UnpairedSeedsWarning, match=r"run a/s2 \(no seed\)"):
        effects = compare_settings(table, baseline="base", metric="m")
    assert effects.n_pairs[0] == 2 and 2 in effects.attrs["unpaired_seeds"]["a"]


def test_one_pair_has_no_interval_and_no_pair_has_no_difference():
    table = long_table({("base", 0): [1.0], ("a", 0): [1.5], ("b", 1): [2.0], ("base", 1): [1.0]})
    with pytest.warns(UnpairedSeedsWarning):
        effects = compare_settings(table, baseline="base", metric="m").set_index("setting")
    assert effects.loc["a", "n_pairs"] == 1 and effects.loc["a", "mean_diff"] == 0.5
    assert effects.loc["b", "n_pairs"] == 1 and effects.loc["b", "mean_diff"] == 1.0
    for column in ("sd_diff", "ci_low", "ci_high", "p_value", "seeds_needed"):
        assert effects[column].isna().all(), column
    lone = long_table({("base", 0): [1.0], ("a", 1): [1.5]})
    with pytest.warns(UnpairedSeedsWarning):
        none = compare_settings(lone, baseline="base", metric="m")
    assert none.n_pairs[0] == 0 and np.isnan(none.mean_diff[0])


def test_zero_variance_the_same_difference_in_every_pair_and_no_difference_at_all():
    same = {("base", s): [float(s)] * 5 for s in range(3)}
    table = long_table(
        same | {("a", s): [s + 0.25] * 5 for s in range(3)} | {("b", s): [float(s)] * 5 for s in range(3)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's precision warning is expected here and kept quiet
        effects = compare_settings(table, baseline="base", metric="m").set_index("setting")
    a, b = effects.loc["a"], effects.loc["b"]
    assert (a.mean_diff, a.sd_diff, a.ci_low, a.ci_high, a.p_value, a.seeds_needed) == (0.25, 0, 0.25, 0.25, 0, 2)
    assert (b.mean_diff, b.sd_diff, b.ci_low, b.ci_high) == (0, 0, 0, 0)
    assert np.isnan(b.p_value) and b.seeds_needed == math.inf  # scipy's 0/0; no number of pairs resolves 0


def test_a_zero_mean_with_spread_needs_more_than_any_number_of_pairs():
    table = long_table({("base", s): [0.0] for s in range(3)} | {("a", s): [v] for s, v in enumerate((-1.0, 0, 1.0))})
    effects = compare_settings(table, baseline="base", metric="m")
    assert (
        effects.mean_diff[0] == 0 and effects.p_value[0] == pytest.approx(1.0) and effects.seeds_needed[0] == math.inf
    )


def test_a_huge_effect_needs_two_pairs_where_statsmodels_root_finder_gives_up():
    table = long_table({("base", s): [0.0] for s in range(3)} | {("a", s): [100 + 0.01 * s] for s in range(3)})
    assert compare_settings(table, baseline="base", metric="m").seeds_needed[0] == 2


def test_any_logged_metric_and_the_fixed_public_name():
    assert agl_lab.compare_settings is compare_settings
    table = random_table(np.random.default_rng(3), seeds=range(3))
    assert compare_settings(table, baseline="a", metric="other").mean_diff.tolist() == [0.0, 0.0]
    both = compare_metrics(table, baseline="base", metrics=["m", "other"], window="all")
    assert both.metric.tolist() == ["m", "m", "other", "other"] and both.attrs["window"] == "all"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"baseline": "nope"}, r"baseline 'nope' is not a setting of the table; choose one of \['base', 'a', 'b'\]"),
        (
            {"baseline": "base", "metric": "lab/x"},
            r"metric 'lab/x' is not in the table; choose one of \['m', 'other'\]",
        ),
        ({"baseline": "base", "window": "last_10pct"}, r"window must be one of \['first_20pct', 'last_20pct', 'all'"),
        ({"baseline": "base", "method": "bayes"}, r"method must be one of \['paired_t', 'rliable'\], got 'bayes'"),
    ],
)
def test_bad_input_names_the_choices(kwargs, message):
    table = random_table(np.random.default_rng(4), seeds=range(2))
    with pytest.raises(ValueError, match=message):
        compare_settings(table, **({"metric": "m"} | kwargs))


def test_several_runs_of_one_setting_and_seed_are_refused_not_averaged():
    table = random_table(np.random.default_rng(5), settings=("base", "a"), seeds=range(2))
    again = table[table.setting == "a"].assign(run="elsewhere")
    with pytest.raises(ValueError, match="setting 'a' has several runs with seed 0: pairing by seed needs one run"):
        compare_settings(pd.concat([table, again]), baseline="base", metric="m")
    with pytest.raises(ValueError, match=r"the table lacks columns \['seed'\]"):
        run_values(table.drop(columns="seed"), metric="m", window="all")


def test_one_sample_is_scipys_ttest_1samp_against_zero():
    values = np.array([0.3, -0.1, 0.5, 0.2, np.nan])
    out = one_sample(values)
    test = ttest_1samp(values[:4], 0.0)
    interval = test.confidence_interval(0.95)
    assert out["n_pairs"] == 4 and (out["ci_low"], out["ci_high"], out["p_value"]) == pytest.approx(
        (interval.low, interval.high, test.pvalue)
    )


def test_the_default_baseline_is_the_demos_when_swept_else_the_first_and_methods_are_one_table():
    assert default_baseline(["both_on", "both_off"]) == "both_off"
    assert default_baseline(["cap-1", "cap-2"]) == "cap-1"
    with pytest.raises(ValueError, match="no settings"):
        default_baseline([])
    assert list(METHODS) == ["paired_t", "rliable"] and "ttest_rel" in METHODS["paired_t"].label
    assert "stratified-bootstrap" in METHODS["rliable"].label
