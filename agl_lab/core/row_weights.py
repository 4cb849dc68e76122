"""verl PR #7580's per-row loss weights (proposed, not released), as its revision of 2026-09-19 defines them.

verl PR #7580 ("support weighted multi-output agent-loop trajectories", open) lets each row of a multi-row
trajectory carry a ``loss_weight`` under ``seq-mean-token-mean`` (one token mean per row, then a mean over the
mini-batch's G rows). For the rows j = 1..N of one trajectory with ``T_j`` trainable tokens each it proposes:

==========================  =====================  ==================================================================
mode                        raw weight of row j    what a trajectory weighs, before and after the rescale
==========================  =====================  ==================================================================
``session_equal``           ``1 / N``              every trajectory counts once; rescaled by rows ÷ trajectories
                                                   (``N_rows / R``) so that the weights average 1
``partition_preserving``    ``T_j / mean_j(T)``    the unsplit trajectory's token mean, N times (the raw weights of a
                                                   trajectory add up to N, so they already average 1 over the batch
                                                   unless a trajectory has no trainable token)
==========================  =====================  ==================================================================

Revision 2 (2026-09-19), which this module follows:

* **mean 1 over the global batch.** Every ``loss_agg_mode`` divides by an unweighted denominator (G rows, the
  mini-batch's tokens), so raw 1/N scaled the whole loss by trajectories/rows (x0.26 on the PR's run, drifting about
  2x from step to step). The weights are therefore divided by their mean over the step's trained rows (the global
  batch, after the update cap's drops), once, in the trainer: not per micro-batch, so how rows are packed into
  micro-batches changes nothing (:func:`loss_weights`).
* **every loss term.** The weight multiplies the policy-gradient term (the trainer multiplies each row's
  advantages once per step: a positive factor commutes with PPO's clip and dual clip,
  ``w·max(−A·r, −A·clip(r)) = max(−wA·r, −wA·clip(r))``), and the entropy and KL terms: the trainer stores each
  row's weight as ``batch["loss_weight"]`` and the lab's actor multiplies each row's per-token entropy and KL by it
  before aggregating (:func:`weighted_terms`). verl's own actor engine (``lab.actor=verl``) applies it to the advantages
  only, so the doctor refuses that pairing when an entropy or KL term is on.

The first revision (raw weights, advantages only) is not kept. Actor side: ``import agl_lab`` registers both names in
verl's policy-loss registry as verl's ``vanilla`` PPO loss aggregated with ``seq-mean-token-mean`` (the aggregation the
PR verifies; forced, as verl's ``sapo`` forces it). N and T count the rollout's rows in the batch the actor trains
(docs/differences.md). Notebook: ``notebooks/06_weighting_proposals.ipynb``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agl_lab.core.groups import group_rows

if TYPE_CHECKING:  # the weights themselves are numpy: a diagnostics reader never loads torch for them
    import torch

__all__ = [
    "LOSS_WEIGHT",
    "PARTITION_PRESERVING",
    "ROW_WEIGHTED_LOSS_MODES",
    "SESSION_EQUAL",
    "compute_policy_loss_row_weighted",
    "loss_weights",
    "row_loss_weights",
    "weight_advantages",
    "weighted_advantages",
    "weighted_terms",
]

SESSION_EQUAL = "session_equal"
PARTITION_PRESERVING = "partition_preserving"
# The loss modes whose rows carry a loss_weight (verl PR #7580).
ROW_WEIGHTED_LOSS_MODES: tuple[str, ...] = (SESSION_EQUAL, PARTITION_PRESERVING)
LOSS_WEIGHT = "loss_weight"  # the batch field holding each row's weight, (rows,) float32: the PR's name
_AGGREGATION = "seq-mean-token-mean"  # the PR's verified objective


def loss_weights(row_tokens: np.ndarray, rollout: np.ndarray, *, mode: str) -> np.ndarray:
    """Each row's ``loss_weight`` under ``mode``, rescaled to mean 1 over the rows given, (rows,) float64.

    ``row_tokens``: (rows,) trainable tokens; ``rollout``: (rows,) dense rollout codes 0..R-1. The rows given are the
    global batch (the step's trained rows). A rollout whose rows have no trainable token weighs 0 under
    ``partition_preserving``; a batch whose every weight is 0 keeps them 0.
    """
    if mode not in ROW_WEIGHTED_LOSS_MODES:
        raise ValueError(f"mode must be one of {list(ROW_WEIGHTED_LOSS_MODES)}, got {mode!r}")
    if len(row_tokens) == 0:
        return np.zeros(0)
    rows = np.bincount(rollout).astype(np.float64)  # (rollouts,) N
    if mode == SESSION_EQUAL:
        raw = 1.0 / rows[rollout]  # (rows,)
    else:
        tokens = np.bincount(rollout, weights=row_tokens)  # (rollouts,) T = Σ_j T_j
        mean_tokens = tokens[rollout] / rows[rollout]  # (rows,) mean_j(T) of the row's rollout
        raw = np.divide(row_tokens, mean_tokens, out=np.zeros(len(row_tokens)), where=mean_tokens > 0)  # (rows,)
    mean = raw.mean()
    return raw / mean if mean > 0 else raw


def row_loss_weights(response_mask: torch.Tensor, rollout_ids: Any, *, mode: str) -> torch.Tensor:
    """:func:`loss_weights` of a batch's rows, (rows,) float64 on the mask's device.

    ``response_mask``: (rows, R), any dtype; ``rollout_ids``: one id per row (list, tuple, array, Series).
    """
    if mode not in ROW_WEIGHTED_LOSS_MODES:
        raise ValueError(f"mode must be one of {list(ROW_WEIGHTED_LOSS_MODES)}, got {mode!r}")
    if rollout_ids is None:
        raise RuntimeError(f"{mode} loss requires rollout_id_list (the rows of one trajectory share its id)")
    if len(rollout_ids) != response_mask.shape[0]:
        raise ValueError(f"rollout_ids length ({len(rollout_ids)}) must match response_mask rows "
                         f"({response_mask.shape[0]})")  # fmt: skip
    import torch

    from agl_lab.core.row_sums import trainable_tokens

    codes = group_rows(rollout_ids, field="rollout_id_list").codes  # (rows,)
    weights = loss_weights(trainable_tokens(response_mask).cpu().numpy(), codes, mode=mode)  # (rows,)
    return torch.from_numpy(weights).to(response_mask.device)


def weight_advantages(
    advantages: torch.Tensor, response_mask: torch.Tensor, rollout_ids: Any, *, mode: str
) -> torch.Tensor:
    """``advantages`` (rows, R) with each row multiplied by its :func:`row_loss_weights`, in the advantages' dtype."""
    return weighted_advantages(advantages, response_mask, rollout_ids, mode=mode)[0]


def weighted_advantages(
    advantages: torch.Tensor, response_mask: torch.Tensor, rollout_ids: Any, *, mode: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's step 5 for a row-weighted mode: (the weighted advantages (rows, R) in their own dtype, each row's
    ``loss_weight`` (rows,) float32, which the actor applies to the entropy and KL terms). Nothing given is changed."""
    if response_mask.shape != advantages.shape:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} must match advantages shape {tuple(advantages.shape)}"
        )
    weight = row_loss_weights(response_mask, rollout_ids, mode=mode)  # (rows,)
    return (advantages.double() * weight.unsqueeze(-1)).to(advantages.dtype), weight.float()


def weighted_terms(loss_weight: torch.Tensor | None, *terms: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-token loss terms (each (rows, R): entropy, KL) with every row multiplied by its ``loss_weight`` (rows,);
    unchanged without one. What the actor does before aggregating them (revision 2: the weight is on every term)."""
    if loss_weight is None:
        return terms
    return tuple(term * loss_weight.to(term.dtype).unsqueeze(-1) for term in terms)  # each (rows, R)


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
    # imported here: importing verl's core_algos registers agl_lab's losses (agl_lab/__init__.py), whose module
    # imports this one, which must be whole by then
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    return compute_policy_loss_vanilla(
        old_log_prob, log_prob, advantages, response_mask, _AGGREGATION, config, rollout_is_weights
    )
