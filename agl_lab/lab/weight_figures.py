"""Figures of how much each rollout weighs: by loss mode and rows per rollout, and each rollout's signed mass.

One function per figure; each takes a frame of :class:`agl_lab.lab.weighting.Weighting` and an optional Axes and
returns the Figure, made without pyplot (so the inline backend shows it once and nothing lingers). These are the
static figures (PNG/SVG, notebooks); the live panel draws with plotly (:mod:`agl_lab.ui.weighting_figures`). The
statistics come from :mod:`agl_lab.lab.class_stats`; the batch's rows (per rollout, kept or
dropped) are drawn by :mod:`agl_lab.lab.batch_figures`. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from agl_lab.config.modes import LOSS_MODES
from agl_lab.lab.batch_figures import GROUP_COLOURS, empty_note, figure_and_axes, reward_groups
from agl_lab.lab.class_stats import ClassWeights, weights_by_class

__all__ = [
    "highlight_mode",
    "mass_vs_rows",
    "mode_tick_label",
    "rollout_weight_by_mode",
]


def rollout_weight_by_mode(
    rollouts: pd.DataFrame,
    *,
    modes: Sequence[str] | None = None,
    highlight: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Mean weight of a rollout, relative to an equal share, by loss mode and by the rows it was split into.

    ``rollouts``: ``Weighting.rollouts``. A bar at 1 means rollouts with that many rows weigh what every rollout
    would under equal weighting; whiskers span the 10th to 90th percentile of rollouts. Above each mode: the
    batch's total loss scale (Σ weights, the loss's coefficient for a unit advantage). ``highlight`` shades one mode.
    Weights do not depend on the advantage, so rollout-level advantage on and off give the same figure.
    """
    fig, ax = figure_and_axes(ax, (11, 4.6))
    stats = weights_by_class(rollouts, modes)
    modes, n_classes = stats.modes, len(stats.classes)
    width = 0.8 / max(n_classes, 1)
    for j, (colour, cls) in enumerate(zip(_class_colours(n_classes), stats.classes, strict=True)):
        ax.bar(_class_x(j, n_classes, len(modes)), stats.mean[j], width, color=colour, label=stats.labels[int(cls)])
    ax.add_collection(LineCollection(_whiskers(stats), colors="0.35", lw=1, gid="weights-whiskers"))
    ax.axhline(1.0, color="black", lw=1, ls="--", label="equal share")
    ax.plot([], [], " ", label="Σ = batch total\nloss scale")
    ax.plot([], [], " ", label="whiskers: 10–90%\nof rollouts")
    top = _weights_top(stats)
    for i, total in enumerate(stats.totals):
        ax.text(i, top, f"Σ = {_short(total)}", ha="center", va="bottom", fontsize=9, gid="weights-total")
    highlight_mode(ax, highlight, modes=modes)
    ax.set_xlim(-0.6, len(modes) - 0.4)
    ax.set_ylim(0, top * 1.08)
    ax.set_xticks(np.arange(len(modes)), [mode_tick_label(m) for m in modes], fontsize=8)
    ax.set_ylabel("rollout weight ÷ equal share")
    ax.set_xlabel("loss mode: verl's loss_agg_mode, or per_rollout_mean with its divisor", fontsize=9)
    if not stats.n_rollouts:
        empty_note(ax, "no row left after the drops: the trainer skips this step")
    ax.set_title(_weights_title(stats.n_rollouts))
    ax.legend(
        title="rows per rollout (kept)", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0)
    )
    return fig


def highlight_mode(ax: Axes, mode: str | None, *, modes: Sequence[str]) -> None:
    """Shade ``mode``'s group in a :func:`rollout_weight_by_mode` axes (moves the shading if there is one)."""
    span = next((a for a in ax.patches if a.get_gid() == "highlight"), None)
    if span is None:
        span = ax.axvspan(-0.45, 0.45, color="gold", alpha=0.18, zorder=0, gid="highlight")
    span.set_visible(mode in modes)
    if mode in modes:
        span.set_x(modes.index(mode) - 0.45)


