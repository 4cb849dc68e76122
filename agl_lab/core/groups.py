"""Rows grouped by an id: by rollout (``rollout_id_list``) or by GRPO group (``uid``, else ``data_id_list``).

Every stage that asks "which rows belong together" (rollout-level advantage, the per-rollout
normalization, the same-reward drop, the weighting analysis) groups through :func:`group_rows`, and every
stage that asks "does this group hold one value throughout" (one reward per rollout, one reward per uid
group) through :func:`uniform_groups`, so the answers agree everywhere. Ids may come as a numpy array, a list,
a tuple or a pandas Series; they compare like dict keys (``1 == 1.0``), which is how Agent Lightning groups
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # the readers and the weight catalogue group ids without loading torch or verl (Ray, tensordict)
    import torch
    from verl import DataProto

__all__ = [
    "GROUP_KEYS",
    "RolloutGroups",
    "as_ids",
    "as_arrays",
    "group_key",
    "group_rows",
    "non_tensor_ids",
    "rollouts_per_prompt",
    "uniform_groups",
]

# Where the GRPO group of a row is read from, in order: the trainer sets ``uid = data_id_list``.
GROUP_KEYS = ("uid", "data_id_list")


@dataclass(frozen=True)
class RolloutGroups:
    """Rows grouped by an id column, in order of first appearance (as a Python dict would group them)."""

    codes: np.ndarray  # (rows,) int64: group index of each row
    first_rows: np.ndarray  # (groups,) int64: index of each group's first row
    sizes: np.ndarray  # (groups,) int64: rows per group
    ids: np.ndarray  # (groups,): the id of each group, its first row's element

    @property
    def n_groups(self) -> int:
        return len(self.first_rows)


def as_ids(values: Any, *, field: str) -> np.ndarray:
    """``values`` as a 1-D array with one id per row, whatever sequence type they came in.

    Tuple ids stay tuples (one id each), which ``np.asarray`` alone would turn into a 2-D array.
    """
    if isinstance(values, np.ndarray) and values.ndim == 1:
        return values
    if isinstance(values, pd.Series | pd.Index):
        return values.to_numpy()
    if isinstance(values, np.ndarray) or not isinstance(values, Sequence) or isinstance(values, str | bytes):
        raise ValueError(
            f"{field} must hold one hashable id per row (a 1-D array, list, tuple or Series), "
            f"got {type(values).__name__}{f' of shape {values.shape}' if isinstance(values, np.ndarray) else ''}"
        )
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # element by element: a list of equal-length tuples must not broadcast
        out[i] = value
    return out


def as_arrays(non_tensor_batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """A copy of a ``non_tensor_batch`` whose columns are all numpy arrays (lists, tuples, Series converted).

    verl indexes every column with an array of rows, which a list cannot take; numpy columns pass as they are.
    """
    return {
        key: values if isinstance(values, np.ndarray) else as_ids(values, field=f"non_tensor_batch[{key!r}]")
        for key, values in non_tensor_batch.items()
    }


def group_rows(ids: Any, *, field: str) -> RolloutGroups:
    """Group rows by ``ids`` without a Python loop over rows.

    Missing ids (``None``/NaN) are refused: a row that belongs to no rollout cannot be weighted.
    """
    ids = as_ids(ids, field=field)
    try:
        codes, uniques = pd.factorize(ids, use_na_sentinel=True)
    except TypeError as exc:  # lists or dicts cannot be dict keys either
        raise ValueError(f"{field} must hold hashable ids (str or int), got unhashable values: {exc}") from exc
    missing = np.flatnonzero(codes < 0)
    if len(missing):
        raise ValueError(
            f"{field} has missing values (None/NaN) at rows {missing[:10].tolist()}: "
            f"every row needs the id of the rollout or prompt it came from"
        )
    codes = codes.astype(np.int64, copy=False)
    # factorize numbers groups by first appearance (0, 1, 2, ...), so a group's first row is the first row whose code
    # exceeds every code before it: one pass, where np.unique(codes, return_index=True) sorts.
    seen = np.maximum.accumulate(codes)
    first_rows = np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]]) if len(codes) else np.zeros(0, dtype=np.int64)
    sizes = np.bincount(codes, minlength=len(uniques)).astype(np.int64)
    # Each group's id is its first row's own element (np.str_ from a '<U' array, as a dict keyed by the ids would
    # keep it), so messages print ids exactly as Agent Lightning's do.
    return RolloutGroups(codes=codes, first_rows=first_rows, sizes=sizes, ids=ids[first_rows])


def uniform_groups(groups: RolloutGroups, values: torch.Tensor) -> np.ndarray:
    """(groups,) bool: whether every row of a group holds its first row's value (``torch.isclose``).

    ``values``: (rows,) one number per row, e.g. each row's reward sum. NaN never counts as uniform.
    """
    if len(values) != len(groups.codes):
        raise ValueError(f"values has {len(values)} entries but the groups cover {len(groups.codes)} rows")
    import torch

    first_of_row = torch.from_numpy(groups.first_rows[groups.codes]).to(values.device)  # (rows,)
    differs = (~torch.isclose(values, values[first_of_row])).cpu().numpy()  # (rows,)
    return np.bincount(groups.codes, weights=differs, minlength=groups.n_groups) == 0  # (groups,)


def group_key(batch: DataProto) -> str | None:
    """The non-tensor field holding each row's GRPO group: ``uid``, else ``data_id_list``; None without either."""
    return next((key for key in GROUP_KEYS if key in batch.non_tensor_batch), None)


def non_tensor_ids(batch: DataProto, key: str, *, error: str | None = None) -> np.ndarray:
    """Return the non-tensor id column ``key`` as a 1-D array with one entry per row.

    ``error`` is the text raised (RuntimeError) when the column is missing, so callers keep the exact
    Agent Lightning wording; without it a ValueError names the field.
    """
    values = batch.non_tensor_batch.get(key)
    if values is None:
        if error is not None:
            raise RuntimeError(error)
        raise ValueError(f"batch lacks non_tensor_batch[{key!r}]: add it (one id per row) before this step")
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise ValueError(
            f"non_tensor_batch[{key!r}] must hold one hashable id per row (1-D), got shape {values.shape}: "
            f"ragged or nested ids cannot be grouped"
        )
    return as_ids(values, field=f"non_tensor_batch[{key!r}]")


def rollouts_per_prompt(rows: DataProto) -> int:
    """rollout.n of a batch: the most common number of rollouts per dataset item (1 without data ids)."""
    if "data_id_list" not in rows.non_tensor_batch:
        return 1
    frame = pd.DataFrame(
        {"uid": rows.non_tensor_batch["data_id_list"], "rollout": rows.non_tensor_batch["rollout_id_list"]}
    )
    counts = frame.drop_duplicates().groupby("uid", sort=False).size().to_numpy()
    values, freq = np.unique(counts, return_counts=True)
    return int(values[np.argmax(freq)])
