"""Per-turn advantage on Agent Lightning's rows: each rollout stitched into one trajectory, verl's estimator run on
the trajectories, every turn's advantage written back to the row and tokens it came from.

The per-turn estimators (:mod:`agl_lab.core.turn_estimators`) read a trajectory from one row, as verl's multi-turn
agent loop lays it out. Agent Lightning's trace aggregation can make several rows of one rollout: one per call at
the ``transition`` level, a new one after every context rewrite at the ``trajectory`` level. So, as rollout-level
advantage collapses a rollout to one row before the estimator, this module stitches each rollout's rows into one
short row, one token per turn (mask 1, the turn's reward) and one untrainable separator after it::

    rollout r:  row 0 = turns 0, 1    row 1 = turn 2      ->   [ρ0 · ρ1 · ρ2 ·]  (mask 1 0 1 0 1 0)

runs verl's ``compute_advantage`` on the stitched rows (``uid`` = the rollout's group) and gives every trainable
token of every row its turn's advantage. A rollout's rows are taken in ``turn_index_list`` order where the batch has
it (transition level), else in batch order (trace aggregation writes them in call order). Rows the update cap
dropped are missing turns: the stitched trajectory is what was kept (``lab.cap_drop_unit=rollout`` keeps rollouts
whole; the doctor says so). On any error the batch is left as it was. Notebook:
``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab.core.groups import group_key, group_rows, non_tensor_ids, uniform_groups
from agl_lab.core.keys import ROLLOUT_LEVEL
from agl_lab.core.rows import require_finite_rows, require_matrix
from agl_lab.core.turn_estimators import TURN_ESTIMATORS, is_turn_estimator
from agl_lab.core.turns import broadcast_turns, turn_values

__all__ = ["compute_turn_level_advantage", "rollout_level_problem"]


def compute_turn_level_advantage(
    batch: DataProto,
    *,
    adv_estimator: Any,
    gamma: float,
    lam: float,
    num_repeat: int,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any | None = None,
    compute_advantage_fn: Callable[..., DataProto] = compute_advantage,
) -> tuple[DataProto, dict[str, int]]:
    """Per-turn advantages for every row: each rollout's turns as one trajectory (module docstring).

    Writes ``advantages`` and ``returns`` (rows, R) into ``batch`` and returns it with the metrics
    ``training/turn_level_advantage/{n_rollouts,n_turns,max_turns}``; sets ``uid`` from ``data_id_list`` when it is
    missing. Any verl estimator runs (GRPO on the stitched rows is rollout-level GRPO on each rollout's summed
    rewards); the per-turn ones are what it is for.
    """
    rollout_ids = non_tensor_ids(
        batch, "rollout_id_list", error="per-turn advantage requires rollout_id_list in non_tensor_batch"
    )
    uid_key = group_key(batch)
    if uid_key is None:
        raise RuntimeError("per-turn advantage requires uid or data_id_list in non_tensor_batch")
    uids = non_tensor_ids(batch, uid_key)
    for name, ids in (("rollout_id_list", rollout_ids), (uid_key, uids)):
        if len(ids) != len(batch):
            raise ValueError(f"{name} length ({len(ids)}) must match batch length ({len(batch)})")
    if len(batch) == 0:
        raise ValueError("per-turn advantage got an empty batch (0 rows): skip the step instead")
    mask = require_matrix(batch, "response_mask", error="per-turn advantage requires response_mask in batch")
    rewards = require_matrix(
        batch, "token_level_rewards", like=mask, floating=True,
        error="per-turn advantage requires token_level_rewards in batch",
    )  # fmt: skip
    require_finite_rows(rewards.sum(dim=-1).float(), "token_level_rewards")

    rollouts = group_rows(rollout_ids, field="rollout_id_list")
    mixed = ~uniform_groups(rollouts, torch.from_numpy(group_rows(uids, field=uid_key).codes))
    if mixed.any():
        raise RuntimeError(f"per-turn advantage found multiple uid values for rollout_id={rollouts.ids[mixed][0]!r}")
    order = _row_order(batch, rollouts.codes)  # (rows,) rows grouped by rollout, in turn order
    per_turn, counts = turn_values(rewards, mask)  # (rows, K), (rows,)
    counts_np = counts.cpu().numpy()
    offset = _turn_offsets(rollouts.codes, counts_np, order)  # (rows,) the row's first turn within its rollout
    turns = np.bincount(rollouts.codes, weights=counts_np, minlength=rollouts.n_groups).astype(np.int64)  # (rollouts,)
    width = max(int(turns.max(initial=0)), 1)

    stitched = np.zeros((rollouts.n_groups, width))  # (rollouts, K): each rollout's turn rewards, in turn order
    row_of, turn_of = np.nonzero(np.arange(per_turn.shape[1])[None, :] < counts_np[:, None])  # (turns,) each
    stitched[rollouts.codes[row_of], offset[row_of] + turn_of] = per_turn.cpu().numpy()[row_of, turn_of]
    view = _stitched_batch(batch, stitched, turns, uids[rollouts.first_rows], rewards.dtype)
    kwargs = {"adv_estimator": adv_estimator, "gamma": gamma, "lam": lam, "num_repeat": num_repeat,
              "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo, "config": config}  # fmt: skip
    view = compute_advantage_fn(view, **kwargs)

    written = {}
    for key in ("advantages", "returns"):
        values = require_matrix(view, key, like=view.batch["response_mask"])[:, 0::2].double()  # (rollouts, K)
        back = torch.zeros(per_turn.shape, dtype=torch.float64)  # (rows, K): each row's turns, in its order
        back[row_of, turn_of] = values[rollouts.codes[row_of], offset[row_of] + turn_of]
        written[key] = broadcast_turns(back.to(mask.device), mask, dtype=view.batch[key].dtype)  # (rows, R)
    batch.batch.update(written)
    if uid_key != "uid":
        batch.non_tensor_batch["uid"] = uids
    return batch, {
        "training/turn_level_advantage/n_rollouts": rollouts.n_groups,
        "training/turn_level_advantage/n_turns": int(turns.sum()),
        "training/turn_level_advantage/max_turns": int(turns.max(initial=0)),
    }


def rollout_level_problem(adv_estimator: Any, rollout_level: bool) -> tuple[str, str] | None:
    """``(why, fix)`` when a per-turn estimator meets rollout-level advantage (the doctor's line), else None."""
    if not (rollout_level and is_turn_estimator(adv_estimator)):
        return None
    name = str(getattr(adv_estimator, "value", adv_estimator))
    return (
        f"{name} ({TURN_ESTIMATORS[name].label}) gives each turn its own advantage, but rollout-level advantage runs "
        "the estimator on one row per rollout and needs every row of a rollout to carry the same reward",
        f"set {ROLLOUT_LEVEL}=false",
    )


def _row_order(batch: DataProto, codes: np.ndarray) -> np.ndarray:
    """Row indices grouped by rollout (first appearance), each rollout's rows by turn index, else as they stand."""
    turn = batch.non_tensor_batch.get("turn_index_list")
    within = np.arange(len(codes)) if turn is None else np.asarray(turn, dtype=np.int64)
    return np.lexsort((np.arange(len(codes)), within, codes))


def _turn_offsets(codes: np.ndarray, counts: np.ndarray, order: np.ndarray) -> np.ndarray:
    """(rows,) how many turns of its rollout come before each row, taking rows in ``order``."""
    ordered_counts = counts[order]  # (rows,)
    before_all = np.cumsum(ordered_counts) - ordered_counts  # turns of all earlier rows in order
    ordered_codes = codes[order]
    starts = np.flatnonzero(np.diff(ordered_codes, prepend=-1))  # first position of each rollout in order
    rollout_start = np.repeat(before_all[starts], np.diff(np.append(starts, len(order))))
    offset = np.empty(len(codes), dtype=np.int64)
    offset[order] = before_all - rollout_start
    return offset


def _stitched_batch(batch: DataProto, stitched: np.ndarray, turns: np.ndarray, uids: np.ndarray, dtype) -> DataProto:
    """One row per rollout: turn k's reward at column 2k (mask 1), a separator at 2k + 1 (mask 0)."""
    n, width = stitched.shape
    rewards = torch.zeros(n, 2 * width, dtype=torch.float64)  # (rollouts, 2K)
    rewards[:, 0::2] = torch.from_numpy(stitched)
    mask = torch.zeros(n, 2 * width, dtype=torch.int64)  # (rollouts, 2K)
    mask[:, 0::2] = torch.from_numpy(np.arange(width)[None, :] < turns[:, None]).long()
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards.to(dtype), "response_mask": mask},
        non_tensors={"uid": np.asarray(uids, dtype=object)},
        meta_info=dict(batch.meta_info),
    )
