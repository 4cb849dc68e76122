"""Compare settings across seeds: per-step mean and a labelled band, the standard panels, overlays.

Input is the long-form table of :mod:`agl_lab.history` / :mod:`agl_lab.sweep` (``setting, seed, step, metric,
value``). For each setting, metric and step the seeds are aggregated into a mean and a band — ``std``
(mean ± one standard deviation across seeds) or ``ci95`` (a 95% bootstrap confidence interval of the mean,
resampling seeds). Runs from elsewhere (W&B runs of real Agent Lightning training) can be overlaid as thin
lines. Figures save as PNG and SVG. Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["BAND_LABELS", "STANDARD_PANELS", "bands", "plot_bands", "plot_panels", "save_figure"]

Band = Literal["std", "ci95"]
BAND_LABELS = {"std": "mean ± 1 std across seeds", "ci95": "mean, 95% bootstrap CI across seeds"}

# The panels that show what the three settings do to training: title -> lines, each line (metric, label); a
# line may list alternatives as "a|b" (the first the table has: lab runs log success, real runs only reward).
STANDARD_PANELS: dict[str, list[tuple[str, str]]] = {
    "success / reward": [("lab/success_rate|training/reward", "success")],
    "rows vs rollouts per step": [("training/n_sample", "n_rows"), ("training/n_rollouts", "n_rollouts")],
    "drop counters": [
        ("training/n_sample_dropped/same_reward", "dropped, same reward"),
        ("training/n_sample_dropped/random", "dropped, random"),
    ],
    "loss scale (total per-token loss weight)": [("lab/loss_scale", "loss scale")],
}


def bands(
    table: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    band: Band = "std",
    smooth: int = 1,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per setting, metric and step: ``mean``, ``low``, ``high`` and ``n_seeds``.

    ``smooth`` > 1 first applies a trailing rolling mean of that many steps to each run (per seed).
    """
    if band not in BAND_LABELS:
        raise ValueError(f"band must be one of {list(BAND_LABELS)}, got {band!r}")
    if smooth < 1:
        raise ValueError(f"smooth must be a window of >= 1 steps, got {smooth}")
    data = table if metrics is None else table[table.metric.isin(list(metrics))]
    if data.empty:
        raise ValueError(f"no rows for metrics {list(metrics or [])}: the table has {sorted(set(table.metric))[:20]}")
    data = data.sort_values("step")
    if smooth > 1:
        runs = data.groupby(["setting", "seed", "run", "metric"], dropna=False)["value"]
        data = data.assign(value=runs.transform(lambda v: v.rolling(smooth, min_periods=1).mean()))
    groups = data.groupby(["setting", "metric", "step"], dropna=False)["value"]
    out = groups.agg(mean="mean", n_seeds="count").reset_index()
    if band == "std":
        spread = groups.std(ddof=1).fillna(0.0).to_numpy()
        out["low"], out["high"] = out["mean"] - spread, out["mean"] + spread
    else:
        rng = np.random.default_rng(seed)
        intervals = [_bootstrap(values.to_numpy(), rng, n_boot) for _, values in groups]
        out["low"], out["high"] = np.array(intervals).T if intervals else ([], [])
    return out[["setting", "metric", "step", "mean", "low", "high", "n_seeds"]]


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
    colours = {setting: f"C{i}" for i, setting in enumerate(sorted(table.setting.dropna().unique(), key=str))}
    for setting, part in stats.groupby("setting", sort=True):
        colour = colours[setting]  # one colour per setting across every panel
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


def plot_panels(
    table: pd.DataFrame,
    *,
    panels: Mapping[str, Sequence[tuple[str, str]]] = STANDARD_PANELS,
    band: Band = "std",
    smooth: int = 1,
    overlay: pd.DataFrame | None = None,
) -> Figure:
    """The standard comparison panels in one figure; panels whose metrics the table lacks are left out."""
    present = set(table.metric)
    usable = {}
    for title, lines in panels.items():
        found = [(_first_present(metric, present), label) for metric, label in lines]
        if any(metric for metric, _ in found):
            usable[title] = [(metric, label) for metric, label in found if metric]
    if not usable:
        raise ValueError(f"the table has none of the panel metrics; it has {sorted(present)[:20]}")
    cols = min(2, len(usable))
    rows = -(-len(usable) // cols)
    fig = Figure(figsize=(6.4 * cols, 4.0 * rows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, cols, squeeze=False))
    for ax, (title, lines) in zip(axes.flat, usable.items(), strict=False):
        for (metric, label), style in zip(lines, ("-", "--", ":"), strict=False):
            plot_bands(
                table,
                metric,
                band=band,
                smooth=smooth,
                overlay=overlay,
                ax=ax,
                title=title,
                label=label,
                linestyle=style,
            )
        ax.set_ylabel("")
    for ax in list(axes.flat)[len(usable) :]:
        ax.set_visible(False)
    fig.suptitle(f"settings compared across seeds ({BAND_LABELS[band]})")
    return fig


def save_figure(fig: Figure, stem: str | Path, *, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Save ``fig`` as ``<stem>.png``, ``<stem>.svg`` (and any other matplotlib format); return the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(f".{fmt}") for fmt in formats]
    for path in paths:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return paths


def _bootstrap(values: np.ndarray, rng: np.random.Generator, n_boot: int) -> tuple[float, float]:
    if len(values) < 2:
        return float(values.mean()), float(values.mean())
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)  # (n_boot,)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _first_present(metrics: str, present: set[str]) -> str | None:
    return next((m for m in metrics.split("|") if m in present), None)


def _axes(ax: Axes | None) -> tuple[Figure, Axes]:
    # Figures are made without pyplot, so a notebook shows them once, where they are displayed, and none linger.
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    return fig, fig.subplots()
