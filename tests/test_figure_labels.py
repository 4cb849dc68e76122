"""Every figure the package builds stands on its own: each panel has a title saying what is compared, each axis
names its quantity (and, for the curves, the unit), and the curves' legends sit outside the data.

Walks the figures as their objects hold them — matplotlib ``Axes`` and plotly layouts — for every kind the package
draws: the history curves (PNG and plotly, every standard panel), the forest plot, the batch and weight figures,
and the weighting panel's and the curve view's live plotly figures.
"""

import matplotlib
import pandas as pd
import pytest
from test_bands import table
from test_curves_figures import short_run_history
from test_weight_figures import analysis

from agl_lab.curves.effects import compare_metrics
from agl_lab.curves.figures import draw_panel, plot_bands, plot_panels
from agl_lab.curves.forest import plot_forest
from agl_lab.curves.history import long_form
from agl_lab.curves.panels import PANELS
from agl_lab.lab import batch_figures, weight_figures
from agl_lab.ui.curve_view import CurveView
from agl_lab.ui.weighting_panel import WeightingPanel

matplotlib.use("Agg")

UNIT = r"\(.+\)$"  # "quantity (unit)"


def history_table() -> pd.DataFrame:
    """Two settings × two seeds of a short run with every standard panel's metrics."""
    frames = []
    for setting, shift in (("both_on", 0), ("both_off", 1)):
        for seed in (0, 1):
            history = short_run_history().assign(**{"critic/score/mean": [0.0, 0.25, 0.5],
                                                    "lab/loss_scale_per_mini_batch": [1.0, 0.8, 0.9],
                                                    "val-core/lock/reward/mean@1": [0.0, 0.5, 1.0]})  # fmt: skip
            history["training/n_sample"] += shift + seed
            frames.append(long_form(history, setting=setting, seed=seed))
    return pd.concat(frames, ignore_index=True)


def matplotlib_figures():
    curves = history_table()
    effects = compare_metrics(curves, baseline="both_off", metrics=["lab/success_rate", "training/n_sample"])
    figures = {f"panel {name}": draw_panel(curves, name) for name in PANELS}
    figures |= {
        "panels": plot_panels(curves, band="ci95"),
        "bands": plot_bands(table(), "training/reward", band="seeds"),
        "forest": plot_forest(effects),
        "rows per rollout": batch_figures.rows_per_rollout_histogram(analysis().rows),
        "cap drops": batch_figures.cap_drops(analysis().rows),
        "weight by mode": weight_figures.rollout_weight_by_mode(analysis().rollouts),
        "mass vs rows": weight_figures.mass_vs_rows(analysis().rollouts, mode="token-mean"),
    }
    return figures


CURVES = {"panel", "panels", "bands"}  # the history curves: units on every axis, legends outside


@pytest.fixture(scope="module")
def mpl():
    return matplotlib_figures()


@pytest.fixture(scope="module")
def plotly():
    return plotly_figures()


@pytest.mark.parametrize("name", [f"panel {p}" for p in PANELS] + ["panels", "bands", "forest", "rows per rollout",
                                  "cap drops", "weight by mode", "mass vs rows"])  # fmt: skip
def test_every_matplotlib_axes_has_a_title_and_named_axes(name, mpl):
    fig = mpl[name]
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert axes, name
    for ax in axes:
        title = ax.get_title() or fig.get_suptitle()  # the forest plot's panels share one title
        assert title.strip(), f"{name}: an axes without a title"
        assert ax.get_xlabel().strip() and ax.get_ylabel().strip(), f"{name} / {title}: an unnamed axis"
        if name.split()[0] in CURVES:
            assert ax.get_xlabel() == "training step"
            assert pd.Series([ax.get_ylabel()]).str.contains(UNIT).all(), f"{name}: no unit in {ax.get_ylabel()!r}"
            legend = ax.get_legend()
            fig.canvas.draw()  # legends are placed when drawn
            inside = legend.get_window_extent().overlaps(ax.get_window_extent())
            assert not inside, f"{name} / {title}: the legend covers the data"
    if name.startswith("panel "):
        assert "token-mean" not in axes[0].get_title()  # a reference value is named in the legend, from the catalogue


def plotly_figures():
    weighting = WeightingPanel()
    curves = CurveView(history_table())
    return {
        "curve view": curves.figure,
        "weight bars": weighting.bars.widget.figure,
        "rollout scatter": weighting.scatter.widget.figure,
    }


@pytest.mark.parametrize("name", ["curve view", "weight bars", "rollout scatter"])
def test_every_plotly_subplot_has_a_title_and_named_axes(name, plotly):
    fig = plotly[name]
    layout = fig.layout
    axes = sorted(k for k in layout.to_plotly_json() if k.startswith(("xaxis", "yaxis")))
    titles = [a.text for a in layout.annotations if a.text] + ([layout.title.text] if layout.title.text else [])
    assert titles and all(t.strip() for t in titles), f"{name}: no title"
    for key in axes:
        axis = layout[key]
        if axis.visible is False or axis.matches:
            continue
        assert axis.title.text and axis.title.text.strip(), f"{name}: {key} has no title"
        if name == "curve view" and key.startswith("yaxis"):
            assert pd.Series([axis.title.text]).str.contains(UNIT).all(), f"{name}: no unit on {key}"
    if name == "curve view":
        assert len(titles) >= len(PANELS) and layout.legend.y < 0  # one title per panel; the legend below the data


def test_the_walk_covers_every_figure_built(mpl, plotly):
    assert len(mpl) == len(PANELS) + 7 and len(plotly) == 3
