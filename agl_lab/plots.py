"""Figures of one batch's weighting: one function per figure; each takes a DataFrame and an optional Axes, returns
the Figure.

Without ``ax`` a new :class:`matplotlib.figure.Figure` is made directly, not through pyplot: nothing is left
open in pyplot's registry (so the inline backend shows it once, when it is a cell's result) and the widget
panel can redraw the same figure on every change; its figures also have an ``update_*`` twin that moves what is
drawn to new data in place, at half the cost of drawing anew. Frames come from :mod:`agl_lab.weighting`
(``Weighting.rollouts``, ``Weighting.rows``) and :func:`agl_lab.rows.rows_frame`. Notebook:
``notebooks/01_per_rollout_weighting.ipynb``. Figures of short runs' metric histories: :mod:`agl_lab.training_plots`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from agl_lab.weighting import MODE_LABELS

__all__ = [
    "cap_drops",
    "highlight_mode",
    "mass_vs_rows",
    "rollout_weight_by_mode",
    "rows_per_rollout_histogram",
    "update_cap_drops",
    "update_mass_vs_rows",
    "update_rollout_weight_by_mode",
]

FATE_STYLE = {  # fate → (legend label, colour)
    "kept": ("kept", "tab:blue"),
    "dropped/same_reward": ("dropped: same-reward group", "tab:orange"),
    "dropped/random": ("dropped: random", "tab:red"),
    "dropped/marked": ("dropped: marked (prompt too long)", "tab:gray"),
}
_GROUP_COLOURS = ("tab:green", "tab:red")  # higher reward, lower reward
_MAX_CLASS = 6  # rollouts with this many rows or more share one bar ("6+")


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
    modes, per_class, labels, totals, n_rollouts = _weight_stats(rollouts, modes)
    width = 0.8 / max(len(per_class), 1)
    for colour, (cls, (heights, _, _)) in zip(_class_colours(len(per_class)), per_class.items(), strict=True):
        ax.bar(
            _class_x(list(per_class).index(cls), len(per_class), len(modes)),
            heights,
            width,
            color=colour,
            label=labels[cls],
        )
    ax.add_collection(LineCollection(_whiskers(per_class, len(modes)), colors="0.35", lw=1, gid="weights-whiskers"))
    ax.axhline(1.0, color="black", lw=1, ls="--", label="equal share")
    ax.plot([], [], " ", label="Σ = batch total\nloss scale")
    ax.plot([], [], " ", label="whiskers: 10–90%\nof rollouts")
    top = _weights_top(per_class)
    for i, total in enumerate(totals):
        ax.text(i, top, f"Σ = {_short(total)}", ha="center", va="bottom", fontsize=9, gid="weights-total")
    highlight_mode(ax, highlight, modes=modes)
    ax.set_xlim(-0.6, len(modes) - 0.4)
    ax.set_ylim(0, top * 1.08)
    ax.set_xticks(np.arange(len(modes)), [MODE_LABELS.get(m, m) for m in modes], fontsize=9)
    ax.set_ylabel("rollout weight ÷ equal share")
    ax.set_xlabel("loss mode: verl's loss_agg_mode, or per_rollout_mean with its divisor", fontsize=9)
    if not n_rollouts:
        _empty_note(ax, "no row left after the drops: the trainer skips this step")
    ax.set_title(_weights_title(n_rollouts))
    ax.legend(
        title="rows per rollout (kept)", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0)
    )
    return fig


def update_rollout_weight_by_mode(
    ax: Axes, rollouts: pd.DataFrame, *, modes: Sequence[str], highlight: str | None = None
) -> bool:
    """Redraw a :func:`rollout_weight_by_mode` axes for another analysis in place: bars, whiskers, Σ, title.

    Returns False (changing nothing) unless ``ax`` shows the same modes and rows-per-rollout classes.
    """
    modes, per_class, labels, totals, n_rollouts = _weight_stats(rollouts, modes)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    texts = [t for t in ax.texts if t.get_gid() == "weights-total"]
    whiskers = next((c for c in ax.collections if c.get_gid() == "weights-whiskers"), None)
    same = [c.get_label() for c in bars] == [labels[c] for c in per_class] and len(texts) == len(modes)
    if not n_rollouts or whiskers is None or not same or any(len(c.patches) != len(modes) for c in bars):
        return False
    for container, (heights, _, _) in zip(bars, per_class.values(), strict=True):
        for patch, height in zip(container.patches, heights, strict=True):
            patch.set_height(height)
    whiskers.set_segments(_whiskers(per_class, len(modes)))
    top = _weights_top(per_class)
    for text, total in zip(texts, totals, strict=True):
        text.set_text(f"Σ = {_short(total)}")
        text.set_y(top)
    highlight_mode(ax, highlight, modes=modes)
    ax.set_ylim(0, top * 1.08)
    ax.set_title(_weights_title(n_rollouts))
    return True


def highlight_mode(ax: Axes, mode: str | None, *, modes: Sequence[str]) -> None:
    """Shade ``mode``'s group in a :func:`rollout_weight_by_mode` axes (moves the shading if there is one)."""
    span = next((a for a in ax.patches if a.get_gid() == "highlight"), None)
    if span is None:
        span = ax.axvspan(-0.45, 0.45, color="gold", alpha=0.18, zorder=0, gid="highlight")
    span.set_visible(mode in modes)
    if mode in modes:
        span.set_x(modes.index(mode) - 0.45)


