"""verl PR #7580's per-row loss weights (proposed, not released): what a rollout split into N rows should count for.

verl PR #7580 ("support weighted multi-output agent-loop trajectories", open) lets each row of a multi-row
trajectory carry a ``loss_weight`` that multiplies its loss under ``seq-mean-token-mean`` (one token mean per row,
then a mean over the mini-batch's G rows). It proposes two weights for the rows j = 1..N of one trajectory with
``T_j`` trainable tokens each:

==========================  =======================  ================================================================
mode                        ``loss_weight`` of row j  what a trajectory then weighs (per-token weight ``w``)
==========================  =======================  ================================================================
``session_equal``           ``1 / N``                 every trajectory counts once: ``w = 1/(N·T_j·G)``, mass ``1/G``
``partition_preserving``    ``T_j / mean_j(T)``       the unsplit trajectory's token mean, N times: ``w = N/(T·G)``,
                                                      mass ``N/G`` (T = Σ_j T_j): the rows' weights add up to N, as
                                                      unweighted rows do, so a split trajectory still weighs N times
==========================  =======================  ================================================================

Trainer side (like Agent Lightning's ``per_rollout_mean``): :func:`weight_advantages` multiplies each row's
advantages by its weight once per step. A positive factor per row commutes with PPO's clip and dual clip
(``w·max(−A·r, −A·clip(r)) = max(−wA·r, −wA·clip(r))``), so that is the PR's weighted loss exactly. Actor side:
``import agl_lab`` registers both names in verl's policy-loss registry as verl's own ``vanilla`` PPO loss aggregated
with ``seq-mean-token-mean`` (the aggregation the PR verifies; forced, as verl's ``sapo`` forces it).

N and T count the rollout's rows in the batch the weights are computed on: the rows the actor trains, after the
update cap's drops (the PR writes the weight when the agent loop returns its rows; verl drops none after that, so the
two agree there; docs/differences.md). Notebook: ``notebooks/06_weighting_proposals.ipynb``.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

from agl_lab.core.groups import group_rows
from agl_lab.core.rows import trainable_tokens

__all__ = [
    "PARTITION_PRESERVING",
    "ROW_WEIGHTED_LOSS_MODES",
    "SESSION_EQUAL",
    "compute_policy_loss_row_weighted",
    "row_loss_weights",
    "weight_advantages",
]

SESSION_EQUAL = "session_equal"
PARTITION_PRESERVING = "partition_preserving"
# The loss modes whose advantages the trainer multiplies by each row's loss_weight (verl PR #7580).
ROW_WEIGHTED_LOSS_MODES: tuple[str, ...] = (SESSION_EQUAL, PARTITION_PRESERVING)
_AGGREGATION = "seq-mean-token-mean"  # the PR's verified objective


def row_loss_weights(response_mask: torch.Tensor, rollout_ids: Any, *, mode: str) -> torch.Tensor:
    """Each row's ``loss_weight`` under ``mode`` (module docstring), (rows,) float64.

    ``response_mask``: (rows, R); ``rollout_ids``: one id per row (list, tuple, array, Series). A rollout whose rows
    have no trainable token gets weight 0 under ``partition_preserving`` (nothing to weigh).
    """
    if mode not in ROW_WEIGHTED_LOSS_MODES:
        raise ValueError(f"mode must be one of {list(ROW_WEIGHTED_LOSS_MODES)}, got {mode!r}")
    if rollout_ids is None:
        raise RuntimeError(f"{mode} loss requires rollout_id_list (the rows of one trajectory share its id)")
    if len(rollout_ids) != response_mask.shape[0]:
        raise ValueError(f"rollout_ids length ({len(rollout_ids)}) must match response_mask rows "
                         f"({response_mask.shape[0]})")  # fmt: skip
    rollouts = group_rows(rollout_ids, field="rollout_id_list")
    codes = torch.from_numpy(rollouts.codes).to(response_mask.device)  # (rows,)
    rows = torch.bincount(codes, minlength=rollouts.n_groups).double()  # (rollouts,) N
    if mode == SESSION_EQUAL:
        return 1.0 / rows[codes]  # (rows,)
    row_tokens = trainable_tokens(response_mask)  # (rows,) T_j
    tokens = torch.zeros(rollouts.n_groups, dtype=torch.float64, device=response_mask.device)
    tokens.index_add_(0, codes, row_tokens)  # (rollouts,) T = Σ_j T_j
    mean_tokens = tokens[codes] / rows[codes]  # (rows,) mean_j(T)
    return torch.where(mean_tokens > 0, row_tokens / mean_tokens.clamp_min(1e-300), 0.0)  # (rows,)


def weight_advantages(
    advantages: torch.Tensor, response_mask: torch.Tensor, rollout_ids: Any, *, mode: str
) -> torch.Tensor:
    """``advantages`` (rows, R) with each row multiplied by its :func:`row_loss_weights`, in the advantages' dtype."""
    if response_mask.shape != advantages.shape:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} must match advantages shape {tuple(advantages.shape)}"
        )
    weight = row_loss_weights(response_mask, rollout_ids, mode=mode)  # (rows,)
    return (advantages.double() * weight.unsqueeze(-1)).to(advantages.dtype)


def compute_policy_loss_row_weighted(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = _AGGREGATION,
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's ``vanilla`` clipped PPO loss under ``seq-mean-token-mean`` on advantages the trainer already weighted
    (:func:`weight_advantages`); ``loss_agg_mode`` is accepted for the registry's signature and ignored."""
    return compute_policy_loss_vanilla(
        old_log_prob, log_prob, advantages, response_mask, _AGGREGATION, config, rollout_is_weights
    )
