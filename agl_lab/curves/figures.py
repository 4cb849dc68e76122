"""Figures of training histories: one family, over the long-form table, for one run or settings × seeds.

Every history figure in agl_lab is drawn here from the long-form table (``setting, seed, step, metric,
value``; :mod:`agl_lab.curves.history` reads it from any source, :func:`agl_lab.run_sweep` returns it, and
:func:`agl_lab.curves.history.long_form` turns one run's history into it): a line per setting (the mean over
its seeds) with a labelled band (:mod:`agl_lab.curves.bands`), one colour per setting in every figure. The
standard panels show what the three settings do to training: success per rollout beside the score per row,
rows against rollouts, the drop counters and the loss scale per PPO mini-batch. A legend names each setting
once with its number of seeds, and each line style once; a metric that is the same for several settings (the
rollouts per step, say) is drawn once, in grey. Runs from elsewhere can be overlaid as thin grey lines. Figures
are made without pyplot and save as PNG and SVG. Notebooks: 01 (rows vs rollouts), 03 (short runs, the live
panel), 04 (sweeps).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.curves.atomic_files import written_whole
from agl_lab.curves.bands import BAND_LABELS, Band, bands, smoothed

__all__ = [
    "PANELS",
    "Panel",
    "band_title",
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
    "success": Panel(
        "success per rollout vs score per row",
        (
            ("lab/success_rate|training/reward", "success (reward) per rollout"),
            # verl's mean over trained rows: a rollout split into k rows counts k times, and failing rollouts split
            # more, so it sits below the per-rollout success on the same batch.
            ("critic/score/mean", "score per row: k rows count k times"),
        ),
    ),
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
    # Per mini-batch, so every loss mode is on one scale: token-mean's weights sum to 1 in each mini-batch, while
    # per_rollout_mean's batch total n_rollouts/n_rows (v1.0) is shared by all the step's mini-batches.
    "loss_scale": Panel(
        "loss scale per PPO mini-batch (token-mean: 1)",
        (("lab/loss_scale_per_mini_batch", "loss scale per mini-batch"),),
    ),
}
_STYLES = ("-", "--", ":")
_SAME = "0.3"  # the colour of a line several settings share


def setting_colours(settings: Iterable[str]) -> dict[str, str]:
    """One colour per setting, the same in every figure: the demo's settings keep theirs, others follow by name."""
    fixed = list(DEMO_SETTINGS)
    names = sorted({str(s) for s in settings})
    colours = {name: f"C{fixed.index(name)}" for name in names if name in fixed}
    rest = [name for name in names if name not in colours]
    colours.update({name: f"C{(len(fixed) + i) % 10}" for i, name in enumerate(rest)})
    return colours


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
    smooth: int = 1,
    overlay: pd.DataFrame | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """One metric over steps: a line and a shaded band per setting; ``overlay`` runs as thin grey lines."""
    fig, ax = _axes(ax)
    seeds = _draw_metric(ax, table, metric, band=band, smooth=smooth, label=metric.rsplit("/", 1)[-1], style="-")
    _draw_overlay(ax, overlay, [metric])
    _finish(ax, title or metric, seeds, styles=[], band_label=band_title(band, table))
    ax.set_ylabel(metric.rsplit("/", 1)[-1])
    return fig


def draw_panel(
    table: pd.DataFrame,
    panel: str,
    *,
    ax: Axes | None = None,
    band: Band = "std",
    smooth: int = 1,
    overlay: pd.DataFrame | None = None,
    band_label: str | None = None,
) -> Figure:
    """One standard panel (a key of :data:`PANELS`) in ``ax``; lines whose metric the table lacks are left out.

    ``band_label``: the legend's title (default: the band with its number of seeds; "" for none).
    """
    fig, ax = _axes(ax)
    spec = PANELS[panel]
    present = set(table.metric)
    lines = [(_first_present(metric, present), label) for metric, label in spec.lines]
    lines = [(metric, label) for metric, label in lines if metric]
    if not lines:
        raise ValueError(f"the table has none of the metrics of panel {panel!r}: {[m for m, _ in spec.lines]}")
    seeds: dict[str, int] = {}
    styles = []  # (label, style) of the lines some setting draws in its own colour
    for (metric, label), style in zip(lines, _STYLES, strict=False):
        own = _draw_metric(ax, table, metric, band=band, smooth=smooth, label=label, style=style)
        seeds.update(own)
        styles += [(label, style)] if own and len(lines) > 1 else []
    _draw_overlay(ax, overlay, [metric for metric, _ in lines])
    _finish(
        ax, spec.title, seeds, styles=styles, band_label=band_title(band, table) if band_label is None else band_label
    )
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
        draw_panel(table, panel, ax=ax, band=band, smooth=smooth, overlay=overlay, band_label="")
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
        with written_whole(path) as partial:  # a stop mid-save leaves the previous figure, never half of one
            fig.savefig(partial, dpi=120, bbox_inches="tight", format=path.suffix[1:])
    return paths


