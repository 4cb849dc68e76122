"""Bands across seeds, by hand: mean ± std, a seeded bootstrap interval, trailing smoothing."""

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from agl_lab.curves.bands import bands  # noqa: E402


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


def test_bootstrap_interval_lies_within_the_seeds_and_around_the_mean():
    out = bands(table(), ["training/reward"], band="ci95", n_boot=2000)
    on = out[(out.setting == "on") & (out.step == 2)].iloc[0]
    assert 0.2 - 1e-12 <= on["low"] < on["mean"] < on["high"] <= 0.4 + 1e-12
    again = bands(table(), ["training/reward"], band="ci95", n_boot=2000)
    assert np.allclose(out[["low", "high"]], again[["low", "high"]])  # seeded


def test_smoothing_is_a_trailing_mean_per_run():
    out = bands(table(), ["training/n_sample"], smooth=2)
    # n_sample 11, 12, 13, 14 -> trailing means 11, 11.5, 12.5, 13.5
    assert out.sort_values("step")["mean"].tolist() == pytest.approx([11, 11.5, 12.5, 13.5])


def test_bad_arguments():
    with pytest.raises(ValueError, match="band must be one of"):
        bands(table(), band="sem")
    with pytest.raises(ValueError, match=r"no rows for metrics \['lab/success_rate'\]"):
        bands(table(), ["lab/success_rate"])
