"""A batch's rollouts by how many rows they became: weight statistics and row fates per rows-per-rollout class.

The weighting figures (:mod:`agl_lab.lab.weight_figures`, :mod:`agl_lab.lab.batch_figures`) draw these;
computing them here keeps the statistics out of the drawing code and testable on their own. :func:`row_classes`
gives one class per row count the data has (a run's 10-row trajectories are class 10, as verl PR #7580 reports
them); the weighting panel's figures, which keep one trace per class for their fast redraws, pool at ``MAX_CLASS``
("6+"): there classes run 1..the batch's largest rollout as aggregated, so drops change the bars' heights but never
which bars there are. Inputs are the tidy frames of :class:`agl_lab.lab.weighting.Weighting`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agl_lab.core.groups import RolloutGroups

__all__ = [
    "MAX_CLASS",
    "ClassWeights",
    "class_weights",
    "fate_counts",
    "fates_by_class",
    "row_classes",
    "size_counts",
    "weights_by_class",
]

MAX_CLASS = 6  # the panel's figures: rollouts with this many rows or more share one class ("6+")


@dataclass(frozen=True)
class ClassWeights:
    """Relative weight of the trained rollouts per (rows-per-rollout class, mode): mean, 10th, 90th percentile."""

    modes: list[str]
    classes: np.ndarray  # (classes,) 1..largest
    labels: dict[int, str]  # class -> tick label ("6+" for the last when it pools)
    mean: np.ndarray  # (classes, modes); NaN where no trained rollout falls in the class
    low: np.ndarray  # (classes, modes) 10th percentile
    high: np.ndarray  # (classes, modes) 90th percentile
    totals: np.ndarray  # (modes,) the batch's total weight (loss scale) under each mode
    n_rollouts: int  # rollouts trained


def row_classes(sizes: np.ndarray, *, cap: int | None = None) -> tuple[np.ndarray, dict[int, str]]:
    """Each rollout's class, its rows per rollout, and each class's label: one class per row count in ``sizes``
    (``"10"`` for ten rows). With ``cap``, counts from ``cap`` up share the class ``cap`` (label ``"6+"`` when it
    pools more than one count) and the labels run 1..cap, whether the data has them or not."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if cap is None:
        return sizes, {int(k): str(int(k)) for k in np.unique(sizes)}
    classes = np.minimum(sizes, cap)
    labels = {k: str(k) for k in range(1, cap)}
    labels[cap] = f"{cap}+" if (sizes > cap).any() else str(cap)
    return classes, labels


def weights_by_class(rollouts: pd.DataFrame, modes: Sequence[str] | None = None) -> ClassWeights:
    """``Weighting.rollouts`` summarised per class and mode (weights do not depend on rollout-level advantage)."""
    level = rollouts["rollout_level"].iloc[0] if len(rollouts) else True
    batch = rollouts[rollouts["rollout_level"].to_numpy() == level]
    modes = list(modes) if modes is not None else list(batch["mode"].unique())
    n = int((batch["mode"] == modes[0]).sum()) if modes else 0
    pick = [batch[batch["mode"].to_numpy() == mode] for mode in modes]
    relative = np.stack([p["relative_weight"].to_numpy() for p in pick]) if modes else np.zeros((0, n))
    weight = np.stack([p["weight"].to_numpy() for p in pick]) if modes else np.zeros((0, n))
    rows = pick[0]["rows"].to_numpy() if modes else np.zeros(0, dtype=int)
    rows_kept = pick[0]["rows_kept"].to_numpy() if modes else np.zeros(0, dtype=int)
    return class_weights(rows, rows_kept, relative, weight, modes)


