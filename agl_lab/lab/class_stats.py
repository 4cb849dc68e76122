"""A batch's rollouts by how many rows they became: weight statistics and row fates per rows-per-rollout class.

The weighting figures (:mod:`agl_lab.lab.weight_figures`, :mod:`agl_lab.lab.batch_figures`) draw these;
computing them here keeps the statistics out of the drawing code and testable on their own. Classes run
1..the batch's largest rollout as aggregated, the last one holding every rollout of ``MAX_CLASS`` rows or more
("6+"), so drops change the bars' heights but never which bars there are. Inputs are the tidy frames of
:class:`agl_lab.lab.weighting.Weighting`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agl_lab.core.pipeline import FATES

__all__ = [
    "MAX_CLASS",
    "ClassWeights",
    "fates_by_class",
    "partially_dropped_rollouts",
    "row_classes",
    "weights_by_class",
]

MAX_CLASS = 6  # rollouts with this many rows or more share one class ("6+")


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


def row_classes(sizes: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
    """Rows per rollout capped at ``MAX_CLASS``, and each class's label ("6+" for the cap when it pools)."""
    classes = np.minimum(sizes, MAX_CLASS)
    labels = {k: str(k) for k in range(1, MAX_CLASS)}
    labels[MAX_CLASS] = f"{MAX_CLASS}+" if (sizes > MAX_CLASS).any() else str(MAX_CLASS)
    return classes, labels


def weights_by_class(rollouts: pd.DataFrame, modes: Sequence[str] | None = None) -> ClassWeights:
    """``Weighting.rollouts`` summarised per class and mode (weights do not depend on rollout-level advantage)."""
    level = rollouts["rollout_level"].iloc[0] if len(rollouts) else True
    batch = rollouts[rollouts["rollout_level"].to_numpy() == level]
    modes = list(modes) if modes is not None else list(batch["mode"].unique())
    sizes, labels = row_classes(batch["rows"].to_numpy())
    classes = np.arange(1, sizes.max(initial=1) + 1)
    mode_code = pd.Categorical(batch["mode"], categories=modes).codes  # (n,), -1 for a mode not asked for
    trained = (batch["rows_kept"].to_numpy() > 0) & (mode_code >= 0)
    row_class = np.minimum(batch["rows_kept"].to_numpy()[trained], MAX_CLASS)
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
    mean, low, high = stats.reshape(3, len(classes), len(modes))
    weight = batch["weight"].to_numpy()[trained]
    totals = np.bincount(mode_code[trained], weights=weight, minlength=len(modes))[: len(modes)]
    n_rollouts = int((mode_code[trained] == 0).sum())
    return ClassWeights(modes, classes, labels, mean, low, high, totals, n_rollouts)


def fates_by_class(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows per (class present, fate) from ``Weighting.rows``, and the present classes' tick labels."""
    classes, labels = row_classes(rows["rows_in_rollout"].to_numpy())
    present = np.unique(classes)
    fate = pd.Categorical(rows["fate"], categories=list(FATES)).codes  # (rows,)
    cell = np.searchsorted(present, classes) * len(FATES) + fate
    counts = np.bincount(cell, minlength=len(present) * len(FATES)).reshape(len(present), len(FATES))
    return pd.DataFrame(counts, index=present, columns=list(FATES)), [labels[c] for c in present]


def partially_dropped_rollouts(rows: pd.DataFrame) -> int:
    """Rollouts that lose some but not all of their rows (under per_rollout_mean they renormalize over fewer)."""
    kept = rows["fate"] == "kept"
    per_rollout = kept.groupby(rows["rollout_id"], sort=False).agg(["any", "all"])
    return int((per_rollout["any"] & ~per_rollout["all"]).sum())
