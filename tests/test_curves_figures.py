"""History figures: one family over the long-form table, for one run (long_form) or settings × seeds."""

import matplotlib
import pandas as pd
import pytest
from matplotlib.figure import Figure
from test_bands import table

from agl_lab.curves.figures import draw_panel, plot_bands, plot_panels, save_figure, save_panels
from agl_lab.curves.history import long_form
from agl_lab.curves.panels import PANELS
from agl_lab.curves.style import PALETTE, RAW_OPACITY, SHARED_COLOUR, setting_colours

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
    assert fig.get_suptitle() == "one run (one seed per setting (n = 1): no band)"
    rows = fig.axes[1]
    assert rows.get_ylabel() == "rows or rollouts per step (count)"
    # per metric: the smoothed line (bold), then the values as logged (faint)
    n_rows, n_rows_logged, n_rollouts = rows.lines[:3]
    assert n_rows_logged.get_ydata().tolist() == [12, 10, 14] and n_rollouts.get_ydata().tolist() == [8, 8, 8]
    # TensorBoard's debiased EMA at 0.6: 12, (10 + .6·12)/1.6 = 10.75, (14 + .6·10 + .36·12)/1.96 = 12.408
    assert n_rows.get_ydata().tolist() == pytest.approx([12, 10.75, 12.408163], rel=1e-6)
    assert n_rows_logged.get_alpha() == RAW_OPACITY and n_rows.get_linewidth() > n_rows_logged.get_linewidth()
    # one entry for the setting (its colour, its seeds), one per line style, then the smoothing
    assert [t.get_text() for t in rows.get_legend().get_texts()] == [
        "run a (n=1)",
        "rows",
        "rollouts",
        "bold: debiased EMA, smoothing 0.6; faint: as logged",
    ]


def test_success_per_rollout_and_score_per_row_share_a_panel():
    history = short_run_history().assign(**{"critic/score/mean": [0.0, 0.25, 1.0]})
    ax = draw_panel(long_form(history, setting="both_on"), "success", smoothing=0).axes[0]
    success, score = ax.lines[:2]  # smoothing 0: no faint copy
    assert success.get_ydata().tolist() == [0.0, 0.5, 1.0] and score.get_ydata().tolist() == [0.0, 0.25, 1.0]
    assert (success.get_linestyle(), score.get_linestyle()) == ("-", "--")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["both_on (n=1)", "success rate", "mean score per row (k rows count k times)",
                      "lines: values as logged"]  # fmt: skip
    assert ax.get_ylabel() == "success / score (share of rollouts; reward)"


def test_a_curve_several_settings_share_is_drawn_once_in_grey_with_one_legend_entry():
    # three settings, one seed each: n_rows differ, n_rollouts is 8 at every step for all three
    table = pd.concat(
        [
            long_form(short_run_history().assign(**{"training/n_sample": rows}), setting=name, seed=0)
            for name, rows in (("both_on", [12, 10, 9]), ("both_off", [12, 11, 11]), ("both_on_cap2", [13, 10, 9]))
        ]
    )
    ax = draw_panel(table, "rows_vs_rollouts", smoothing=0).axes[0]
    assert len(ax.lines) == 4  # three n_rows lines and one n_rollouts line
    shared = ax.lines[-1]
    assert shared.get_color() == SHARED_COLOUR and shared.get_ydata().tolist() == [8, 8, 8]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "both_on (n=1)",  # in the table's order
        "both_off (n=1)",
        "both_on_cap2 (n=1)",
        "rows",
        "rollouts: same for every setting (n=1)",  # one entry: its grey line shows the style
        "lines: values as logged",
    ]
    colours = {line.get_color() for line in ax.lines[:3]}
    assert colours == set(PALETTE[:3])  # each setting its own colour (setting_colours)


def test_seeds_band_draws_every_seed_thin_beside_the_mean():
    ax = plot_bands(table(), "training/reward", band="seeds").axes[0]
    # setting on: mean, mean as logged, 3 seeds; off: mean, mean as logged, 2 seeds
    assert [line.get_gid() for line in ax.lines] == [None, "raw", *["seed"] * 3, None, "raw", *["seed"] * 2]
    assert ax.get_legend().get_title().get_text() == "mean over n = 2–3 seeds (thick) and each seed (thin)"


def test_the_loss_scale_panel_puts_every_mode_on_one_updates_scale():
    history = short_run_history().assign(**{"lab/loss_scale_per_mini_batch": [1.0, 1.0, 1.0]})
    ax = draw_panel(long_form(history, setting="both_off"), "loss_scale").axes[0]
    assert "per PPO mini-batch" in ax.get_title() and ax.lines[0].get_ydata().tolist() == [1.0, 1.0, 1.0]
    # the reference comes from the mode catalogue and says so in the legend, not in the title
    assert "token-mean" not in ax.get_title()
    reference = [line for line in ax.lines if line.get_label().startswith("token-mean")]
    assert len(reference) == 1 and list(reference[0].get_ydata()) == [1.0, 1.0]
    assert reference[0].get_label() == "token-mean: 1 (catalogue: Σ w = mini-batches per step)"


def test_a_panel_whose_metrics_are_missing_is_refused_by_name():
    runs = long_form(short_run_history(), setting="a")
    with pytest.raises(ValueError, match="none of the metrics of panel 'loss_scale'"):
        draw_panel(runs, "loss_scale")
    with pytest.raises(ValueError, match="none of the panel metrics"):
        plot_panels(runs.assign(metric="x"))


def test_each_setting_keeps_its_colour_in_every_figure():
    colours = setting_colours(["zeta", "both_off", "both_on", "alpha"])
    # the demo's settings keep theirs (both_on blue, both_off orange) whatever else is drawn; others by name
    assert colours == {"both_on": PALETTE[0], "both_off": PALETTE[1], "alpha": PALETTE[3], "zeta": PALETTE[4]}
    assert setting_colours(["both_off"])["both_off"] == PALETTE[1]


def test_panels_keep_only_metrics_present_and_save_png_and_svg(tmp_path):
    fig = plot_panels(table(), band="ci95", overlay=table().assign(source="wandb", run="real"))
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == [PANELS["success"].title, PANELS["rows_vs_rollouts"].title]  # reward for success
    assert fig.get_suptitle() == (
        "settings compared: mean and 95% t-interval of the mean over n = 2–3 seeds, cut at the metric's bounds"
    )
    paths = save_figure(fig, tmp_path / "panels")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)
    single = plot_bands(table(), "training/reward")
    legend = single.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "on (n=3)",
        "off (n=2)",
        "bold: debiased EMA, smoothing 0.6; faint: as logged",
    ]
    assert single.axes[0].get_ylabel() == "mean reward per rollout (reward)"
    # the band is always labelled, with n
    assert legend.get_title().get_text() == "mean ± 1 std over n = 2–3 seeds, cut at the metric's bounds"


def test_save_panels_writes_the_combined_figure_and_one_file_per_panel(tmp_path):
    saved = save_panels(long_form(short_run_history(), setting="a"), tmp_path)
    assert set(saved) == {"panels", "success", "rows_vs_rollouts", "drops"}
    assert all(path.exists() and path.suffix == ".png" for path in saved.values())