def rows_per_rollout_histogram(rows: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """How many rows trace aggregation made of each rollout, stacked by reward (higher vs lower half).

    ``rows``: one line per row with ``rollout_id``, ``reward`` and ``rows_in_rollout`` (``Weighting.rows`` or
    :func:`agl_lab.rows.rows_frame`).
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    per_rollout = rows.drop_duplicates("rollout_id")
    sizes = per_rollout["rows_in_rollout"].to_numpy()
    groups, names = _reward_groups(per_rollout["reward"].to_numpy())
    edges = np.arange(1, sizes.max(initial=1) + 2) - 0.5
    stacked = [sizes[groups == g] for g in range(len(names))]
    labels = [
        f"{name}: {len(s)} rollouts" + (f", {s.mean():.2f} rows each" if len(s) else "")
        for name, s in zip(names, stacked, strict=True)
    ]
    ax.hist(stacked, bins=edges, stacked=True, color=_GROUP_COLOURS[: len(names)], label=labels, rwidth=0.85)
    ax.set_xticks(np.arange(1, sizes.max(initial=1) + 1))
    ax.set_xlabel("rows per rollout")
    ax.set_ylabel("rollouts")
    ax.set_title(
        f"Rows per rollout after trace aggregation\n({len(rows)} rows, {len(per_rollout)} rollouts)", fontsize=11
    )
    ax.legend(fontsize=8, loc="upper right")
    return fig


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
            color=_GROUP_COLOURS[g],
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
        _empty_note(ax, "no rollout trained")
    return fig


def update_mass_vs_rows(ax: Axes, rollouts: pd.DataFrame, *, mode: str, rollout_level: bool, seed: int = 0) -> bool:
    """Redraw a :func:`mass_vs_rows` axes for another setting or selection in place: points, means, limits, title.

    Far cheaper than drawing anew. Returns False (changing nothing) unless ``ax`` shows the same reward groups.
    """
    frame, groups, names = _mass_frame(rollouts, mode, rollout_level)
    artists = {a.get_gid(): a for a in ax.collections if a.get_gid()}
    legend = ax.get_legend()
    points = [artists.get(f"mass-points-{g}") for g in range(len(names))]
    if not len(frame) or None in points or legend is None or [t.get_text() for t in legend.get_texts()] != names:
        return False
    x, mass = frame["rows_kept"].to_numpy(), frame["mass"].to_numpy()
    jitter = np.random.default_rng(seed).uniform(-0.18, 0.18, len(frame))
    for g, collection in enumerate(points):
        pick = groups == g
        collection.set_offsets(np.column_stack([x[pick] + jitter[pick], mass[pick]]))
        artists[f"mass-means-{g}"].set_segments(_mean_segments(x[pick], mass[pick]))
    ax.set_xlim(0.4, x.max(initial=1) + 0.6)
    ax.set_xticks(np.arange(1, x.max(initial=1) + 1))
    ax.set_ylim(*_mass_limits(mass))
    ax.set_title(_mass_title(mode, rollout_level), fontsize=11)
    return True


def cap_drops(rows: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Rows kept and dropped by marked-row removal, mini-batch alignment and the update cap, by rollout size.

    ``rows``: ``Weighting.rows`` (its ``fate`` column). The title counts rollouts that lose some but not all rows:
    they reach the update with fewer rows, and under per_rollout_mean with fewer tokens (a renormalised T).
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    counts, ticks = _cap_counts(rows)
    bottom = np.zeros(len(counts))
    x = np.arange(len(counts))
    for fate in _cap_fates(counts):
        label, colour = FATE_STYLE[fate]
        values = counts[fate].to_numpy()
        ax.bar(x, values, 0.7, bottom=bottom, color=colour, label=f"{label}: {values.sum()}")
        bottom += values
    ax.set_xticks(x, ticks)
    ax.set_ylim(0, max(bottom.max(initial=0), 1) * 1.05)
    ax.set_xlabel("rows per rollout (as aggregated)")
    ax.set_ylabel("rows")
    ax.set_title(_cap_title(rows), fontsize=11)
    ax.legend(fontsize=8)
    return fig


def update_cap_drops(ax: Axes, rows: pd.DataFrame) -> bool:
    """Redraw a :func:`cap_drops` axes for another selection of the same kind of batch in place.

    Returns False (changing nothing) unless ``ax`` shows the same fates and rows-per-rollout classes.
    """
    counts, ticks = _cap_counts(rows)
    fates = _cap_fates(counts)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    drawn = [c.get_label().rsplit(":", 1)[0] for c in bars]
    legend = ax.get_legend()
    if drawn != [FATE_STYLE[f][0] for f in fates] or [t.get_text() for t in ax.get_xticklabels()] != ticks:
        return False
    if legend is None or any(len(c.patches) != len(counts) for c in bars):
        return False
    bottom = np.zeros(len(counts))
    for container, fate, text in zip(bars, fates, legend.get_texts(), strict=True):
        values = counts[fate].to_numpy()
        for patch, value, base in zip(container.patches, values, bottom, strict=True):
            patch.set_y(base)
            patch.set_height(value)
        text.set_text(f"{FATE_STYLE[fate][0]}: {values.sum()}")
        bottom += values
    ax.set_ylim(0, max(bottom.max(initial=0), 1) * 1.05)
    ax.set_title(_cap_title(rows), fontsize=11)
    return True


def _weight_stats(
    rollouts: pd.DataFrame, modes: Sequence[str] | None
) -> tuple[list[str], dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]], dict[int, str], np.ndarray, int]:
    """Per rows-per-rollout class: mean, 10th and 90th percentile of the relative weight under each mode."""
    level = rollouts["rollout_level"].iloc[0] if len(rollouts) else True
    batch = rollouts[rollouts["rollout_level"].to_numpy() == level]
    modes = list(modes) if modes is not None else list(batch["mode"].unique())
    # The bars are the classes 1..(the batch's largest rollout, as aggregated), so that drops change the bars'
    # heights, never which bars there are: a class no trained rollout falls in keeps its slot, empty (NaN).
    sizes, labels = _row_classes(batch["rows"].to_numpy())
    classes = np.arange(1, sizes.max(initial=1) + 1)
    mode_code = pd.Categorical(batch["mode"], categories=modes).codes  # (n,), -1 for a mode not asked for
    trained = (batch["rows_kept"].to_numpy() > 0) & (mode_code >= 0)
    row_class = np.minimum(batch["rows_kept"].to_numpy()[trained], _MAX_CLASS)
    # one sort for every (class, mode) group, not a pandas groupby: a third of the panel's redraw budget otherwise
    key = (row_class - 1) * len(modes) + mode_code[trained]
    order = np.argsort(key, kind="stable")
    key, values = key[order], batch["relative_weight"].to_numpy()[trained][order]
    groups = np.arange(len(classes) * len(modes))
    starts, ends = np.searchsorted(key, groups), np.searchsorted(key, groups, side="right")
    stats = np.full((3, len(groups)), np.nan)  # mean, 10th, 90th percentile
    for g in np.flatnonzero(ends > starts):
        part = values[starts[g] : ends[g]]
        stats[:, g] = part.mean(), *np.quantile(part, (0.1, 0.9))
    stats = stats.reshape(3, len(classes), len(modes))
    per_class = {int(c): (stats[0, i], stats[1, i], stats[2, i]) for i, c in enumerate(classes)}
    weight = batch["weight"].to_numpy()[trained]
    totals = np.bincount(mode_code[trained], weights=weight, minlength=len(modes))[: len(modes)]
    n_rollouts = int((mode_code[trained] == 0).sum())
    return modes, per_class, labels, totals, n_rollouts


def _class_x(j: int, n_classes: int, n_modes: int) -> np.ndarray:
    """x of class ``j``'s bars: side by side within each mode's slot of width 0.8."""
    return np.arange(n_modes) + (j - (n_classes - 1) / 2) * (0.8 / max(n_classes, 1))


def _whiskers(per_class: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]], n_modes: int) -> list[np.ndarray]:
    segments = []
    for j, (_, low, high) in enumerate(per_class.values()):
        for x, lo, hi in zip(_class_x(j, len(per_class), n_modes), low, high, strict=True):
            if np.isfinite(lo) and np.isfinite(hi):
                segments.append(np.array([[x, lo], [x, hi]]))
    return segments


def _weights_top(per_class: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> float:
    """Where the Σ labels sit: above the highest bar or whisker, and at least above the fair-share line."""
    highest = [
        np.nanmax(np.concatenate([mean, high])) for mean, _, high in per_class.values() if np.isfinite(mean).any()
    ]
    return max([1.0, *highest]) * 1.1


def _weights_title(n_rollouts: int) -> str:
    return f"How much a rollout weighs, by loss mode and rows per rollout ({n_rollouts} rollouts trained)"


def _cap_counts(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows per (rows-per-rollout class, fate), and the classes' tick labels."""
    classes, labels = _row_classes(rows["rows_in_rollout"].to_numpy())
    present = np.unique(classes)
    fate = pd.Categorical(rows["fate"], categories=list(FATE_STYLE)).codes  # (rows,)
    cell = np.searchsorted(present, classes) * len(FATE_STYLE) + fate
    counts = np.bincount(cell, minlength=len(present) * len(FATE_STYLE)).reshape(len(present), len(FATE_STYLE))
    return pd.DataFrame(counts, index=present, columns=list(FATE_STYLE)), [labels[c] for c in present]


def _cap_fates(counts: pd.DataFrame) -> list[str]:
    """The fates drawn: those that happened, and always "kept"."""
    return [fate for fate in FATE_STYLE if counts[fate].any() or fate == "kept"]


def _cap_title(rows: pd.DataFrame) -> str:
    kept = rows["fate"] == "kept"
    per_rollout = kept.groupby(rows["rollout_id"], sort=False).agg(["any", "all"])
    partial = int((per_rollout["any"] & ~per_rollout["all"]).sum())
    return (
        f"Rows kept for the update: {int(kept.sum())} of {len(rows)}\n"
        f"({partial} rollouts lose some but not all of their rows)"
    )


def _mass_frame(rollouts: pd.DataFrame, mode: str, rollout_level: bool) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    frame = rollouts[(rollouts["mode"] == mode) & (rollouts["rollout_level"] == rollout_level)]
    frame = frame[frame["rows_kept"] > 0]
    groups, names = _reward_groups(frame["reward"].to_numpy())
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


def _empty_note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=11, color="0.3")


