"""Figures of a batch's rows: how many rows each rollout became, and which rows the drops and the cap keep.

Like :mod:`agl_lab.lab.weight_figures`: one function per figure, taking ``Weighting.rows`` (or
:func:`agl_lab.rows_frame`) and an optional Axes, returning the Figure made without pyplot. Also the helpers both
figure modules share. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from agl_lab.core.keys import PARTIALLY_DROPPED_ROLLOUTS
from agl_lab.lab.class_stats import fates_by_class

__all__ = [
    "FATE_STYLE",
    "GROUP_COLOURS",
    "cap_drops",
    "empty_note",
    "figure_and_axes",
    "reward_groups",
    "rows_per_rollout_histogram",
]


FATE_STYLE = {  # fate (agl_lab.core.pipeline.FATES) → (legend label, colour)
    "kept": ("kept", "tab:blue"),
    "dropped/same_reward": ("dropped: same-reward group", "tab:orange"),
    "dropped/random": ("dropped: random", "tab:red"),
    "dropped/marked": ("dropped: marked (prompt too long)", "tab:gray"),
}


GROUP_COLOURS = ("tab:green", "tab:red")  # higher reward, lower reward


def rows_per_rollout_histogram(rows: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """How many rows trace aggregation made of each rollout, stacked by reward (higher vs lower half).

    ``rows``: one line per row with ``rollout_id``, ``reward`` and ``rows_in_rollout`` (``Weighting.rows`` or
    :func:`agl_lab.core.rows.rows_frame`).
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    per_rollout = rows.drop_duplicates("rollout_id")
    sizes = per_rollout["rows_in_rollout"].to_numpy()
    groups, names = reward_groups(per_rollout["reward"].to_numpy())
    edges = np.arange(1, sizes.max(initial=1) + 2) - 0.5
    stacked = [sizes[groups == g] for g in range(len(names))]
    labels = [
        f"{name}: {len(s)} rollouts" + (f", {s.mean():.2f} rows each" if len(s) else "")
        for name, s in zip(names, stacked, strict=True)
    ]
    ax.hist(stacked, bins=edges, stacked=True, color=GROUP_COLOURS[: len(names)], label=labels, rwidth=0.85)
    ax.set_xticks(np.arange(1, sizes.max(initial=1) + 1))
    ax.set_xlabel("rows per rollout")
    ax.set_ylabel("rollouts")
    ax.set_title(
        f"Rows per rollout after trace aggregation\n({len(rows)} rows, {len(per_rollout)} rollouts)", fontsize=11
    )
    ax.legend(fontsize=8, loc="upper right")
    return fig


def cap_drops(rows: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Rows kept and dropped by marked-row removal, mini-batch alignment and the update cap, by rollout size.

    ``rows``: ``Weighting.rows`` (its ``fate`` column). The title counts rollouts that lose some but not all rows:
    they reach the update with fewer rows, and under per_rollout_mean with fewer tokens (a renormalised T).
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    counts, ticks = fates_by_class(rows)
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


def _cap_fates(counts: pd.DataFrame) -> list[str]:
    """The fates drawn: those that happened, and always "kept"."""
    return [fate for fate in FATE_STYLE if counts[fate].any() or fate == "kept"]


def _cap_title(rows: pd.DataFrame) -> str:
    kept = rows["fate"] == "kept"
    partial = rows.attrs.get(PARTIALLY_DROPPED_ROLLOUTS)  # counted once, by the pipeline's Selection
    title = f"Rows kept for the update: {int(kept.sum())} of {len(rows)}"
    return title if partial is None else f"{title}\n({partial} rollouts lose some but not all of their rows)"


def empty_note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=11, color="0.3")


def figure_and_axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new pyplot-free figure of ``size`` inches with one axes."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def reward_groups(rewards: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Rollouts split at the midpoint of the batch's rewards: higher (0) and lower (1); one group if all equal."""
    if len(rewards) == 0 or rewards.min() == rewards.max():
        value = rewards[0] if len(rewards) else float("nan")
        return np.zeros(len(rewards), dtype=int), [f"reward {value:g}"]
    threshold = (rewards.min() + rewards.max()) / 2
    groups = np.where(rewards >= threshold, 0, 1)
    return groups, [f"higher reward (≥ {threshold:g})", f"lower reward (< {threshold:g})"]
