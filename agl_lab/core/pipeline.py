"""Agent Lightning's trainer steps 1–5 on one batch of rows, driven by the composed config.

1. rows collected; ``is_drop_mask`` rows removed               (:func:`agl_lab.core.update_cap.drop_marked_rows`)
2. mini-batch alignment and ``max_ppo_update_times``            (:func:`agl_lab.apply_update_cap`)
   — here the trainer computes old log-probs (the lab trainer does; this module does not) —
3. ``token_level_rewards`` = scores (or scores − β·KL with ``algorithm.use_kl_in_reward``)
4. advantage: rollout-level (``algorithm.enable_rollout_level_advantage``), per-turn for a per-turn estimator
   (:mod:`agl_lab.core.turn_advantage`, a lab extension) or verl's ``compute_advantage``
5. ``per_rollout_mean`` / ``cispo_per_rollout_mean``: advantages divided by rollout tokens × rows (or × rollouts,
   ``lab.per_rollout_divisor``); verl PR #7580's ``session_equal`` / ``partition_preserving`` (proposed): each row's
   ``loss_weight`` (mean 1 over the step's rows) multiplies its advantages and is kept as ``batch["loss_weight"]`` for
   the actor's entropy and KL terms (:mod:`agl_lab.core.row_weights`)

:func:`select_rows` is steps 1–2 (:func:`plan_selection` with reasons; from :mod:`agl_lab.core.selection`),
:func:`rewards_and_advantages` steps 3–4, :func:`compute_advantages` 3–5 (step 5 alone is
:func:`agl_lab.core.loss.normalize_for_loss`, where the loss mode acts), :func:`prepare_batch` all: the one
implementation the trainer, the weighting lab, the diagnostics, the panels and ``agl-lab check`` share.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

from agl_lab.core.advantage import compute_rollout_level_advantage
from agl_lab.core.data_metrics import data_metrics
from agl_lab.core.groups import group_rows
from agl_lab.core.keys import (
    ALGORITHM,
    CRITIC_N_TRANSITION_AFTER_DROPPING,
    ESTIMATOR,
    GAMMA,
    KL_CTRL,
    KL_PENALTY,
    LAM,
    N_GROUPS,
    N_ZERO_ADV_GROUPS,
    NORM_ADV_BY_STD,
    ROLLOUT_LEVEL,
    ROLLOUT_N,
    USE_KL_IN_REWARD,
)
from agl_lab.core.loss import normalize_for_loss
from agl_lab.core.rows import require_finite_rows
from agl_lab.core.selection import FATES, Selection, mini_batch_rows, plan_selection, select_rows
from agl_lab.core.turn_advantage import compute_turn_level_advantage, rollout_level_problem
from agl_lab.core.turn_estimators import is_turn_estimator

__all__ = [
    "FATES",
    "Selection",
    "advantage_kwargs",
    "compute_advantages",
    "estimate_advantages",
    "rewards_and_advantages",
    "mini_batch_rows",
    "plan_selection",
    "prepare_batch",
    "select_rows",
]


def compute_advantages(
    batch: DataProto, cfg: DictConfig, *, kl_ctrl: Any | None = None, normalize: bool = True
) -> tuple[DataProto, dict[str, Any]]:
    """Steps 3–5 on the rows that survived :func:`select_rows` (:func:`rewards_and_advantages`, then the step's
    metrics). ``normalize=False`` stops before step 5 (the trainer reads the advantages as estimated first, then
    calls :func:`agl_lab.core.loss.normalize_for_loss`)."""
    batch, metrics = rewards_and_advantages(batch, cfg, kl_ctrl=kl_ctrl)
    metrics.update(_group_metrics(batch))
    metrics[CRITIC_N_TRANSITION_AFTER_DROPPING] = len(batch)
    metrics.update(data_metrics(batch))  # verl's compute_data_metrics, its token selections done once
    if normalize:
        normalize_for_loss(batch, cfg)
    return batch, metrics


def rewards_and_advantages(
    batch: DataProto, cfg: DictConfig, *, kl_ctrl: Any | None = None, rollout_level: bool | None = None
) -> tuple[DataProto, dict[str, Any]]:
    """Steps 3–4, the one implementation every caller shares (the trainer through :func:`compute_advantages`, the
    weighting lab per rollout level): rewards (scores, or scores − β·KL with the trainer's ``kl_ctrl``, else a fixed
    one from the config), rollout correction, advantage. ``rollout_level`` (default:
    ``algorithm.enable_rollout_level_advantage``) picks step 4's branch. Writes ``token_level_rewards``,
    ``advantages`` and ``returns`` into ``batch``."""
    algorithm = OmegaConf.select(cfg, ALGORITHM)
    metrics: dict[str, Any] = {}
    if "token_level_scores" not in batch.batch.keys():
        raise ValueError("batch lacks token_level_scores: the rows need the rollout's reward on their last token")
    # NaN/inf rewards are refused on every path before anything is written: verl's estimators would spread them
    require_finite_rows(batch.batch["token_level_scores"].sum(dim=-1), "token_level_scores")  # (rows,)
    if OmegaConf.select(cfg, USE_KL_IN_REWARD):
        for key in ("old_log_probs", "ref_log_prob"):
            if key not in batch.batch.keys():
                raise ValueError(f"{USE_KL_IN_REWARD} needs batch[{key!r}]: compute log-probs first or set it to false")
        kl_ctrl = kl_ctrl if kl_ctrl is not None else core_algos.get_kl_controller(OmegaConf.select(cfg, KL_CTRL))
        batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=kl_ctrl, kl_penalty=OmegaConf.select(cfg, KL_PENALTY))
        metrics.update(kl_metrics)
    else:
        batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    metrics.update(_rollout_correction(batch, algorithm))
    if rollout_level is None:
        rollout_level = bool(OmegaConf.select(cfg, ROLLOUT_LEVEL))
    batch, estimator_metrics = estimate_advantages(batch, cfg, rollout_level=rollout_level)
    metrics.update(estimator_metrics)
    return batch, metrics


def estimate_advantages(batch: DataProto, cfg: DictConfig, *, rollout_level: bool) -> tuple[DataProto, dict[str, Any]]:
    """Step 4 alone: rollout-level advantage, per-turn advantage (a per-turn estimator,
    :mod:`agl_lab.core.turn_advantage`) or verl's ``compute_advantage`` on every row; with that path's metrics."""
    adv_kwargs = advantage_kwargs(cfg)
    if problem := rollout_level_problem(OmegaConf.select(cfg, ESTIMATOR), rollout_level):
        raise ValueError(": ".join(problem))
    if rollout_level:
        return compute_rollout_level_advantage(batch, **adv_kwargs)
    if is_turn_estimator(OmegaConf.select(cfg, ESTIMATOR)):
        return compute_turn_level_advantage(batch, **adv_kwargs)
    return compute_advantage(batch, **adv_kwargs), {}


def advantage_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The estimator's arguments from the config, for verl's ``compute_advantage`` and the rollout-level path alike."""
    return {
        "adv_estimator": OmegaConf.select(cfg, ESTIMATOR),
        "gamma": OmegaConf.select(cfg, GAMMA),
        "lam": OmegaConf.select(cfg, LAM),
        "num_repeat": OmegaConf.select(cfg, ROLLOUT_N),
        "norm_adv_by_std_in_grpo": OmegaConf.select(cfg, NORM_ADV_BY_STD, default=True),
        "config": OmegaConf.select(cfg, ALGORITHM),
    }


