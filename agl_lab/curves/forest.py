"""The forest plot: each setting's difference from the baseline and its 95% interval, one panel per metric.

Input is :func:`agl_lab.curves.effects.compare_settings` (or ``compare_metrics`` for several metrics): a dot at the
mean paired difference, a bar for its interval, a vertical line at 0 (no effect); each line is labelled with its
pairs and p. A row with fewer than 2 pairs has no interval: its dot is hollow and its label says why. Colours are
the settings' own (:func:`agl_lab.curves.style.setting_colours`); the x axis names the metric and its unit (the
metric catalogue). Made without pyplot, like every figure here.
Notebooks: ``04_reproduce_curves`` (the verdict), ``05_reproduce_effects``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from agl_lab.curves.effects import METHODS, NEED_TWO_SEEDS
from agl_lab.curves.metrics import metric_info
from agl_lab.curves.style import setting_colours
from agl_lab.curves.summary import WINDOWS

__all__ = ["plot_forest"]


def plot_forest(effects: pd.DataFrame, *, title: str | None = None) -> Figure:
    """One panel per metric (in the frame's order), one line per setting: difference, interval, pairs and p."""
    if effects.empty:
        raise ValueError("no effects to draw: compare_settings found no setting besides the baseline")
    metrics = list(dict.fromkeys(effects["metric"]))
    settings = list(dict.fromkeys(effects["setting"]))
    colours = setting_colours([*settings, *effects["baseline"]])
    fig = Figure(figsize=(7.2, 0.9 + (0.5 * len(settings) + 0.8) * len(metrics)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(metrics), 1, squeeze=False)[:, 0])
    for ax, metric in zip(axes, metrics, strict=True):
        part = effects[effects["metric"] == metric]
        for y, row in enumerate(part.itertuples(index=False)):
            interval = np.isfinite(row.ci_low) and np.isfinite(row.ci_high)
            colour = colours[row.setting]
            if interval:
                ax.plot([row.ci_low, row.ci_high], [y, y], color=colour, linewidth=2.2, solid_capstyle="butt")
            ax.plot([row.mean_diff], [y], "o", color=colour, markerfacecolor=colour if interval else "white")
            rliable = getattr(row, "method", "paired_t") == "rliable"
            measure = f"P(improvement)={row.poi:.2f}" if rliable else f"p={row.p_value:.2g}"
            note = f"n={row.n_pairs}, {measure}" if interval else f"n={row.n_pairs}: {NEED_TWO_SEEDS}"
            ax.annotate(note, (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize="small")  # fmt: skip
        ax.axvline(0.0, color="0.4", linewidth=0.8, linestyle="--")
        ax.set_yticks(range(len(part)), [f"{s} − {b}" for s, b in zip(part["setting"], part["baseline"], strict=True)])
        ax.set_ylim(len(part) - 0.5, -0.5)
        ax.set_ylabel("setting − baseline")
        ax.set_xlabel(_difference_label(metric))
        ax.grid(axis="x", alpha=0.3)
    window = WINDOWS[effects.attrs.get("window", "last_20pct")]
    method = effects.attrs.get("method", "paired_t")
    how = "paired differences and 95% t-intervals" if method == "paired_t" else METHODS[method].heading
    fig.suptitle(title or f"{how}; per run, {window}", fontsize="medium")
    return fig


def _difference_label(metric: str) -> str:
    """``difference in <name> (<unit>)``; a metric with its window appended (``m (last_20pct)``) keeps it."""
    name, _, window = metric.partition(" (")
    entry = metric_info(name)
    return f"difference in {entry.name}{' (' + window.rstrip(')') + ')' if window else ''} ({entry.unit})"