def _draw_metric(ax: Axes, table: pd.DataFrame, metric: str, *, band: Band, smooth: int, label: str, style: str):
    """Draw ``metric``'s mean and band per setting; settings with identical curves share one grey line.

    Returns setting → number of seeds, for the settings drawn in their own colour.
    """
    stats = bands(table, [metric], band=band, smooth=smooth)
    colours = setting_colours(table.setting.dropna().unique())
    by_setting = dict(list(stats.groupby("setting", sort=False)))
    order = [s for s in table.setting.drop_duplicates() if s in by_setting]  # the table's order, as in summaries
    parts = {str(s): by_setting[s].sort_values("step") for s in order}
    groups: list[list[str]] = []  # settings whose curves are identical (mean and band, step by step)
    for name, part in parts.items():
        same = next((g for g in groups if _same_curve(parts[g[0]], part)), None)
        if same:
            same.append(name)
        else:
            groups.append([name])
    seeds = {}
    for group in groups:
        part, shared = parts[group[0]], len(group) > 1
        colour = _SAME if shared else colours[group[0]]
        every = "every setting" if len(group) == len(parts) else ", ".join(group)
        name = f"{label}: same for {every} (n={part.n_seeds.max()})" if shared else None
        ax.plot(part["step"], part["mean"], color=colour, linestyle=style, label=name, linewidth=1.6)
        ax.fill_between(part["step"].astype(float), part["low"], part["high"], color=colour, alpha=0.2, linewidth=0)
        if band == "seeds" and not shared:
            _draw_seeds(ax, table, metric, group[0], smooth=smooth, colour=colour, style=style)
        if not shared:
            seeds[group[0]] = int(part.n_seeds.max())
    return seeds


def _draw_seeds(ax: Axes, table: pd.DataFrame, metric: str, setting: str, *, smooth: int, colour: str, style: str):
    runs = smoothed(table[table.setting == setting], [metric], smooth=smooth)
    for _, run in runs.groupby(["seed", "run"], dropna=False):
        ax.plot(run["step"], run["value"], color=colour, linestyle=style, linewidth=0.7, alpha=0.5)


def _same_curve(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    columns = ["step", "mean", "low", "high"]
    return len(a) == len(b) and np.allclose(a[columns].to_numpy(float), b[columns].to_numpy(float), rtol=0, atol=1e-12)


def _draw_overlay(ax: Axes, overlay: pd.DataFrame | None, metrics: list[str]) -> None:
    if overlay is None:
        return
    lines = overlay[overlay.metric.isin(metrics)]
    for source, runs in lines.groupby("source"):
        for i, ((run, _), part) in enumerate(runs.groupby(["run", "metric"])):
            part = part.sort_values("step")
            label = f"{source}: {run}" if runs.run.nunique() == 1 else f"{source}: {runs.run.nunique()} runs"
            ax.plot(part["step"], part["value"], color="0.4", linewidth=0.8, alpha=0.7, label=None if i else label)


def _finish(ax: Axes, title: str, seeds: dict[str, int], *, styles: list[tuple[str, str]], band_label: str) -> None:
    """Title, axes and one legend: each setting once (colour, n seeds), each line style once, then shared lines."""
    colours = setting_colours(seeds)
    handles = [Line2D([], [], color=colours[s], linewidth=2, label=f"{s} (n={n})") for s, n in seeds.items()]
    handles += [Line2D([], [], color="black", linestyle=style, label=label) for label, style in styles]
    handles += [h for h in ax.get_lines() if not h.get_label().startswith("_")]  # shared lines, overlays
    ax.set_title(title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.legend(handles=handles, fontsize="small", title=band_label or None, title_fontsize="small")
    ax.grid(alpha=0.3)


def _first_present(metrics: str, present: set[str]) -> str | None:
    return next((m for m in metrics.split("|") if m in present), None)


def _axes(ax: Axes | None) -> tuple[Figure, Axes]:
    # Figures are made without pyplot, so a notebook shows them once, where they are displayed, and none linger.
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    return fig, fig.subplots()
