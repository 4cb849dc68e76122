"""Figures of training histories (PNG/SVG): one family, over the long-form table, for one run or settings × seeds.

Every static history figure in agl_lab is drawn here from the long-form table (``setting, seed, step, metric,
value``; :mod:`agl_lab.curves.history` reads it from any source, :func:`agl_lab.run_sweep` returns it, and
:func:`agl_lab.curves.history.long_form` turns one run's history into it): a bold line per setting (the mean over
its seeds, smoothed) over the values as logged (faint), with a labelled band (:mod:`agl_lab.curves.bands`), one
colour per setting in every figure (:mod:`agl_lab.curves.style`). The standard panels (:mod:`agl_lab.curves.panels`)
show what the three settings do to training. Titles say what is compared, axes name their quantity and unit (the
metric catalogue, :mod:`agl_lab.curves.metrics`), and the legend sits beside the data: each setting once with its
number of seeds, each line style once, the smoothing; a metric that is the same for several settings (the rollouts
per step, say) is drawn once, in grey. Runs from elsewhere are overlaid as thin grey lines. Figures are made
without pyplot and save as PNG and SVG; the notebooks' interactive curves draw the same panels with plotly
(``agl_lab.ui.curve_view.CurveView``). Notebooks: 01 (rows vs rollouts), 03 (short runs), 04 (sweeps).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from agl_lab.curves.bands import BAND_LABELS, Band, bands, same_curve_groups, smoothed
from agl_lab.curves.metrics import axis_label, metric_info
from agl_lab.curves.panels import PANELS, panel_lines, panel_reference, panel_ylabel, usable_panels
from agl_lab.curves.style import (
    BAND_OPACITY,
    DEFAULT_SMOOTHING,
    LINE_WIDTH,
    OVERLAY_COLOUR,
    RAW_OPACITY,
    SHARED_COLOUR,
    STEP_LABEL,
    legend_outside,
    setting_colours,
    smoothing_note,
)
from agl_lab.files.atomic_files import written_whole

__all__ = ["band_title", "draw_panel", "plot_bands", "plot_panels", "save_figure", "save_panels"]

_STYLES = ("-", "--", ":")


def band_title(band: Band, table: pd.DataFrame) -> str:
    """The band's label with the number of seeds filled in (``n = 3 seeds``, or the range when settings differ)."""
    counts = table.groupby("setting")["seed"].nunique(dropna=False) if len(table) else pd.Series([0])
    low, high = int(counts.min()), int(counts.max())
    if high <= 1:
        return "one seed per setting (n = 1): no band"
    n = f"n = {low} seeds" if low == high else f"n = {low}–{high} seeds"
    return BAND_LABELS[band].replace("n seeds", n)