def prepare_batch(rows: DataProto, cfg: DictConfig, *, seed: int | None = None) -> tuple[DataProto, dict[str, Any]]:
    """Steps 1–5: the batch ready for the actor update, and every metric the steps log.

    If the drops leave nothing, the empty batch is returned with the drop counters only.
    """
    batch, metrics = select_rows(rows, cfg, seed=seed)
    if len(batch) == 0:
        return batch, metrics
    batch, adv_metrics = compute_advantages(batch, cfg)
    return batch, {**metrics, **adv_metrics}


def _rollout_correction(batch: DataProto, algorithm: DictConfig) -> dict[str, Any]:
    """verl's rollout correction (IS weights, rejection mask) where Agent Lightning applies it, with its metrics.

    It runs when ``algorithm.rollout_correction`` is set (verl's default is), bypass mode is off and the rows carry
    ``rollout_log_probs``; it needs ``old_log_probs`` (the trainer computed them), so a batch without them (the
    weighting analysis of a dumped batch) skips it. Bypass mode is not the lab's (see docs/differences.md).
    """
    keys = batch.batch.keys()
    if "rollout_log_probs" not in keys or "old_log_probs" not in keys:  # first: config reads cost more
        return {}
    config = algorithm.get("rollout_correction", None)
    if config is None or config.get("bypass_mode", False):
        return {}
    corrected, metrics = compute_rollout_correction_and_add_to_batch(batch, config)
    batch.batch.update(corrected.batch)
    return metrics


def _group_metrics(batch: DataProto) -> dict[str, int]:
    """GRPO groups in the trained batch and how many have one reward throughout (zero advantage).

    Counted as Agent Lightning counts them: a group's max − min of the float32 reward sums is exactly 0.
    """
    uids = batch.non_tensor_batch.get("uid")
    if uids is None or "token_level_scores" not in batch.batch.keys():
        return {}
    groups = group_rows(uids, field="uid")
    scores = batch.batch["token_level_scores"].sum(dim=-1).detach().float().cpu()  # (rows,)
    codes = torch.from_numpy(groups.codes)  # (rows,)
    high = torch.full((groups.n_groups,), -torch.inf).scatter_reduce(0, codes, scores, "amax")  # (groups,)
    low = torch.full((groups.n_groups,), torch.inf).scatter_reduce(0, codes, scores, "amin")  # (groups,)
    return {N_GROUPS: groups.n_groups, N_ZERO_ADV_GROUPS: int((high - low == 0).sum())}
