"""How the config's loss weighs a step's tokens: the catalogue mode it weighs like, the layout, the loss scale.

``actor_rollout_ref.actor.policy_loss.loss_mode`` acts in :mod:`agl_lab.core.loss` (the advantages' step 5 and the
registered losses); this module measures what it does to a step. :func:`weighing_mode` names the catalogue mode
(:data:`agl_lab.LOSS_MODES`) whose weights the config's loss has at ratio 1: a catalogue entry's own loss gives that
entry, a registry loss that aggregates through verl's ``agg_loss`` (``gspo``, ``cispo``, …) weighs like its
``loss_agg_mode``, ``sapo`` and ``geo_mean`` their own way. The loss scale is ``Σ ∂L/∂ℓ`` over the trained tokens,
summed over one pass of the PPO mini-batches: ``n_rollouts / n_rows`` under per_rollout_mean's v1.0 divisor (it drifts
with the rows per rollout, Agent Lightning issue #593), 1 under Eq. 16, one per mini-batch under token-mean, one per
micro-batch under geo_mean. The trainer logs it, and per mini-batch, through :func:`loss_scale_metrics` (the
``loss_scale`` panel plots the latter); :func:`token_layout` is what every mode's weight function
(:mod:`agl_lab.core.weights`) reads, for the weighting analysis too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.modes import AGG_LOSS_POLICY_LOSSES, LOSS_MODES, mode_from_config
from agl_lab.config.verl_features import forced_aggregation
from agl_lab.core import weights
from agl_lab.core.groups import group_rows, non_tensor_ids
from agl_lab.core.keys import LOSS_AGG_MODE, LOSS_MODE, LOSS_SCALE, LOSS_SCALE_PER_MINI_BATCH
from agl_lab.core.weights import TokenLayout

if TYPE_CHECKING:
    from verl import DataProto

# torch and verl (core.row_sums, core.selection) are imported where a batch is measured, not here: the run readers
# (agl_lab.studies.weighting_source) ask weighing_mode of a run's config and load neither.

__all__ = ["layout_settings", "loss_scale", "loss_scale_metrics", "token_layout", "weighing_mode"]


def weighing_mode(cfg: DictConfig) -> str | None:
    """The catalogue mode whose weights the config's policy loss has at ratio 1, or None for a loss verl's
    registry lacks. A catalogue entry's own loss gives that entry; a registry loss that aggregates through
    ``agg_loss`` (``gspo``, ``cispo``, …: :data:`agl_lab.config.modes.AGG_LOSS_POLICY_LOSSES`) weighs like its
    ``loss_agg_mode`` (verl 0.8.0's ``gspo`` like ``seq-mean-token-mean``, whatever that says:
    :func:`agl_lab.config.verl_features.forced_aggregation`)."""
    own = mode_from_config(cfg)
    if own is not None:
        return own
    loss_mode = OmegaConf.select(cfg, LOSS_MODE, default=None)
    agg_mode = OmegaConf.select(cfg, LOSS_AGG_MODE, default=None)
    if loss_mode in AGG_LOSS_POLICY_LOSSES and agg_mode in LOSS_MODES:
        return forced_aggregation(loss_mode) or str(agg_mode)
    return None


def layout_settings(cfg: DictConfig, *, response_width: int, dp_size: int = 1) -> dict:
    """The layout's constants from a composed config: rows per mini-batch and micro-batch, dp size, horizon.

    ``dp_size``: the data-parallel ranks of the actor update (Agent Lightning's trainer: ``trainer.n_gpus_per_node
    × trainer.nnodes`` over the sequence-parallel size; the lab trainer: 1). Dynamic batch sizes
    (``use_dynamic_bsz``) are not modelled: micro-batches are ``ppo_micro_batch_size_per_gpu`` rows (null: one per
    rank and mini-batch).
    """
    from agl_lab.core.selection import mini_batch_rows

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
    from agl_lab.core.row_sums import trainable_tokens

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


def loss_scale_metrics(batch: DataProto, cfg: DictConfig, *, layout: TokenLayout | None = None) -> dict[str, float]:
    """``lab/loss_scale`` and ``lab/loss_scale_per_mini_batch`` of the rows that reach the update (``batch``, after
    drops): the step's scale, and the same on one update's scale (token-mean gives each mini-batch 1, per_rollout_mean
    shares its total), over the step's mini-batches."""
    from agl_lab.core.selection import mini_batches

    scale = loss_scale(batch, cfg, layout=layout)
    updates = mini_batches(len(batch), cfg)
    return {LOSS_SCALE: scale, LOSS_SCALE_PER_MINI_BATCH: scale / updates if updates else 0.0}
