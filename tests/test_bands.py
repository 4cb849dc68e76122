"""Bands across seeds, by hand: mean ± std, the Student-t interval of the mean, each seed, trailing smoothing."""

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from agl_lab.curves.bands import BAND_LABELS, bands, t_quantile  # noqa: E402


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
    ("df", "quantile"),
    # Student's t table, two-sided 95% (p = 0.975), e.g. Fisher & Yates; df = 1 is tan(0.475 π) = 12.7062
    [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622), (29, 2.0452), (120, 1.9799)],
)
def test_t_quantiles_match_the_printed_table(df, quantile):
    assert t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-4)


def test_t_quantile_has_the_closed_form_at_two_degrees_of_freedom():
    # df = 2: F(x) = 1/2 + x / (2 √(2 + x²)), so the p quantile is (2p − 1) · √(2 / (1 − (2p − 1)²))
    for p in (0.6, 0.9, 0.995):
        a = 2 * p - 1
        assert t_quantile(p, 2) == pytest.approx(a * np.sqrt(2 / (1 - a * a)), rel=1e-7)
    with pytest.raises(ValueError, match="0.5 < p < 1 and df >= 1"):
        t_quantile(0.975, 0)


def test_smoothing_is_a_trailing_mean_per_run():
    out = bands(table(), ["training/n_sample"], smooth=2)
    # n_sample 11, 12, 13, 14 -> trailing means 11, 11.5, 12.5, 13.5
    assert out.sort_values("step")["mean"].tolist() == pytest.approx([11, 11.5, 12.5, 13.5])


def test_bad_arguments():
    with pytest.raises(ValueError, match="band must be one of"):
        bands(table(), band="sem")
    with pytest.raises(ValueError, match=r"no rows for metrics \['lab/success_rate'\]"):
        bands(table(), ["lab/success_rate"])
