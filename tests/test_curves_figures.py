"""History figures: one family over the long-form table, for one run (long_form) or settings × seeds."""

import matplotlib
import pandas as pd
import pytest
from matplotlib.figure import Figure
from test_bands import table

from agl_lab.curves.figures import (
    PANELS,
    draw_panel,
    plot_bands,
    plot_panels,
    save_figure,
    save_panels,
    setting_colours,
)
from agl_lab.curves.history import long_form

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
        }
    )


def test_one_runs_history_in_long_form_draws_every_standard_panel():
    open_before = plt.get_fignums()
    runs = long_form(short_run_history(), setting="run a", seed=0)
    assert set(runs.metric) == set(short_run_history().columns) - {"step"}
    fig = plot_panels(runs, title="one run")
    assert plt.get_fignums() == open_before and isinstance(fig, Figure)  # made without pyplot
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == [PANELS[p].title for p in ("success", "rows_vs_rollouts", "drops")]  # no loss scale logged
    rows = fig.axes[1]
    n_rows, n_rollouts = rows.lines[:2]
    assert n_rows.get_ydata().tolist() == [12, 10, 14] and n_rollouts.get_ydata().tolist() == [8, 8, 8]
    assert [t.get_text() for t in rows.get_legend().get_texts()] == ["run a · n_rows (n=1)", "run a · n_rollouts (n=1)"]


def test_a_panel_whose_metrics_are_missing_is_refused_by_name():
    runs = long_form(short_run_history(), setting="a")
    with pytest.raises(ValueError, match="none of the metrics of panel 'loss_scale'"):
        draw_panel(runs, "loss_scale")
    with pytest.raises(ValueError, match="none of the panel metrics"):
        plot_panels(runs.assign(metric="x"))


def test_each_setting_keeps_its_colour_in_every_figure():
    colours = setting_colours(["zeta", "both_off", "both_on", "alpha"])
    # the demo's settings keep theirs (both_on blue, both_off orange) whatever else is drawn; others by name
    assert colours == {"both_on": "C0", "both_off": "C1", "alpha": "C3", "zeta": "C4"}
    assert setting_colours(["both_off"])["both_off"] == "C1"


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


def test_save_panels_writes_the_combined_figure_and_one_file_per_panel(tmp_path):
    saved = save_panels(long_form(short_run_history(), setting="a"), tmp_path)
    assert set(saved) == {"panels", "success", "rows_vs_rollouts", "drops"}
    assert all(path.exists() and path.suffix == ".png" for path in saved.values())
