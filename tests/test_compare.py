import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from agl_lab.compare import bands, plot_bands, plot_panels, save_figure  # noqa: E402


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
    with pytest.raises(ValueError, match="none of the panel metrics"):
        plot_panels(table()[table().metric == "nothing"].assign(metric="x"))


def test_panels_keep_only_metrics_present_and_save_png_and_svg(tmp_path):
    fig = plot_panels(table(), band="ci95", overlay=table().assign(source="wandb", run="real"))
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == ["success / reward", "rows vs rollouts per step"]  # reward stands in for the missing success
    paths = save_figure(fig, tmp_path / "panels")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)
    single = plot_bands(table(), "training/reward")
    legend = single.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["off (n=2)", "on (n=3)"]
    assert legend.get_title().get_text() == "mean ± 1 std across seeds"  # the band is always labelled
