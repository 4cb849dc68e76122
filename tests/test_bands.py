"""Bands across seeds, by hand: mean ± std, the Student-t interval of the mean, each seed, TensorBoard's smoothing."""

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from agl_lab.curves.bands import BAND_LABELS, bands, same_curve_groups, smoothed  # noqa: E402


def table():
    # Setting "on": seeds 0/1/2 give reward 0.1·step + (0, 0.1, 0.2); setting "off": 0.05·step for both seeds.
    rows = []
    for step in range(1, 5):
        for seed, shift in enumerate((0.0, 0.1, 0.2)):
            rows.append(("on", seed, step, "training/reward", 0.1 * step + shift))
        for seed in (0, 1):
            rows.append(("off", seed, step, "training/reward", 0.05 * step))
        rows.append(("on", 0, step, "training/n_sample", 10 + step))
    frame = pd.DataFrame(rows, columns=["setting", "seed", "step", "metric", "value"])
    frame["run"] = frame.setting + "/" + frame.seed.astype(str)
    frame["source"] = "agl_lab"
    return frame


def test_std_band_by_hand():
    out = bands(table(), ["training/reward"])
    on = out[(out.setting == "on") & (out.step == 2)].iloc[0]
    # values 0.2, 0.3, 0.4: mean 0.3, sample std 0.1
    assert on["mean"] == pytest.approx(0.3) and on["n_seeds"] == 3
    assert (on["low"], on["high"]) == pytest.approx((0.2, 0.4))
    off = out[(out.setting == "off") & (out.step == 2)].iloc[0]
    assert (off["low"], off["mean"], off["high"]) == pytest.approx((0.1, 0.1, 0.1))


def test_the_95_interval_is_students_t_of_the_mean():
    out = bands(table(), ["training/reward"], band="ci95")
    on = out[(out.setting == "on") & (out.step == 2)].iloc[0]
    # values 0.2, 0.3, 0.4: s = 0.1, n = 3, t(0.975, 2) = 4.3027 -> half width 4.3027 · 0.1 / √3 = 0.24842
    assert on["n_seeds"] == 3
    assert (on["low"], on["high"]) == pytest.approx((0.3 - 0.24842, 0.3 + 0.24842), abs=1e-5)
    # wider than the seeds' own range (0.2..0.4): three seeds say little about the mean
    assert on["low"] < 0.2 and on["high"] > 0.4
    off = out[(out.setting == "off") & (out.step == 2)].iloc[0]
    assert (off["low"], off["high"]) == pytest.approx((0.1, 0.1))  # both seeds equal: s = 0


def test_one_seed_has_no_interval_and_seeds_band_is_the_mean_alone():
    one = table()
    one = one[one.seed == 0]
    out = bands(one, ["training/reward"], band="ci95")
    assert (out["low"] == out["mean"]).all() and (out["high"] == out["mean"]).all() and (out.n_seeds == 1).all()
    seeds = bands(table(), ["training/reward"], band="seeds")
    assert (seeds["low"] == seeds["mean"]).all() and set(seeds.n_seeds) == {2, 3}
    assert "95% t-interval" in BAND_LABELS["ci95"] and "bootstrap" not in " ".join(BAND_LABELS.values())


@pytest.mark.parametrize(
    ("n", "quantile"),
    # Student's t table, two-sided 95% (p = 0.975) with n - 1 degrees of freedom, e.g. Fisher & Yates
    [(2, 12.7062), (3, 4.3027), (4, 3.1824), (10, 2.2622), (30, 2.0452)],
)
def test_the_ci95_band_is_the_t_interval_of_the_mean(n, quantile):
    # n seeds of one setting at one step: values 0, 1, ..., n-1 → mean (n-1)/2, sample std s, half-width t·s/√n
    values = np.arange(n, dtype=float)
    frame = pd.DataFrame({"setting": "a", "seed": range(n), "run": range(n), "step": 1, "metric": "m", "value": values})
    out = bands(frame, band="ci95").iloc[0]
    half = quantile * values.std(ddof=1) / np.sqrt(n)
    assert (out["low"], out["high"]) == pytest.approx((values.mean() - half, values.mean() + half), rel=1e-4)