def class_weights(
    rows: np.ndarray, rows_kept: np.ndarray, relative: np.ndarray, weight: np.ndarray, modes: Sequence[str]
) -> ClassWeights:
    """The per-class statistics from arrays: ``rows``/``rows_kept`` (rollouts,) as aggregated and as kept,
    ``relative``/``weight`` (modes, rollouts). Classes run 1..the largest rollout as aggregated.

    Percentiles are numpy's linear ones: every (class, mode) grouped by one integer sort, then each group's order
    statistics by a partition.
    """
    modes = list(modes)
    sizes, labels = row_classes(rows, cap=MAX_CLASS)
    classes = np.arange(1, sizes.max(initial=1) + 1)
    trained = rows_kept > 0
    row_class = np.minimum(rows_kept[trained], MAX_CLASS) - 1  # (trained,)
    # modes that weigh alike (token-mean and TRL's dapo, …) share one computation
    firsts: dict[bytes, int] = {}
    of_mode = np.array([firsts.setdefault(row.tobytes(), i) for i, row in enumerate(relative[:, trained])], dtype=int)
    distinct = np.unique(of_mode)
    values = relative[distinct][:, trained]  # (distinct modes, trained)
    n_classes, n_distinct = len(classes), len(distinct)
    n_groups = n_classes * n_distinct
    key = (row_class[None, :] * n_distinct + np.arange(n_distinct)[:, None]).ravel()  # (distinct · trained,)
    flat = np.nan_to_num(values.ravel(), nan=0.0)
    # grouped by one stable sort of small integers (a radix sort), then per group only the four order statistics the
    # percentiles need (np.partition): an argsort of every value was most of this function's time at 10k rows
    order = np.argsort(key.astype(np.int32 if n_groups >= 2**15 else np.int16), kind="stable")
    grouped = flat[order]
    counts = np.bincount(key, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    stats = np.full((3, n_groups), np.nan)  # mean, 10th, 90th percentile
    sums = np.bincount(key, weights=flat, minlength=n_groups)
    alive = np.flatnonzero(counts > 0)
    stats[0, alive] = sums[alive] / counts[alive]
    # numpy's "linear" percentiles at positions 0.1·last and 0.9·last: the order statistics either side of each
    last = (counts[alive] - 1).astype(np.float64)  # (alive,)
    position = np.stack([0.1 * last, 0.9 * last])  # (2, alive)
    low = np.floor(position).astype(np.int64)  # (2, alive)
    kth = np.stack([low[0], np.minimum(low[0] + 1, last), low[1], np.minimum(low[1] + 1, last)]).astype(np.int64)
    ranks = np.empty(kth.shape)  # (4, alive): the four order statistics of each group
    for j, (start, count, k) in enumerate(zip(starts[alive].tolist(), counts[alive].tolist(), kth.T, strict=True)):
        ranks[:, j] = np.partition(grouped[start : start + count], k)[k]
    stats[1:, alive] = ranks[0::2] + (position - low) * (ranks[1::2] - ranks[0::2])
    column = np.searchsorted(distinct, of_mode)  # (modes,) each mode's distinct column
    stats = stats.reshape(3, n_classes, n_distinct)[:, :, column]  # (3, classes, modes)
    n_modes = len(modes)
    mean, low, high = stats
    totals = weight[:, trained].sum(axis=1) if n_modes else np.zeros(0)
    return ClassWeights(modes, classes, labels, mean, low, high, totals, int(trained.sum()))


def size_counts(sizes: np.ndarray, reward: np.ndarray) -> np.ndarray:
    """(2, largest rollout) rollouts per row count (as aggregated): higher reward, lower reward (the midpoint split)."""
    higher = reward >= (reward.min() + reward.max()) / 2 if len(reward) else np.zeros(0, bool)
    length = int(sizes.max(initial=1))
    return np.stack([np.bincount(sizes[g] - 1, minlength=length) for g in (higher, ~higher)])


def fate_counts(rollouts: RolloutGroups, fate: np.ndarray) -> np.ndarray:
    """(fates, classes) rows per fate (``FATES`` order) and rows-per-rollout class (as aggregated, 6+ pooled)."""
    from agl_lab.core.pipeline import FATES  # here: the class statistics load without verl's trainer

    classes = np.minimum(rollouts.sizes[rollouts.codes], MAX_CLASS) - 1  # (rows,)
    codes = sum(i * (fate == name) for i, name in enumerate(FATES))  # (rows,) index into FATES
    n_classes = int(classes.max(initial=0)) + 1
    return np.bincount(codes * n_classes + classes, minlength=len(FATES) * n_classes).reshape(len(FATES), n_classes)


def fates_by_class(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows per (class present, fate) from ``Weighting.rows``, and the present classes' tick labels (6+ pooled)."""
    from agl_lab.core.pipeline import FATES

    classes, labels = row_classes(rows["rows_in_rollout"].to_numpy(), cap=MAX_CLASS)
    present = np.unique(classes)
    fate = pd.Categorical(rows["fate"], categories=list(FATES)).codes  # (rows,)
    cell = np.searchsorted(present, classes) * len(FATES) + fate
    counts = np.bincount(cell, minlength=len(present) * len(FATES)).reshape(len(present), len(FATES))
    return pd.DataFrame(counts, index=present, columns=list(FATES)), [labels[c] for c in present]
