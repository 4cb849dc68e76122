"""Rollout-level advantage: one advantage per rollout, however many rows trace aggregation made of it.

With ``algorithm.enable_rollout_level_advantage: true`` Agent Lightning collapses each rollout to its
first row, runs verl's ``compute_advantage`` on those rows only (so a GRPO group holds one entry per
rollout, not one per row) and broadcasts the resulting scalar advantage and return back under every
row's response mask. Without it a rollout split into k rows would sit k times in its GRPO group and
shift the group's mean and std. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab.core.groups import RolloutGroups, group_key, group_rows, non_tensor_ids, uniform_groups
from agl_lab.core.keys import (
    ROLLOUT_LEVEL_MAX_ROWS_PER_ROLLOUT,
    ROLLOUT_LEVEL_N_MULTI_ROW_ROLLOUTS,
    ROLLOUT_LEVEL_N_ROLLOUTS,
    ROLLOUT_LEVEL_N_ROWS,
)
from agl_lab.core.rows import require_finite_rows, require_matrix, take_rows

__all__ = ["compute_rollout_level_advantage", "rollout_level_metrics"]

# The tensors verl 0.9.1's compute_advantage reads for every estimator but GDPO (which reads the whole batch).
# Copying only these for each rollout keeps the collapse cheap: token ids alone would cost more than the rest.
_VERL_ADVANTAGE_FIELDS = frozenset(
    {
        "token_level_rewards",
        "response_mask",
        "values",
        "reward_baselines",
        "sum_pi_squared",
        "old_log_probs",
        "rollout_is_weights",
    }
)


def compute_rollout_level_advantage(
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
    """Compute advantages once per rollout, then broadcast them to the rollout's rows.

    Writes ``advantages`` (and ``returns``) of shape (rows, R) into ``batch`` and returns it with the four
    ``training/rollout_level_advantage/*`` metrics. Sets ``uid`` from ``data_id_list`` when it is missing.
    On any error ``batch`` is left exactly as it was.

    ``compute_advantage_fn`` gets one row per rollout with every non-tensor field (``uid`` as integer codes of the
    groups; when it raises, it runs again with the uids themselves, and that run's error is raised) and the tensors
    verl's ``compute_advantage`` reads (``token_level_rewards``, ``response_mask``, ``values``, ``reward_baselines``,
    ``sum_pi_squared``, ``old_log_probs``, ``rollout_is_weights``); for GDPO, every tensor.
    """
    rollout_ids = non_tensor_ids(
        batch, "rollout_id_list", error="rollout-level advantage requires rollout_id_list in non_tensor_batch"
    )
    if len(rollout_ids) != len(batch):
        raise RuntimeError(f"rollout_id_list length ({len(rollout_ids)}) must match batch length ({len(batch)})")
    uid_key = group_key(batch)
    if uid_key is None:
        raise RuntimeError("rollout-level advantage requires uid or data_id_list in non_tensor_batch")
    uids = non_tensor_ids(batch, uid_key)
    if len(uids) != len(batch):
        raise ValueError(f"{uid_key} length ({len(uids)}) must match batch length ({len(batch)})")
    response_mask = require_matrix(
        batch, "response_mask", error="rollout-level advantage requires response_mask in batch"
    )  # (rows, R)
    rewards = require_matrix(
        batch,
        "token_level_rewards",
        like=response_mask,
        floating=True,
        error="rollout-level advantage requires token_level_rewards in batch",
    )  # (rows, R)
    reward_sums = rewards.sum(dim=-1).detach().float()  # (rows,)
    require_finite_rows(reward_sums, "token_level_rewards")
    if len(batch) == 0:
        raise ValueError("rollout-level advantage got an empty batch (0 rows): skip the step instead")

    rollouts = group_rows(rollout_ids, field="rollout_id_list")
    uid_codes = group_rows(uids, field=uid_key).codes  # (rows,)
    _check_rollouts_consistent(rollouts, uid_codes, reward_sums)

    fields = None if adv_estimator == AdvantageEstimator.GDPO else _VERL_ADVANTAGE_FIELDS
    estimator_kwargs = {
        "adv_estimator": adv_estimator,
        "gamma": gamma,
        "lam": lam,
        "num_repeat": num_repeat,
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "config": config,
    }

    def estimate(uid: np.ndarray, fields: frozenset[str] | None) -> DataProto:
        return compute_advantage_fn(_collapse(batch, rollouts.first_rows, uid=uid, fields=fields), **estimator_kwargs)

    try:
        rollout_batch = estimate(uid_codes, fields)  # the groups as integers: verl groups them without sorting strings
    except Exception:
        # verl's errors name the group: run again on the batch's own uids, so the error is the one Agent Lightning gets
        try:
            rollout_batch = estimate(uids, fields)
        except KeyError:
            if fields is None:
                raise
            # The estimator wants a field the batch lacks (GAE's values, say): run it on whole rows, so that verl's
            # error lists the batch's own fields, as it does for Agent Lightning (or it finds a field outside the set).
            rollout_batch = estimate(uids, None)

    # Extract everything before writing anything, so a refused estimator leaves ``batch`` untouched.
    collapsed_mask = rollout_batch.batch["response_mask"]  # (rollouts, R)
    advantages = require_matrix(rollout_batch, "advantages", like=collapsed_mask)  # (rollouts, R)
    broadcast = {"advantages": _rollout_scalars(advantages, collapsed_mask, rollouts.ids, key="advantages")}
    if "returns" in rollout_batch.batch.keys():
        returns = require_matrix(rollout_batch, "returns", like=collapsed_mask)  # (rollouts, R)
        # GRPO-style estimators return one tensor as both; it is checked and broadcast once, then copied: Agent
        # Lightning broadcasts returns separately, so they never share storage with the advantages it normalizes.
        shared = returns.data_ptr() == advantages.data_ptr() and returns.stride() == advantages.stride()
        broadcast["returns"] = (
            None if shared else _rollout_scalars(returns, collapsed_mask, rollouts.ids, key="returns")
        )
    codes = torch.from_numpy(rollouts.codes).to(response_mask.device)  # (rows,)
    for key, scalars in broadcast.items():
        if scalars is not None:  # a fresh copy of the mask scaled in place beats a type-promoting multiply; copy=True
            # because .to() returns the mask itself when its dtype already matches (a float32 mask, float32 rewards)
            row_scalars = scalars.to(response_mask.device)[codes].unsqueeze(-1)  # (rows, 1)
            broadcast[key] = response_mask.to(scalars.dtype, copy=True).mul_(row_scalars)  # (rows, R)
    if "returns" in broadcast and broadcast["returns"] is None:
        broadcast["returns"] = broadcast["advantages"].clone()

    batch.batch.update(broadcast)
    if uid_key != "uid":
        batch.non_tensor_batch["uid"] = uids
    return batch, rollout_level_metrics(rollouts)


def rollout_level_metrics(rollouts: RolloutGroups) -> dict[str, int]:
    """The four metrics Agent Lightning logs for the rollout-level path (``n_rows`` > ``n_rollouts`` ⇒ it matters)."""
    return {
        ROLLOUT_LEVEL_N_ROWS: int(rollouts.sizes.sum()),
        ROLLOUT_LEVEL_N_ROLLOUTS: rollouts.n_groups,
        ROLLOUT_LEVEL_N_MULTI_ROW_ROLLOUTS: int((rollouts.sizes > 1).sum()),
        ROLLOUT_LEVEL_MAX_ROWS_PER_ROLLOUT: int(rollouts.sizes.max(initial=0)),
    }


def _check_rollouts_consistent(rollouts: RolloutGroups, uid_codes: np.ndarray, reward_sums: torch.Tensor) -> None:
    """All rows of a rollout must share one uid and one reward sum; report the first offending rollout."""
    bad_uid = ~uniform_groups(rollouts, torch.from_numpy(uid_codes))  # (rollouts,)
    bad_reward = ~uniform_groups(rollouts, reward_sums)  # (rollouts,)
    bad = np.flatnonzero(bad_uid | bad_reward)
    if not len(bad):
        return
    first = bad[0]  # rollouts are checked in order of first appearance, uid before reward
    rollout_id = rollouts.ids[first]
    if bad_uid[first]:
        raise RuntimeError(f"rollout-level advantage found multiple uid values for rollout_id={rollout_id!r}")
    raise RuntimeError(
        "rollout-level advantage requires all triplets for the same rollout_id "
        f"to share the same scalar token_level_rewards sum; got rollout_id={rollout_id!r}"
    )


def _collapse(batch: DataProto, first_rows: np.ndarray, *, uid: np.ndarray, fields: frozenset[str] | None) -> DataProto:
    """One row per rollout (its first), with ``fields`` (all tensor fields when None), every non-tensor field and
    ``uid`` (per row: the batch's uids, or their integer codes, which form the same groups; verl's vectorized grouping
    sorts 7,200 string uids in 2 ms and takes integers as they are)."""
    collapsed = take_rows(batch, first_rows, keys=fields)
    collapsed.non_tensor_batch["uid"] = uid[first_rows]
    collapsed.meta_info = dict(batch.meta_info)  # a copy: nothing the estimator writes there reaches the batch
    return collapsed


def _rollout_scalars(values: torch.Tensor, mask: torch.Tensor, rollout_ids: np.ndarray, *, key: str) -> torch.Tensor:
    """The one value each rollout row carries under its mask; refuse rows whose values vary per token."""
    valid = mask.bool()  # (rollouts, R)
    first_col = valid.view(torch.uint8).argmax(dim=-1, keepdim=True)  # (rollouts, 1): first trainable token, else 0
    empty = ~valid.gather(1, first_col).squeeze(-1)  # (rollouts,): no trainable token at all
    first_value = values.gather(1, first_col)  # (rollouts, 1)
    # Outcome estimators write one exact value per row, so an exact comparison clears almost every row in one cheap
    # pass; only rows with any difference get Agent Lightning's test, torch.allclose against the first value (in
    # the values' dtype; NaN is never close).
    varies = (values != first_value).logical_and_(valid).any(dim=-1)  # (rollouts,)
    if bool(varies.any()):
        rows = varies.nonzero().flatten()
        close = torch.isclose(values[rows], first_value[rows].expand(-1, values.shape[-1]))  # (varied, R)
        varies[rows] = ~(close | ~valid[rows]).all(dim=-1)
    bad = (empty | varies).nonzero().flatten()
    if len(bad):
        first = int(bad[0])
        rollout_id = rollout_ids[first]
        if bool(empty[first]):
            raise RuntimeError(f"rollout-level advantage cannot extract {key} for empty rollout_id={rollout_id!r}")
        raise RuntimeError(
            f"rollout-level advantage requires scalar outcome-style {key}; "
            f"got non-constant token values for rollout_id={rollout_id!r}"
        )
    return first_value.squeeze(-1).detach()