def mass_vs_rows(
    rollouts: pd.DataFrame, *, mode: str, rollout_level: bool = True, ax: Axes | None = None, seed: int = 0
) -> Figure:
    """Each rollout's signed policy-gradient mass (Σ weight × advantage) against the rows it kept, for one setting.

    ``rollouts``: ``Weighting.rollouts``. Points are jittered sideways; short black bars mark each column's mean.
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    frame, groups, names = _mass_frame(rollouts, mode, rollout_level)
    x = frame["rows_kept"].to_numpy()
    jitter = np.random.default_rng(seed).uniform(-0.18, 0.18, len(frame))
    for g, name in enumerate(names):
        pick = groups == g
        mass = frame["mass"].to_numpy()[pick]
        ax.scatter(
            x[pick] + jitter[pick],
            mass,
            s=12,
            alpha=0.6,
            color=GROUP_COLOURS[g],
            label=name,
            linewidths=0,
            gid=f"mass-points-{g}",
        )
        ax.add_collection(LineCollection(_mean_segments(x[pick], mass), colors="black", lw=1.5, gid=f"mass-means-{g}"))
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlim(0.4, x.max(initial=1) + 0.6)
    ax.set_ylim(*_mass_limits(frame["mass"].to_numpy()))
    ax.set_xticks(np.arange(1, x.max(initial=1) + 1))
    ax.set_xlabel("rows per rollout (kept)")
    ax.set_ylabel("mass = Σ weight × advantage")
    ax.set_title(_mass_title(mode, rollout_level), fontsize=11)
    if len(frame):
        ax.legend(fontsize=8, loc="best")
    else:
        empty_note(ax, "no rollout trained")
    return fig


def _class_x(j: int, n_classes: int, n_modes: int) -> np.ndarray:
    """x of class ``j``'s bars: side by side within each mode's slot of width 0.8."""
    return np.arange(n_modes) + (j - (n_classes - 1) / 2) * (0.8 / max(n_classes, 1))


def _whiskers(stats: ClassWeights) -> list[np.ndarray]:
    segments = []
    n_classes = len(stats.classes)
    for j, (low, high) in enumerate(zip(stats.low, stats.high, strict=True)):
        for x, lo, hi in zip(_class_x(j, n_classes, len(stats.modes)), low, high, strict=True):
            if np.isfinite(lo) and np.isfinite(hi):
                segments.append(np.array([[x, lo], [x, hi]]))
    return segments


def _weights_top(stats: ClassWeights) -> float:
    """Where the Σ labels sit: above the highest bar or whisker, and at least above the fair-share line."""
    values = np.concatenate([stats.mean.ravel(), stats.high.ravel()])
    finite = values[np.isfinite(values)]
    return max(1.0, finite.max(initial=1.0)) * 1.1


def _weights_title(n_rollouts: int) -> str:
    return f"How much a rollout weighs, by loss mode and rows per rollout ({n_rollouts} rollouts trained)"


def _mass_frame(rollouts: pd.DataFrame, mode: str, rollout_level: bool) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    frame = rollouts[(rollouts["mode"] == mode) & (rollouts["rollout_level"] == rollout_level)]
    frame = frame[frame["rows_kept"] > 0]
    groups, names = reward_groups(frame["reward"].to_numpy())
    return frame, groups, names


def _mean_segments(x: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
    """A short horizontal bar at the mean of ``values`` for each distinct ``x``."""
    columns = np.unique(x)
    means = [values[x == c].mean() for c in columns]
    return [np.array([[c - 0.3, m], [c + 0.3, m]]) for c, m in zip(columns, means, strict=True)]


def _mass_limits(values: np.ndarray) -> tuple[float, float]:
    """y limits around the masses and 0, with a 6% margin (the same for a fresh drawing and an update)."""
    low, high = min(values.min(initial=0.0), 0.0), max(values.max(initial=0.0), 0.0)
    pad = (high - low) * 0.06 or 1e-3
    return low - pad, high + pad


def _mass_title(mode: str, rollout_level: bool) -> str:
    return f"Rollout mass under {mode}\n(rollout-level advantage {'on' if rollout_level else 'off'})"


def _class_colours(n: int) -> list:
    return [colormaps["viridis"](v) for v in np.linspace(0.15, 0.85, n)]


def mode_tick_label(mode: str, width: int = 18) -> str:
    """The catalogue's label of ``mode``, wrapped for an axis tick."""
    return textwrap.fill(LOSS_MODES[mode].label if mode in LOSS_MODES else mode, width)


def _short(value: float) -> str:
    """3 significant digits, without an exponent for the usual loss scales."""
    return f"{value:.3g}"
