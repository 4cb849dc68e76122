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

import numpy as np
import torch
from verl import DataProto

from agl_lab.rows import group_rows, non_tensor_ids, require_matrix

__all__ = ["EmptyBatchWarning", "apply_update_cap", "drop_marked_rows", "same_reward_rows"]


class EmptyBatchWarning(UserWarning):
    """Nothing is left to train on after the drops; the step should be skipped."""


def drop_marked_rows(batch: DataProto) -> tuple[DataProto, dict[str, int]]:
    """Remove rows flagged ``is_drop_mask`` (prompt over the aggregator's limit); count them."""
    n = len(batch)
    metrics = {"training/n_sample_collected": n, "training/n_sample_dropped/marked": 0}
    if batch.batch is None or "is_drop_mask" not in batch.batch.keys():
        return batch, metrics
    marked = batch.batch["is_drop_mask"]
    if marked.shape != (n,):
        raise ValueError(f"batch['is_drop_mask'] must have shape ({n},) (one flag per row), got {tuple(marked.shape)}")
    keep = (~marked.bool()).nonzero().flatten()  # (kept,)
    metrics["training/n_sample_dropped/marked"] = n - len(keep)
    return (batch if len(keep) == n else batch[keep]), metrics


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

    drop_same = drop_random = np.zeros(0, dtype=np.int64)
    if n_to_drop > 0:
        rng = np.random.default_rng(seed)
        same = same_reward_rows(batch)  # (same_rows,)
        drop_same = rng.permutation(same)[:n_to_drop]
        others = np.setdiff1d(np.arange(n), drop_same, assume_unique=True)
        drop_random = rng.permutation(others)[: n_to_drop - len(drop_same)]
        keep = np.ones(n, dtype=bool)
        keep[drop_same] = False
        keep[drop_random] = False
        batch = batch[torch.from_numpy(np.flatnonzero(keep))]

    metrics = {
        "training/n_sample_dropped/same_reward": len(drop_same),
        "training/n_sample_dropped/random": len(drop_random),
        "training/n_sample_trained": len(batch),
    }
    if len(batch) == 0:
        warnings.warn(
            f"no trainable batch after drop+floor ({n} rows < one mini-batch of {mini_batch_size} rows); "
            "skipping this training step",
            EmptyBatchWarning,
            stacklevel=2,
        )
    return batch, metrics


def same_reward_rows(batch: DataProto) -> np.ndarray:
    """Indices of rows whose uid group (``uid``, else ``data_id_list``) has one reward for every row."""
    key = next((k for k in ("uid", "data_id_list") if k in batch.non_tensor_batch), None)
    if key is None or len(batch) == 0:
        return np.zeros(0, dtype=np.int64)
    groups = group_rows(non_tensor_ids(batch, key), field=key)
    scores = require_matrix(batch, "token_level_scores", floating=True, finite=True).sum(dim=-1).float()  # (rows,)
    first_of_row = torch.from_numpy(groups.first_rows[groups.codes])  # (rows,)
    differs = (~torch.isclose(scores, scores[first_of_row])).cpu().numpy()  # (rows,)
    group_same = np.bincount(groups.codes, weights=differs, minlength=groups.n_groups) == 0  # (groups,)
    return np.flatnonzero(group_same[groups.codes])
