"""The loss scale: a step's total per-token loss weight for the config's loss mode, and the layout it reads.

``Σ ∂L/∂ℓ`` over the trained tokens, summed over one pass of the PPO mini-batches: ``n_rollouts / n_rows`` under
per_rollout_mean's v1.0 divisor (it drifts with the rows per rollout, Agent Lightning issue #593), 1 under Eq. 16,
one per mini-batch under token-mean, one per micro-batch under geo_mean. The trainer logs it as ``lab/loss_scale``;
:func:`token_layout` is what every mode's weight function (:mod:`agl_lab.core.weights`) reads, for the weighting
analysis too. A registry loss that aggregates through verl's ``agg_loss`` (``gspo``, ``cispo``, …) weighs like its
``loss_agg_mode``; ``sapo`` and ``geo_mean`` weigh their own way (:func:`agl_lab.config.modes.weighing_mode`).
"""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig
from verl import DataProto

from agl_lab.config.modes import LOSS_MODES, weighing_mode
from agl_lab.core import weights
from agl_lab.core.groups import group_rows, non_tensor_ids
from agl_lab.core.pipeline import mini_batch_rows
from agl_lab.core.row_sums import trainable_tokens
from agl_lab.core.weights import TokenLayout

__all__ = ["layout_settings", "loss_scale", "token_layout"]


def layout_settings(cfg: DictConfig, *, response_width: int, dp_size: int = 1) -> dict:
    """The layout's constants from a composed config: rows per mini-batch and micro-batch, dp size, horizon.

    ``dp_size``: the data-parallel ranks of the actor update (Agent Lightning's trainer: ``trainer.n_gpus_per_node
    × trainer.nnodes`` over the sequence-parallel size; the lab trainer: 1). Dynamic batch sizes
    (``use_dynamic_bsz``) are not modelled: micro-batches are ``ppo_micro_batch_size_per_gpu`` rows (null: one per
    rank and mini-batch).
    """
    actor = cfg.actor_rollout_ref.actor
    micro = actor.get("ppo_micro_batch_size_per_gpu", None)
    return {
        "mini_batch_rows": mini_batch_rows(cfg),
        "micro_batch_rows": None if micro is None else int(micro),
        "dp_size": int(dp_size),
        "horizon": float(actor.get("loss_scale_factor", None) or response_width),
    }


def token_layout(
    batch: DataProto,
    cfg: DictConfig,
    *,
    rollout: np.ndarray | None = None,
    group: np.ndarray | None = None,
    dp_size: int = 1,
) -> TokenLayout:
    """The :class:`TokenLayout` of the rows that reach the update (``batch``, after drops), in the trainer's order.

    ``rollout``/``group``: each row's rollout and prompt-group (uid) code, when the caller has grouped already
    (else from ``rollout_id_list`` and ``uid``/``data_id_list``).
    """
    mask = batch.batch["response_mask"]  # (kept, R)
    tokens = trainable_tokens(mask).cpu().numpy()  # (kept,)
    if rollout is None:
        rollout = group_rows(non_tensor_ids(batch, "rollout_id_list"), field="rollout_id_list").codes
    if group is None:
        key = "uid" if "uid" in batch.non_tensor_batch else "data_id_list"
        group = group_rows(non_tensor_ids(batch, key), field=key).codes if key in batch.non_tensor_batch else None
    settings = layout_settings(cfg, response_width=mask.shape[-1], dp_size=dp_size)
    return weights.token_layout(tokens, rollout, group=group, **settings)


def loss_scale(batch: DataProto, cfg: DictConfig, *, layout: TokenLayout | None = None) -> float:
    """The step's total per-token loss weight ``Σ ∂L/∂ℓ`` over its trained rows, for the config's loss mode.

    ``batch``: the rows that reach the update (after drops), on one data-parallel rank (the lab trainer's). NaN
    for a policy loss verl's registry lacks. ``layout``: :func:`token_layout` of ``batch``, when the caller has it.
    """
    mode = weighing_mode(cfg)
    if mode is None:
        return float("nan")
    if len(batch) == 0:
        return 0.0
    layout = token_layout(batch, cfg) if layout is None else layout
    return float((LOSS_MODES[mode].weight(layout) * layout.row_tokens).sum())