def figure_and_axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new pyplot-free figure of ``size`` inches with one axes."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _row_classes(sizes: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
    """Rows per rollout capped at _MAX_CLASS, and each class's label ("6+" for the cap)."""
    classes = np.minimum(sizes, _MAX_CLASS)
    labels = {k: str(k) for k in range(1, _MAX_CLASS)}
    labels[_MAX_CLASS] = f"{_MAX_CLASS}+" if (sizes > _MAX_CLASS).any() else str(_MAX_CLASS)
    return classes, labels


def _class_colours(n: int) -> list:
    return [colormaps["viridis"](v) for v in np.linspace(0.15, 0.85, n)]


def _reward_groups(rewards: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Rollouts split at the midpoint of the batch's rewards: higher (0) and lower (1); one group if all equal."""
    if len(rewards) == 0 or rewards.min() == rewards.max():
        value = rewards[0] if len(rewards) else float("nan")
        return np.zeros(len(rewards), dtype=int), [f"reward {value:g}"]
    threshold = (rewards.min() + rewards.max()) / 2
    groups = np.where(rewards >= threshold, 0, 1)
    return groups, [f"higher reward (≥ {threshold:g})", f"lower reward (< {threshold:g})"]


def _short(value: float) -> str:
    """3 significant digits, without an exponent for the usual loss scales."""
    return f"{value:.3g}"
