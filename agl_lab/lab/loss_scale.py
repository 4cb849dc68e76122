"""The loss scale: a step's total per-token loss weight for the config's loss mode, and the layout it reads.

``Σ ∂L/∂ℓ`` over the trained tokens, summed over one pass of the PPO mini-batches: ``n_rollouts / n_rows`` under
per_rollout_mean's v1.0 divisor (it drifts with the rows per rollout, Agent Lightning issue #593), 1 under Eq. 16,
one per mini-batch under token-mean. The trainer logs it as ``lab/loss_scale``; :func:`token_layout` is what
every mode's weight function (:mod:`agl_lab.core.weights`) reads, for the weighting analysis too.
"""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig
from verl import DataProto

from agl_lab.config.modes import LOSS_MODES, mode_from_config
from agl_lab.core.groups import group_rows, non_tensor_ids
from agl_lab.core.pipeline import mini_batch_rows
from agl_lab.core.weights import TokenLayout

__all__ = ["loss_scale", "token_layout"]


def token_layout(batch: DataProto, cfg: DictConfig, *, rollout: np.ndarray | None = None) -> TokenLayout:
    """The :class:`TokenLayout` of the rows that reach the update (``batch``, after drops), in the trainer's order.

    ``rollout``: each row's rollout code, when the caller has grouped already (else from ``rollout_id_list``).
    """
    mask = batch.batch["response_mask"]  # (kept, R)
    tokens = mask.sum(dim=-1).cpu().numpy().astype(np.float64)  # (kept,)
    mini_bs = mini_batch_rows(cfg)
    if rollout is None:
        rollout = group_rows(non_tensor_ids(batch, "rollout_id_list"), field="rollout_id_list").codes
    horizon = cfg.actor_rollout_ref.actor.get("loss_scale_factor", None) or mask.shape[-1]
    return TokenLayout(
        row_tokens=tokens,
        rollout=np.asarray(rollout, dtype=np.int64),
        mini_batch=np.arange(len(tokens)) // mini_bs,
        mini_batch_rows=mini_bs,
        horizon=float(horizon),
    )


def loss_scale(batch: DataProto, cfg: DictConfig) -> float:
    """The step's total per-token loss weight ``Σ ∂L/∂ℓ`` over its trained rows, for the config's loss mode.

    ``batch``: the rows that reach the update (after drops). NaN for a loss the catalogue does not hold.
    """
    mode = mode_from_config(cfg)
    if mode is None:
        return float("nan")
    if len(batch) == 0:
        return 0.0
    layout = token_layout(batch, cfg)
    return float((LOSS_MODES[mode].weight(layout) * layout.row_tokens).sum())
