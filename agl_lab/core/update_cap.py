"""Which rows reach the PPO update: marked rows out, then mini-batch alignment and the update cap.

Trace aggregation makes the row count of a step vary, but verl updates in whole PPO mini-batches of
``ppo_mini_batch_size × rollout.n`` rows. Agent Lightning therefore keeps ``floor(n / mini_bs) × mini_bs``
rows, at most ``mini_bs × agentlightning.max_ppo_update_times`` (null = no cap; the docs recommend 2).
The surplus is dropped per row: first from uid groups whose rewards are all equal (with GRPO their
advantages are zero, so they carry no signal), then at random from the rest. v1.0 draws from an
unseeded global RNG; here ``seed`` makes the choice reproducible. Notebook:
``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto

from agl_lab.core.groups import as_arrays, group_key, group_rows, non_tensor_ids, uniform_groups
from agl_lab.core.rows import require_matrix

__all__ = [
    "CapPlan",
    "EmptyBatchWarning",
    "apply_update_cap",
    "drop_marked_rows",
    "marked_rows_kept",
    "plan_update_cap",
    "same_reward_rows",
    "take_rows",
]


class EmptyBatchWarning(UserWarning):
    """Nothing is left to train on after the drops; the step should be skipped."""


def drop_marked_rows(batch: DataProto) -> tuple[DataProto, dict[str, int]]:
    """Remove rows flagged ``is_drop_mask`` (prompt over the aggregator's limit); count them."""
    keep, metrics = marked_rows_kept(batch)
    return (batch if len(keep) == len(batch) else take_rows(batch, keep)), metrics


def marked_rows_kept(batch: DataProto) -> tuple[np.ndarray, dict[str, int]]:
    """(kept,) indices of the rows not flagged ``is_drop_mask``, and the counters of :func:`drop_marked_rows`.

    ``training/n_sample_dropped/marked`` is logged only when the batch has ``is_drop_mask``, as Agent Lightning does.
    """
    n = len(batch)
    metrics = {"training/n_sample_collected": n}
    if batch.batch is None or "is_drop_mask" not in batch.batch.keys():
        return np.arange(n, dtype=np.int64), metrics
    marked = batch.batch["is_drop_mask"]
    if marked.shape != (n,):
        raise ValueError(f"batch['is_drop_mask'] must have shape ({n},) (one flag per row), got {tuple(marked.shape)}")
    keep = np.flatnonzero(~marked.bool().cpu().numpy()).astype(np.int64)  # (kept,)
    metrics["training/n_sample_dropped/marked"] = n - len(keep)
    return keep, metrics


@dataclass(frozen=True)
class CapPlan:
    """Which rows the alignment and cap keep, and why each other row goes (indices into the batch, ascending)."""

    kept: np.ndarray  # (kept,) int64
    dropped_same_reward: np.ndarray  # (n_same,) int64: surplus rows from uid groups with one reward throughout
    dropped_random: np.ndarray  # (n_random,) int64: surplus rows drawn at random from the others

    @property
    def metrics(self) -> dict[str, int]:
        return {
            "training/n_sample_dropped/same_reward": len(self.dropped_same_reward),
            "training/n_sample_dropped/random": len(self.dropped_random),
            "training/n_sample_trained": len(self.kept),
        }


def apply_update_cap(
    batch: DataProto,
    *,
    mini_batch_size: int,
    max_ppo_update_times: int | None = None,
    seed: int | None = None,
) -> tuple[DataProto, dict[str, int]]:
    """Keep whole PPO mini-batches of rows (at most ``max_ppo_update_times`` of them); drop the surplus.

    ``mini_batch_size`` is counted in rows: the trainer passes ``ppo_mini_batch_size × rollout.n``.
    Returns the kept rows in their original order and ``training/n_sample_dropped/same_reward``,
    ``training/n_sample_dropped/random`` and ``training/n_sample_trained``. When nothing is left the
    empty batch is returned with an :class:`EmptyBatchWarning`.
    """
    plan = plan_update_cap(batch, mini_batch_size=mini_batch_size, max_ppo_update_times=max_ppo_update_times, seed=seed)
    if len(plan.kept) < len(batch):
        batch = take_rows(batch, plan.kept)
    if len(batch) == 0:
        warnings.warn(
            f"no trainable batch after drop+floor ({len(plan.dropped_random) + len(plan.dropped_same_reward)} rows "
            f"< one mini-batch of {mini_batch_size} rows); skipping this training step",
            EmptyBatchWarning,
            stacklevel=2,
        )
    return batch, plan.metrics


def plan_update_cap(
    batch: DataProto,
    *,
    mini_batch_size: int,
    max_ppo_update_times: int | None = None,
    seed: int | None = None,
) -> CapPlan:
    """What :func:`apply_update_cap` keeps and drops, without touching ``batch``: the trainer's draw, with reasons."""
    if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int | np.integer) or mini_batch_size < 1:
        raise ValueError(
            f"mini_batch_size must be a positive number of rows (ppo_mini_batch_size × rollout.n), "
            f"got {mini_batch_size!r}"
        )
    if max_ppo_update_times is not None and (
        isinstance(max_ppo_update_times, bool)
        or not isinstance(max_ppo_update_times, int | np.integer)
        or max_ppo_update_times < 1
    ):
        raise ValueError(
            f"agentlightning.max_ppo_update_times must be null (no cap) or an integer >= 1, "
            f"got {max_ppo_update_times!r}; Agent Lightning recommends 2"
        )
    n = len(batch)
    n_kept = n // mini_batch_size * mini_batch_size
    if max_ppo_update_times is not None:
        n_kept = min(n_kept, mini_batch_size * int(max_ppo_update_times))
    n_to_drop = n - n_kept
    if n_to_drop == 0:
        empty = np.zeros(0, dtype=np.int64)
        return CapPlan(kept=np.arange(n, dtype=np.int64), dropped_same_reward=empty, dropped_random=empty)
    rng = np.random.default_rng(seed)
    same = same_reward_rows(batch)  # (same_rows,)
    drop_same = rng.permutation(same)[:n_to_drop]
    others = np.setdiff1d(np.arange(n), drop_same, assume_unique=True)
    drop_random = rng.permutation(others)[: n_to_drop - len(drop_same)]
    keep = np.ones(n, dtype=bool)
    keep[drop_same] = False
    keep[drop_random] = False
    return CapPlan(
        kept=np.flatnonzero(keep).astype(np.int64),
        dropped_same_reward=np.sort(drop_same).astype(np.int64),
        dropped_random=np.sort(drop_random).astype(np.int64),
    )


def take_rows(batch: DataProto, index: np.ndarray) -> DataProto:
    """The rows ``index`` of ``batch``, in that order (verl's indexing; id columns given as lists are fine too)."""
    whole = DataProto(batch=batch.batch, non_tensor_batch=as_arrays(batch.non_tensor_batch), meta_info=batch.meta_info)
    return whole[torch.from_numpy(np.asarray(index, dtype=np.int64))]


def same_reward_rows(batch: DataProto) -> np.ndarray:
    """Indices of rows whose uid group (``uid``, else ``data_id_list``) has one reward for every row."""
    key = group_key(batch)
    if key is None or len(batch) == 0:
        return np.zeros(0, dtype=np.int64)
    groups = group_rows(non_tensor_ids(batch, key), field=key)
    # Summed and compared in the scores' own dtype, as Agent Lightning does: in bf16 (its scores' dtype) rewards
    # that round to one bf16 value are the same reward.
    scores = require_matrix(batch, "token_level_scores", floating=True, finite=True).sum(dim=-1)  # (rows,)
    return np.flatnonzero(uniform_groups(groups, scores)[groups.codes])
