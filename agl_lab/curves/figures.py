"""Figures of training histories: one family, over the long-form table, for one run or settings × seeds.

Every history figure in agl_lab is drawn here from the long-form table (``setting, seed, step, metric,
value``; :mod:`agl_lab.curves.history` reads it from any source, :func:`agl_lab.run_sweep` returns it, and
:func:`agl_lab.curves.history.long_form` turns one run's history into it): a line per setting (the mean over
its seeds) with a labelled band (:mod:`agl_lab.curves.bands`), one colour per setting in every figure. The
standard panels show what the three settings do to training: success, rows against rollouts, the drop counters
and the loss scale. Runs from elsewhere can be overlaid as thin grey lines. Figures are made without pyplot and
save as PNG and SVG. Notebooks: 01 (rows vs rollouts), 03 (short runs, the live panel), 04 (sweeps).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.curves.bands import BAND_LABELS, Band, bands

__all__ = [
    "PANELS",
    "Panel",
    "draw_panel",
    "plot_bands",
    "plot_panels",
    "save_figure",
    "save_panels",
    "setting_colours",
]


@dataclass(frozen=True)
class Panel:
    """One standard panel: its title and its lines, each ``(metric, label)``; ``a|b`` = the first the table has."""

    title: str
    lines: tuple[tuple[str, str], ...]


# The panels that show what the three settings do to training (lab runs log success, real runs only reward).
PANELS: dict[str, Panel] = {
    "success": Panel("success / reward", (("lab/success_rate|training/reward", "success"),)),
    "rows_vs_rollouts": Panel(
        "rows vs rollouts per step", (("training/n_sample", "n_rows"), ("training/n_rollouts", "n_rollouts"))
    ),
    "drops": Panel(
        "drop counters",
        (
            ("training/n_sample_dropped/same_reward", "dropped, same reward"),
            ("training/n_sample_dropped/random", "dropped, random"),
        ),
    ),
    "loss_scale": Panel("loss scale (total per-token loss weight)", (("lab/loss_scale", "loss scale"),)),
}
_STYLES = ("-", "--", ":")


def setting_colours(settings: Iterable[str]) -> dict[str, str]:
    """One colour per setting, the same in every figure: the demo's settings keep theirs, others follow by name."""
    fixed = list(DEMO_SETTINGS)
    names = sorted({str(s) for s in settings})
    colours = {name: f"C{fixed.index(name)}" for name in names if name in fixed}
    rest = [name for name in names if name not in colours]
    colours.update({name: f"C{(len(fixed) + i) % 10}" for i, name in enumerate(rest)})
    return colours


def plot_bands(
    table: pd.DataFrame,
    metric: str,
    *,
    band: Band = "std",
    smooth: int = 1,
    overlay: pd.DataFrame | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    label: str | None = None,
    linestyle: str = "-",
) -> Figure:
    """One metric over steps: a line and a shaded band per setting; ``overlay`` runs as thin grey lines."""
    standalone = ax is None
    fig, ax = _axes(ax)
    stats = bands(table, [metric], band=band, smooth=smooth)
    colours = setting_colours(table.setting.dropna().unique())
    for setting, part in stats.groupby("setting", sort=True):
        colour = colours[str(setting)]
        name = f"{setting} · {label}" if label else str(setting)
        ax.plot(part["step"], part["mean"], color=colour, linestyle=linestyle, label=f"{name} (n={part.n_seeds.max()})")
        ax.fill_between(part["step"].astype(float), part["low"], part["high"], color=colour, alpha=0.2, linewidth=0)
    if overlay is not None:
        lines = overlay[overlay.metric == metric]
        for source, runs in lines.groupby("source"):
            for i, (run, part) in enumerate(runs.groupby("run")):
                part = part.sort_values("step")
                label = f"{source}: {run}" if runs.run.nunique() == 1 else f"{source}: {runs.run.nunique()} runs"
                ax.plot(part["step"], part["value"], color="0.4", linewidth=0.8, alpha=0.7, label=None if i else label)
    ax.set_title(title or metric)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel(label or metric.rsplit("/", 1)[-1])
    ax.legend(fontsize="small", title=BAND_LABELS[band] if standalone else None, title_fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def draw_panel(
    table: pd.DataFrame,
    panel: str,
    *,
    ax: Axes | None = None,
    band: Band = "std",
    smooth: int = 1,
    overlay: pd.DataFrame | None = None,
) -> Figure:
    """One standard panel (a key of :data:`PANELS`) in ``ax``; lines whose metric the table lacks are left out."""
    fig, ax = _axes(ax)
    spec = PANELS[panel]
    present = set(table.metric)
    lines = [(_first_present(metric, present), label) for metric, label in spec.lines]
    lines = [(metric, label) for metric, label in lines if metric]
    if not lines:
        raise ValueError(f"the table has none of the metrics of panel {panel!r}: {[m for m, _ in spec.lines]}")
    for (metric, label), style in zip(lines, _STYLES, strict=False):
        plot_bands(
            table, metric, band=band, smooth=smooth, overlay=overlay, ax=ax, title=spec.title, label=label,
            linestyle=style,
        )  # fmt: skip
    ax.set_ylabel("")
    return fig


def plot_panels(
    table: pd.DataFrame,
    *,
    panels: Sequence[str] = tuple(PANELS),
    band: Band = "std",
    smooth: int = 1,
    overlay: pd.DataFrame | None = None,
    title: str | None = None,
) -> Figure:
    """The standard panels in one figure; panels whose metrics the table lacks are left out."""
    present = set(table.metric)
    usable = [p for p in panels if any(_first_present(m, present) for m, _ in PANELS[p].lines)]
    if not usable:
        raise ValueError(f"the table has none of the panel metrics; it has {sorted(present)[:20]}")
    cols = min(2, len(usable))
    rows = -(-len(usable) // cols)
    fig = Figure(figsize=(6.4 * cols, 4.0 * rows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, cols, squeeze=False))
    for ax, panel in zip(axes.flat, usable, strict=False):
        draw_panel(table, panel, ax=ax, band=band, smooth=smooth, overlay=overlay)
    for ax in list(axes.flat)[len(usable) :]:
        ax.set_visible(False)
    fig.suptitle(title or f"settings compared across seeds ({BAND_LABELS[band]})")
    return fig


def save_panels(
    table: pd.DataFrame, out_dir: str | Path, *, band: Band = "std", formats: Sequence[str] = ("png",)
) -> dict[str, Path]:
    """``panels.png`` (every standard panel) and one file per panel the table has; returns name → first path."""
    out = Path(out_dir)
    saved = {"panels": save_figure(plot_panels(table, band=band), out / "panels", formats=formats)[0]}
    present = set(table.metric)
    for panel, spec in PANELS.items():
        if any(_first_present(m, present) for m, _ in spec.lines):
            fig = draw_panel(table, panel, band=band)
            fig.set_size_inches(7.0, 4.4)
            saved[panel] = save_figure(fig, out / panel, formats=formats)[0]
    return saved


def save_figure(fig: Figure, stem: str | Path, *, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Save ``fig`` as ``<stem>.png``, ``<stem>.svg`` (and any other matplotlib format); return the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(f".{fmt}") for fmt in formats]
    for path in paths:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return paths


def _first_present(metrics: str, present: set[str]) -> str | None:
    return next((m for m in metrics.split("|") if m in present), None)


def _axes(ax: Axes | None) -> tuple[Figure, Axes]:
    # Figures are made without pyplot, so a notebook shows them once, where they are displayed, and none linger.
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    return fig, fig.subplots()