def plot_bands(
    table: pd.DataFrame,
    metric: str,
    *,
    band: Band = "std",
    smoothing: float = DEFAULT_SMOOTHING,
    overlay: pd.DataFrame | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """One metric over steps: a line and a shaded band per setting; ``overlay`` runs as thin grey lines."""
    fig, ax = _axes(ax)
    seeds = _draw_metric(ax, table, metric, band=band, smoothing=smoothing, label=metric_info(metric).name, style="-")
    _draw_overlay(ax, overlay, [metric], smoothing=smoothing)
    _finish(ax, title or f"{metric_info(metric).name}, by setting", seeds, styles=[],
            band_label=band_title(band, table), smoothing=smoothing)  # fmt: skip
    ax.set_ylabel(axis_label(metric))
    return fig


def draw_panel(
    table: pd.DataFrame,
    panel: str,
    *,
    ax: Axes | None = None,
    band: Band = "std",
    smoothing: float = DEFAULT_SMOOTHING,
    overlay: pd.DataFrame | None = None,
    band_label: str | None = None,
    legend_below: bool = False,
) -> Figure:
    """One standard panel (a key of :data:`agl_lab.curves.panels.PANELS`) in ``ax``; lines whose metric the table
    lacks are left out. ``band_label``: the legend's title (default: the band with its number of seeds; "" for
    none)."""
    fig, ax = _axes(ax)
    metrics = panel_lines(panel, set(table.metric))
    if not metrics:
        raise ValueError(f"the table has none of the metrics of panel {panel!r}: {list(PANELS[panel].lines)}")
    seeds: dict[str, int] = {}
    styles = []  # (label, style) of the lines some setting draws in its own colour
    for metric, style in zip(metrics, _STYLES, strict=False):
        label = metric_info(metric).name
        own = _draw_metric(ax, table, metric, band=band, smoothing=smoothing, label=label, style=style)
        seeds.update(own)
        styles += [(label, style)] if own and len(metrics) > 1 else []
    _draw_overlay(ax, overlay, metrics, smoothing=smoothing)
    reference = panel_reference(panel)
    if reference is not None:
        ax.axhline(reference[0], color=SHARED_COLOUR, linestyle=":", linewidth=1.2, label=reference[1])
    band_label = band_title(band, table) if band_label is None else band_label
    _finish(ax, PANELS[panel].title, seeds, styles=styles, band_label=band_label, smoothing=smoothing,
            below=legend_below)  # fmt: skip
    ax.set_ylabel(panel_ylabel(panel, metrics))
    return fig


def plot_panels(
    table: pd.DataFrame,
    *,
    panels: Sequence[str] = tuple(PANELS),
    band: Band = "std",
    smoothing: float = DEFAULT_SMOOTHING,
    overlay: pd.DataFrame | None = None,
    title: str | None = None,
) -> Figure:
    """The standard panels in one figure, each with its legend below it; panels whose metrics the table lacks are
    left out."""
    usable = usable_panels(set(table.metric), panels)
    if not usable:
        raise ValueError(f"the table has none of the panel metrics; it has {sorted(set(table.metric))[:20]}")
    cols = min(2, len(usable))
    rows = -(-len(usable) // cols)
    fig = Figure(figsize=(7.0 * cols, 5.0 * rows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, cols, squeeze=False))
    for ax, panel in zip(axes.flat, usable, strict=False):
        draw_panel(table, panel, ax=ax, band=band, smoothing=smoothing, overlay=overlay, band_label="",
                   legend_below=True)  # fmt: skip
    for ax in list(axes.flat)[len(usable) :]:
        ax.set_visible(False)
    fig.suptitle(f"{title} ({band_title(band, table)})" if title else f"settings compared: {band_title(band, table)}")
    return fig


def save_panels(
    table: pd.DataFrame, out_dir: str | Path, *, band: Band = "std", formats: Sequence[str] = ("png",)
) -> dict[str, Path]:
    """``panels.png`` (every standard panel) and one file per panel the table has; returns name → first path."""
    out = Path(out_dir)
    saved = {"panels": save_figure(plot_panels(table, band=band), out / "panels", formats=formats)[0]}
    for panel in usable_panels(set(table.metric)):
        fig = draw_panel(table, panel, band=band)
        fig.set_size_inches(9.0, 4.4)
        saved[panel] = save_figure(fig, out / panel, formats=formats)[0]
    return saved


def save_figure(fig: Figure, stem: str | Path, *, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Save ``fig`` as ``<stem>.png``, ``<stem>.svg`` (and any other matplotlib format); return the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(f".{fmt}") for fmt in formats]
    for path in paths:
        with written_whole(path) as partial:  # a stop mid-save leaves the previous figure, never half of one
            fig.savefig(partial, dpi=120, bbox_inches="tight", format=path.suffix[1:])
    return paths


def _draw_metric(ax: Axes, table: pd.DataFrame, metric: str, *, band: Band, smoothing: float, label: str, style: str):
    """Draw ``metric``'s mean (smoothed, bold), its values as logged (faint) and band per setting; settings with
    identical curves share one grey line. Returns setting → number of seeds, for the settings in their own colour."""
    stats = bands(table, [metric], band=band, smoothing=smoothing)
    raw = bands(table, [metric], band="seeds") if smoothing > 0 else None
    colours = setting_colours(table.setting.dropna().unique())
    parts = {str(s): part.sort_values("step") for s, part in stats.groupby("setting", sort=False)}
    groups = same_curve_groups(stats, [str(s) for s in table.setting.drop_duplicates()])  # the table's order
    seeds = {}
    for group in groups:
        part, shared = parts[group[0]], len(group) > 1
        colour = SHARED_COLOUR if shared else colours[group[0]]
        every = "every setting" if len(group) == len(parts) else ", ".join(group)
        name = f"{label}: same for {every} (n={part.n_seeds.max()})" if shared else None
        ax.plot(part["step"], part["mean"], color=colour, linestyle=style, label=name, linewidth=LINE_WIDTH["smoothed"])
        ax.fill_between(part["step"].astype(float), part["low"], part["high"], color=colour, alpha=BAND_OPACITY,
                        linewidth=0)  # fmt: skip
        if raw is not None:
            logged = raw[raw.setting == group[0]].sort_values("step")
            ax.plot(logged["step"], logged["mean"], color=colour, linestyle=style, linewidth=LINE_WIDTH["raw"],
                    alpha=RAW_OPACITY, gid="raw")  # fmt: skip
        if band == "seeds" and not shared:
            _draw_seeds(ax, table, metric, group[0], smoothing=smoothing, colour=colour, style=style)
        if not shared:
            seeds[group[0]] = int(part.n_seeds.max())
    return seeds


def _draw_seeds(ax: Axes, table: pd.DataFrame, metric: str, setting: str, *, smoothing: float, colour: str, style: str):
    runs = smoothed(table[table.setting == setting], [metric], smoothing=smoothing)
    for _, run in runs.groupby(["seed", "run"], dropna=False):
        ax.plot(run["step"], run["value"], color=colour, linestyle=style, linewidth=LINE_WIDTH["seed"], alpha=0.5,
                gid="seed")  # fmt: skip


def _draw_overlay(ax: Axes, overlay: pd.DataFrame | None, metrics: list[str], *, smoothing: float) -> None:
    if overlay is None or not overlay.metric.isin(metrics).any():
        return
    lines = smoothed(overlay, [m for m in metrics if m in set(overlay.metric)], smoothing=smoothing)
    for source, runs in lines.groupby("source"):
        for i, ((run, _), part) in enumerate(runs.groupby(["run", "metric"])):
            label = f"{source}: {run}" if runs.run.nunique() == 1 else f"{source}: {runs.run.nunique()} runs"
            ax.plot(part["step"], part["value"], color=OVERLAY_COLOUR, linewidth=LINE_WIDTH["overlay"], alpha=0.8,
                    label=None if i else label)  # fmt: skip


def _finish(ax: Axes, title: str, seeds: dict[str, int], *, styles: list[tuple[str, str]], band_label: str,
            smoothing: float, below: bool = False) -> None:  # fmt: skip
    """Title, axes and one legend beside them: each setting once (colour, n seeds), each line style once, shared
    lines, overlays and reference lines, then how the lines are smoothed."""
    colours = setting_colours(seeds)
    handles = [Line2D([], [], color=colours[s], linewidth=2, label=f"{s} (n={n})") for s, n in seeds.items()]
    handles += [Line2D([], [], color="black", linestyle=style, label=label) for label, style in styles]
    handles += [h for h in ax.get_lines() if not h.get_label().startswith("_")]  # shared lines, overlays, references
    handles.append(Line2D([], [], linestyle="none", label=smoothing_note(smoothing)))
    ax.set_title(title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(STEP_LABEL)
    legend_outside(ax, handles, title=band_label, below=below)
    ax.grid(alpha=0.3)


def _axes(ax: Axes | None) -> tuple[Figure, Axes]:
    # Figures are made without pyplot, so a notebook shows them once, where they are displayed, and none linger.
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=(9.0, 4.2), layout="constrained")
    return fig, fig.subplots()
