"""The ``per_rollout_mean`` policy losses: every rollout weighs the same, however many rows it became.

Two halves, as in Agent Lightning (v1.0, and 1.0.2's CISPO variant):

1. ``normalize_advantages_by_rollout`` (trainer side, once per step) divides each row's advantage by
   its rollout's trainable-token count times a batch-level count, so a rollout's advantage mass
   ``Σ_rows Σ_tokens A·mask / divisor`` is ``A / count`` whether it has one row or five.
   ``divisor="rows"`` (v1.0) uses the number of trained rows: the batch total is then
   n_rollouts / n_rows, which drifts from step to step (Agent Lightning issue #593).
   ``divisor="rollouts"`` (the technical report's Eq. 16) uses the number of distinct rollouts, so every
   rollout carries exactly 1/R and the total is 1.
2. ``compute_policy_loss_per_rollout_mean`` (actor side, per micro-batch) is the clipped PPO loss on
   those pre-normalized advantages, **summed** over tokens (a mean would normalize twice), × ``dp_size``.
   ``compute_policy_loss_cispo_per_rollout_mean`` (Agent Lightning 1.0.2) is CISPO on the same advantages:
   the per-token term ``−sg(clip(ratio, 1 − ε_low, 1 + ε_high))·A·log π`` keeps every token's gradient
   (scaled by the detached, clipped ratio) instead of zeroing clipped ones; no dual clip. Both are
   registered in verl's policy-loss registry (``per_rollout_mean``, ``cispo_per_rollout_mean``) on
   ``import agl_lab``; Ray workers get them through :func:`ray_runtime_env`.

:func:`normalize_for_loss` is the trainer's step 5, where ``actor_rollout_ref.actor.policy_loss.loss_mode`` acts on
the batch: half 1 for both per-rollout modes (:data:`PER_ROLLOUT_LOSS_MODES`), verl PR #7580's per-row weights for its
proposals (:mod:`agl_lab.core.row_weights`), nothing for verl's own losses. What the step's loss then weighs is
``lab/loss_scale`` (:mod:`agl_lab.lab.loss_scale`).

Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import numbers
import sys
import warnings
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from omegaconf import DictConfig, OmegaConf

from agl_lab.core.groups import group_rows
from agl_lab.core.keys import ACTOR_PG_CLIPFRAC, ACTOR_PG_CLIPFRAC_LOWER, ACTOR_PPO_KL, DIVISOR, LOSS_MODE
from agl_lab.core.row_weights import (
    LOSS_WEIGHT,
    ROW_WEIGHTED_LOSS_MODES,
    compute_policy_loss_row_weighted,
    weighted_advantages,
)

if TYPE_CHECKING:
    import torch
    from verl import DataProto

__all__ = [
    "CISPO_PER_ROLLOUT_MEAN_LOSS_MODE",
    "DIVISORS",
    "PER_ROLLOUT_LOSS_MODES",
    "PER_ROLLOUT_MEAN_LOSS_MODE",
    "compute_policy_loss_cispo_per_rollout_mean",
    "compute_policy_loss_per_rollout_mean",
    "normalize_advantages_by_rollout",
    "normalize_for_loss",
    "ray_runtime_env",
    "register_in_worker",
]

PER_ROLLOUT_MEAN_LOSS_MODE = "per_rollout_mean"
CISPO_PER_ROLLOUT_MEAN_LOSS_MODE = "cispo_per_rollout_mean"
# The loss modes whose advantages the trainer divides by rollout (Agent Lightning 1.0.2 normalizes for both).
PER_ROLLOUT_LOSS_MODES: tuple[str, ...] = (PER_ROLLOUT_MEAN_LOSS_MODE, CISPO_PER_ROLLOUT_MEAN_LOSS_MODE)

Divisor = Literal["rows", "rollouts"]
DIVISORS: tuple[str, ...] = ("rows", "rollouts")  # rows: Agent Lightning v1.0; rollouts: Eq. 16


def normalize_advantages_by_rollout(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_ids: Any,
    *,
    num_trained_rows: int,
    divisor: Divisor = "rows",
) -> torch.Tensor:
    """Divide each row's advantages by (its rollout's trainable tokens) × (rows or rollouts in the batch).

    ``advantages``/``response_mask``: (rows, R). ``rollout_ids``: one id per row (list, tuple, array, Series).
    ``num_trained_rows``: the row count after drops (v1.0 divisor). The divisor is floored at 1. Returns a new
    (rows, R) tensor in the advantages' dtype, rounded as Agent Lightning rounds it: each row's token count is
    cast to that dtype first (bf16 counts 257 tokens as 256), the counts are summed per rollout and multiplied
    in float64, and the divisor is rounded to the dtype once.
    """
    import torch

    from agl_lab.core.row_sums import trainable_tokens

    if rollout_ids is None:
        raise RuntimeError("per_rollout_mean loss requires rollout_id_list")
    if divisor not in DIVISORS:
        raise ValueError(f"divisor must be one of {list(DIVISORS)}, got {divisor!r}")
    if len(rollout_ids) != advantages.shape[0]:
        raise ValueError(f"rollout_ids length ({len(rollout_ids)}) must match advantages rows ({advantages.shape[0]})")
    if isinstance(num_trained_rows, bool | np.bool_) or not isinstance(num_trained_rows, numbers.Integral):
        # True would count as 1 row and 2.7 as 2.7 rows: a count is an integer (numpy's too), nothing else
        raise ValueError(
            f"num_trained_rows must be an integer (the row count after drops), got {type(num_trained_rows).__name__} "
            f"{num_trained_rows!r}"
        )
    if num_trained_rows <= 0:
        raise ValueError("num_trained_rows must be positive")
    if response_mask.shape != advantages.shape:
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} must match advantages shape {tuple(advantages.shape)}"
        )
    rollouts = group_rows(rollout_ids, field="rollout_id_list")
    codes = torch.from_numpy(rollouts.codes).to(advantages.device)  # (rows,)
    # a bool mask counted as integers (the same exact counts; torch's bool sum widens each element to int64 and took
    # 14 ms of a 10k-row step's 16); a float mask summed in its dtype, as Agent Lightning sums it (bf16 rounds)
    counts = trainable_tokens(response_mask) if response_mask.dtype == torch.bool else response_mask.sum(dim=-1)
    row_tokens = counts.to(advantages.dtype).double()  # (rows,)
    rollout_tokens = torch.zeros(rollouts.n_groups, dtype=torch.float64, device=advantages.device)
    rollout_tokens.index_add_(0, codes, row_tokens)  # (rollouts,)
    count = num_trained_rows if divisor == "rows" else rollouts.n_groups
    row_divisors = (rollout_tokens[codes] * count).to(advantages.dtype).clamp_min(1.0)  # (rows,)
    return advantages / row_divisors.unsqueeze(-1)


def normalize_for_loss(batch: DataProto, cfg: DictConfig) -> DataProto:
    """Step 5 in place: the advantages as the configured loss reads them (unchanged for verl's own losses)."""
    loss_mode = OmegaConf.select(cfg, LOSS_MODE, default="vanilla")
    rollout_ids = batch.non_tensor_batch.get("rollout_id_list")
    if loss_mode in PER_ROLLOUT_LOSS_MODES:
        if rollout_ids is None:
            raise RuntimeError("per_rollout_mean loss requires rollout_id_list")
        batch.batch["advantages"] = normalize_advantages_by_rollout(
            batch.batch["advantages"],
            batch.batch["response_mask"],
            rollout_ids,
            num_trained_rows=len(batch),
            divisor=OmegaConf.select(cfg, DIVISOR),
        )
    elif loss_mode in ROW_WEIGHTED_LOSS_MODES:
        batch.batch["advantages"], batch.batch[LOSS_WEIGHT] = weighted_advantages(
            batch.batch["advantages"], batch.batch["response_mask"], rollout_ids, mode=loss_mode
        )
    return batch


def compute_policy_loss_per_rollout_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Clipped (and dual-clipped) PPO loss on rollout-normalized advantages, summed over tokens × dp_size.

    All tensors are (rows, R). ``config`` is the actor config (verl ``ActorConfig`` or the
    ``actor_rollout_ref.actor`` DictConfig). ``loss_agg_mode`` is accepted for the registry's signature and
    ignored: the normalization already happened in :func:`normalize_advantages_by_rollout`.
    """
    import torch
    import verl.utils.torch_functional as verl_F

    clip_ratio_low, clip_ratio_high = _clip_range(config, PER_ROLLOUT_MEAN_LOSS_MODE)
    clip_ratio_c = config.get("clip_ratio_c", 3.0)
    if not clip_ratio_c > 1.0:
        raise AssertionError(f"clip_ratio_c must be greater than 1.0, got {clip_ratio_c}")

    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # (rows, R)
    ratio = torch.exp(negative_approx_kl)  # (rows, R)
    ppo_kl = verl_F.masked_mean(-negative_approx_kl, response_mask)

    pg_losses1 = -advantages * ratio  # (rows, R)
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)  # (rows, R)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = verl_F.masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)

    # Dual clip (Ye et al. 2019): for negative advantages the loss is capped at -A · clip_ratio_c.
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.minimum(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = verl_F.masked_mean(
        torch.gt(clip_pg_losses1, pg_losses3).float() * (advantages < 0).float(), response_mask
    )
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)  # (rows, R)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    metrics = {
        ACTOR_PG_CLIPFRAC: pg_clipfrac.detach().item(),
        ACTOR_PPO_KL: ppo_kl.detach().item(),
        ACTOR_PG_CLIPFRAC_LOWER: pg_clipfrac_lower.detach().item(),
    }
    return _summed(pg_losses, response_mask, config), metrics


def compute_policy_loss_cispo_per_rollout_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """CISPO on rollout-normalized advantages (Agent Lightning 1.0.2), summed over tokens × dp_size.

    Per token ``−sg(clip(ratio, 1 − clip_ratio_low, 1 + clip_ratio_high)) · A · log π``: the gradient w.r.t.
    ``log π`` is ``−clip(ratio)·A``, so a clipped token still learns, scaled by its clipped ratio; no dual clip
    (``clip_ratio_c`` is not read). Same signature and config as :func:`compute_policy_loss_per_rollout_mean`.
    """
    import torch
    import verl.utils.torch_functional as verl_F

    clip_ratio_low, clip_ratio_high = _clip_range(config, CISPO_PER_ROLLOUT_MEAN_LOSS_MODE)
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # (rows, R)
    ratio = torch.exp(negative_approx_kl)  # (rows, R)
    ppo_kl = verl_F.masked_mean(-negative_approx_kl, response_mask)

    clipped_ratio = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)  # (rows, R)
    # The weight is detached: no gradient flows through the ratio, only through log π.
    pg_losses = -clipped_ratio.detach() * advantages * log_prob  # (rows, R)
    pg_clipfrac = verl_F.masked_mean((ratio != clipped_ratio).float(), response_mask)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    metrics = {
        ACTOR_PG_CLIPFRAC: pg_clipfrac.detach().item(),
        ACTOR_PPO_KL: ppo_kl.detach().item(),
        ACTOR_PG_CLIPFRAC_LOWER: 0.0,  # no dual clip
    }
    return _summed(pg_losses, response_mask, config), metrics


def _losses() -> dict[str, Any]:
    """name -> function: what import agl_lab (and every Ray worker) registers in verl's policy-loss registry; verl PR
    #7580's proposals (agl_lab.core.row_weights) are verl's vanilla loss on advantages the trainer weighted per row."""
    return {
        PER_ROLLOUT_MEAN_LOSS_MODE: compute_policy_loss_per_rollout_mean,
        CISPO_PER_ROLLOUT_MEAN_LOSS_MODE: compute_policy_loss_cispo_per_rollout_mean,
        **dict.fromkeys(ROW_WEIGHTED_LOSS_MODES, compute_policy_loss_row_weighted),
    }


def register_in_worker() -> None:
    """Register ``per_rollout_mean``, ``cispo_per_rollout_mean`` and verl PR #7580's ``session_equal`` and
    ``partition_preserving`` in this process's verl registry (idempotent).

    Called on ``import agl_lab`` and, as Ray's ``worker_process_setup_hook``, in every Ray worker, because a
    worker that unpickles only verl objects never imports agl_lab by itself. A name another package already
    registered (Agent Lightning itself, say) keeps that registration, with a warning.
    """
    from verl.trainer.ppo import core_algos

    for name, fn in _losses().items():
        existing = core_algos.POLICY_LOSS_REGISTRY.get(name)
        if existing is None:
            core_algos.register_policy_loss(name)(fn)
        elif _qualname(existing) != _qualname(fn):
            warnings.warn(
                f"verl's policy-loss registry already maps {name!r} to {_qualname(existing)}; "
                "agl_lab leaves that registration in place",
                stacklevel=2,
            )


def ray_runtime_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Ray ``runtime_env`` whose workers register agl_lab's losses before running any task."""
    env = dict(base or {})
    env["worker_process_setup_hook"] = f"{__name__}.register_in_worker"
    return env


def _clip_range(config: Any, mode: str) -> tuple[float, float]:
    """(clip_ratio_low, clip_ratio_high) from the actor config, each falling back to ``clip_ratio``."""
    if config is None:  # Agent Lightning asserts this; raised explicitly here so that python -O keeps the check
        raise AssertionError(f"{mode} loss requires the actor config")
    clip_ratio = config.clip_ratio
    low, high = getattr(config, "clip_ratio_low", None), getattr(config, "clip_ratio_high", None)
    return (clip_ratio if low is None else low), (clip_ratio if high is None else high)


def _summed(pg_losses: torch.Tensor, response_mask: torch.Tensor, config: Any) -> torch.Tensor:
    # Data-parallel ranks average gradients; multiplying by dp_size keeps the global sum.
    global_batch_info = getattr(config, "global_batch_info", None)
    dp_size = global_batch_info.get("dp_size", 1) if global_batch_info else 1
    import verl.utils.torch_functional as verl_F

    return verl_F.masked_sum(pg_losses, response_mask) * (dp_size or 1)


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


# torch and verl are imported where a loss runs or registers, not here: the weight catalogue (agl_lab.core.weights,
# the analyses that read files) loads this module without torch, Ray or tensordict. The registry holds the losses
# whenever anyone can look: `import agl_lab` registers them the moment verl's policy-loss module is imported
# (agl_lab/__init__.py), and here if that happened before this module loaded.
if "verl.trainer.ppo.core_algos" in sys.modules:
    register_in_worker()