def tensorboard_smoothing(values, weight):
    """TensorBoard's scalar smoothing, as its dashboard loops (the reference): a debiased exponential moving average."""
    last, out = 0.0, []
    for n, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**n))
    return out


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.6, 0.95])
def test_smoothing_is_tensorboards_debiased_ema_per_run(weight):
    rng = np.random.default_rng(0)
    values = rng.normal(size=30).cumsum()
    runs = pd.DataFrame({"setting": "a", "seed": np.repeat([0, 1], 30), "run": np.repeat(["r0", "r1"], 30),
                         "step": np.tile(np.arange(1, 31), 2), "metric": "m",
                         "value": np.concatenate([values, -values])})  # fmt: skip
    out = smoothed(runs.sample(frac=1.0, random_state=1), smoothing=weight)  # any row order
    for run, sign in (("r0", 1), ("r1", -1)):
        mine = out[out.run == run].sort_values("step").value.to_numpy()
        assert mine == pytest.approx(tensorboard_smoothing(sign * values, weight), rel=1e-9, abs=1e-12)


def test_smoothing_zero_keeps_the_values_and_the_band_uses_the_smoothed_runs():
    assert smoothed(table(), ["training/n_sample"]).value.tolist() == [11, 12, 13, 14]
    out = bands(table(), ["training/n_sample"], smoothing=0.5)
    # n_sample 11, 12, 13, 14 (one run) -> 11, (12 + .5·11)/1.5, (13 + .5·12 + .25·11)/1.75, ...
    assert out.sort_values("step")["mean"].tolist() == pytest.approx(tensorboard_smoothing([11, 12, 13, 14], 0.5))


@pytest.mark.parametrize("weight", [-0.1, 1.0, 1.5])
def test_smoothing_outside_zero_to_one_is_refused_with_the_range(weight):
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\) \(0: raw values, 0.6: TensorBoard's default"):
        smoothed(table(), smoothing=weight)


def test_settings_with_identical_curves_are_grouped_in_the_given_order():
    stats = pd.DataFrame({"setting": ["b", "a", "c"], "step": [1, 1, 1], "mean": [8.0, 8.0, 9.0],
                          "low": [8.0, 8.0, 9.0], "high": [8.0, 8.0, 9.0]})  # fmt: skip
    assert same_curve_groups(stats, ["a", "b", "c"]) == [["a", "b"], ["c"]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="band must be one of"):
        bands(table(), band="sem")
    with pytest.raises(ValueError, match=r"no rows for metrics \['lab/success_rate'\]"):
        bands(table(), ["lab/success_rate"])


@pytest.mark.parametrize("band", ["ci95", "std"])
def test_bands_never_cross_a_metrics_physical_bounds(band):
    # drops 0, 0, 30 (a count): the t-interval of the mean (10 ± 4.30·17.3/√3) and ± 1 std both reach below 0;
    # success 0.9, 1, 1 (a rate) reaches above 1; a reward has no bounds and keeps the whole interval
    rows = [("a", seed, "run", 1, metric, value)
            for metric, values in (("training/n_sample_dropped/random", (0, 0, 30)), ("lab/success_rate", (0.9, 1, 1)),
                                   ("training/reward", (0.9, 1, 1)))
            for seed, value in enumerate(values)]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["setting", "seed", "run", "step", "metric", "value"])
    out = bands(frame, band=band).set_index("metric")
    assert out.loc["training/n_sample_dropped/random", "low"] == 0.0
    assert out.loc["training/n_sample_dropped/random", "high"] > 10
    assert out.loc["lab/success_rate", "high"] == 1.0 and out.loc["lab/success_rate", "low"] < 0.9667
    reward = out.loc["training/reward"]
    assert reward["high"] > 1.0 and reward["high"] - reward["mean"] == pytest.approx(reward["mean"] - reward["low"])
    assert "cut at the metric's bounds" in BAND_LABELS[band]
