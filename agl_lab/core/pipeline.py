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

:func:`select_rows` is steps 1–2 (:func:`plan_selection` with reasons), :func:`rewards_and_advantages` steps 3–4,
:func:`compute_advantages` 3–5 (:func:`normalize_for_loss` 5 alone), :func:`prepare_batch` all: the one implementation
the trainer, the weighting lab, the diagnostics, the panels and ``agl-lab check`` share.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.metric_utils import compute_data_metrics
from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage, compute_response_mask
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

from agl_lab.core import metric_names
from agl_lab.core.advantage import compute_rollout_level_advantage
from agl_lab.core.groups import as_arrays, group_rows
from agl_lab.core.keys import USE_KL_IN_REWARD
from agl_lab.core.loss import PER_ROLLOUT_LOSS_MODES, normalize_advantages_by_rollout
from agl_lab.core.row_weights import LOSS_WEIGHT, ROW_WEIGHTED_LOSS_MODES, weighted_advantages
from agl_lab.core.rows import require_finite_rows, require_matrix
from agl_lab.core.turn_advantage import compute_turn_level_advantage, rollout_level_problem
from agl_lab.core.turn_estimators import is_turn_estimator
from agl_lab.core.update_cap import (
    marked_rows_kept,
    partially_dropped_count,
    plan_update_cap,
    warn_no_trainable_batch,
)

__all__ = [
    "FATES",
    "Selection",
    "advantage_kwargs",
    "compute_advantages",
    "estimate_advantages",
    "rewards_and_advantages",
    "mini_batch_rows",
    "normalize_for_loss",
    "plan_selection",
    "prepare_batch",
    "select_rows",
]


def mini_batch_rows(cfg: DictConfig) -> int:
    """Rows per PPO mini-batch: ``ppo_mini_batch_size × rollout.n`` (verl counts prompts, rows are rollouts)."""
    return int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size) * int(cfg.actor_rollout_ref.rollout.n)


@dataclass(frozen=True)
class Selection:
    """Steps 1–2 on a batch: the rows that reach the update, and what happened to every input row."""

    batch: DataProto  # the kept rows, in input order, with ``uid`` and ``response_mask`` set
    kept: np.ndarray  # (kept,) int64: the input row of each kept row
    fate: np.ndarray  # (rows,) object: one of FATES for every input row
    metrics: dict[str, Any]
    # rollouts with rows kept and rows dropped (None: no rollout_id_list); the trainer and the cap figure read it
    partially_dropped: int | None = None

    @property
    def partial_metrics(self) -> dict[str, int]:
        """``lab/partially_dropped_rollouts`` (a lab metric beside Agent Lightning's); nothing without rollout ids."""
        partial = self.partially_dropped
        return {} if partial is None else {metric_names.PARTIALLY_DROPPED_ROLLOUTS: partial}


FATES = ("kept", "dropped/marked", "dropped/same_reward", "dropped/random")


def select_rows(rows: DataProto, cfg: DictConfig, *, seed: int | None = None) -> tuple[DataProto, dict[str, Any]]:
    """Steps 1–2: set ``uid``, drop marked rows, align to mini-batches and apply the update cap.

    ``rows`` is not modified. ``seed`` (default ``lab.seed``) fixes which surplus rows are dropped. An empty
    result comes back with an ``EmptyBatchWarning``: skip the step.
    """
    selection = plan_selection(rows, cfg, seed=seed, stacklevel=3)
    return selection.batch, selection.metrics


def plan_selection(rows: DataProto, cfg: DictConfig, *, seed: int | None = None, stacklevel: int = 2) -> Selection:
    """:func:`select_rows` with its reasons: which input rows are kept, why each other row is dropped, and how many
    rollouts are trained in part. An empty selection warns (``EmptyBatchWarning``, ``stacklevel`` counted from the
    caller): the trainer skips that step."""
    if cfg.algorithm.adv_estimator == core_algos.AdvantageEstimator.REMAX:
        raise NotImplementedError("REMAX baseline not yet supported in AgentLightningRayPPOTrainer")
    seed = int(cfg.lab.seed) if seed is None else seed
    batch = _shallow_copy(rows)
    batch.meta_info["temperature"] = cfg.actor_rollout_ref.rollout.temperature
    if "data_id_list" in batch.non_tensor_batch:
        batch.non_tensor_batch["uid"] = batch.non_tensor_batch["data_id_list"]
    else:  # Agent Lightning gives every row its own group then
        rng = np.random.default_rng(seed)
        batch.non_tensor_batch["uid"] = np.array(
            [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(len(batch))], dtype=object
        )
    if "response_mask" not in batch.batch.keys():
        batch.batch["response_mask"] = compute_response_mask(batch)
    if "token_level_scores" not in batch.batch.keys():
        raise AssertionError("rollout bridge must populate token_level_scores")
    require_matrix(batch, "token_level_scores", floating=True, finite=True)  # a NaN reward would poison its group
    if "attention_mask" in batch.batch.keys():  # the tokens of every collected row, as Agent Lightning records them
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()

    n = len(batch)
    survivors, metrics = marked_rows_kept(batch)  # (survivors,)
    # The cap is planned on the survivors' scores and ids only, and every tensor is copied once, with one index for
    # both drops: copying the rows is most of this step's time (it is what verl's row indexing does per field).
    plan = plan_update_cap(
        _rows_for_plan(batch, survivors),
        mini_batch_size=mini_batch_rows(cfg),
        max_ppo_update_times=cfg.agentlightning.max_ppo_update_times,
        seed=seed,
        drop_unit=cfg.lab.cap_drop_unit,
    )
    kept = survivors[plan.kept]  # (kept,)
    if len(kept) < n:
        batch = batch[torch.from_numpy(kept)]
    fate = np.full(n, FATES[1], dtype=object)
    fate[survivors] = FATES[0]
    fate[survivors[plan.dropped_same_reward]] = FATES[2]
    fate[survivors[plan.dropped_random]] = FATES[3]
    if len(kept) == 0:
        warn_no_trainable_batch(n, mini_batch_rows(cfg), stacklevel=stacklevel)
    return Selection(
        batch=batch,
        kept=kept,
        fate=fate,
        metrics={**metrics, **plan.metrics},
        partially_dropped=partially_dropped_count(rows, kept),
    )


def _rows_for_plan(batch: DataProto, survivors: np.ndarray) -> DataProto:
    """The survivors with what :func:`plan_update_cap` reads (the scores and the id columns), not their token ids."""
    scores = batch.batch["token_level_scores"]  # (rows, R)
    if len(survivors) < len(batch):
        scores = torch.index_select(scores, 0, torch.from_numpy(survivors))  # (survivors, R)
        non_tensors = {key: values[survivors] for key, values in batch.non_tensor_batch.items()}
    else:
        non_tensors = dict(batch.non_tensor_batch)
    return DataProto(
        batch=TensorDict({"token_level_scores": scores}, batch_size=len(scores)), non_tensor_batch=non_tensors
    )


def compute_advantages(
    batch: DataProto, cfg: DictConfig, *, kl_ctrl: Any | None = None, normalize: bool = True
) -> tuple[DataProto, dict[str, Any]]:
    """Steps 3–5 on the rows that survived :func:`select_rows` (:func:`rewards_and_advantages`, then the step's
    metrics). ``normalize=False`` stops before step 5 (the trainer reads the advantages as estimated first, then
    calls :func:`normalize_for_loss`)."""
    batch, metrics = rewards_and_advantages(batch, cfg, kl_ctrl=kl_ctrl)
    metrics.update(_group_metrics(batch))
    metrics[metric_names.CRITIC_N_TRANSITION_AFTER_DROPPING] = len(batch)
    metrics.update(compute_data_metrics(batch=batch, use_critic=False))
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
    algorithm = cfg.algorithm
    metrics: dict[str, Any] = {}
    if "token_level_scores" not in batch.batch.keys():
        raise ValueError("batch lacks token_level_scores: the rows need the rollout's reward on their last token")
    # NaN/inf rewards are refused on every path before anything is written: verl's estimators would spread them
    require_finite_rows(batch.batch["token_level_scores"].sum(dim=-1), "token_level_scores")  # (rows,)
    if algorithm.use_kl_in_reward:
        for key in ("old_log_probs", "ref_log_prob"):
            if key not in batch.batch.keys():
                raise ValueError(f"{USE_KL_IN_REWARD} needs batch[{key!r}]: compute log-probs first or set it to false")
        kl_ctrl = kl_ctrl if kl_ctrl is not None else core_algos.get_kl_controller(algorithm.kl_ctrl)
        batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=kl_ctrl, kl_penalty=algorithm.kl_penalty)
        metrics.update(kl_metrics)
    else:
        batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    metrics.update(_rollout_correction(batch, algorithm))
    if rollout_level is None:
        rollout_level = bool(algorithm.enable_rollout_level_advantage)
    batch, estimator_metrics = estimate_advantages(batch, cfg, rollout_level=rollout_level)
    metrics.update(estimator_metrics)
    return batch, metrics


def normalize_for_loss(batch: DataProto, cfg: DictConfig) -> DataProto:
    """Step 5 in place: the advantages as the configured loss reads them (unchanged for verl's own losses)."""
    loss_mode = cfg.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    rollout_ids = batch.non_tensor_batch.get("rollout_id_list")
    if loss_mode in PER_ROLLOUT_LOSS_MODES:
        if rollout_ids is None:
            raise RuntimeError("per_rollout_mean loss requires rollout_id_list")
        batch.batch["advantages"] = normalize_advantages_by_rollout(
            batch.batch["advantages"],
            batch.batch["response_mask"],
            rollout_ids,
            num_trained_rows=len(batch),
            divisor=cfg.lab.per_rollout_divisor,
        )
    elif loss_mode in ROW_WEIGHTED_LOSS_MODES:
        batch.batch["advantages"], batch.batch[LOSS_WEIGHT] = weighted_advantages(
            batch.batch["advantages"], batch.batch["response_mask"], rollout_ids, mode=loss_mode
        )
    return batch


def estimate_advantages(batch: DataProto, cfg: DictConfig, *, rollout_level: bool) -> tuple[DataProto, dict[str, Any]]:
    """Step 4 alone: rollout-level advantage, per-turn advantage (a per-turn estimator,
    :mod:`agl_lab.core.turn_advantage`) or verl's ``compute_advantage`` on every row; with that path's metrics."""
    adv_kwargs = advantage_kwargs(cfg)
    if problem := rollout_level_problem(cfg.algorithm.adv_estimator, rollout_level):
        raise ValueError(": ".join(problem))
    if rollout_level:
        return compute_rollout_level_advantage(batch, **adv_kwargs)
    if is_turn_estimator(cfg.algorithm.adv_estimator):
        return compute_turn_level_advantage(batch, **adv_kwargs)
    return compute_advantage(batch, **adv_kwargs), {}


def advantage_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The estimator's arguments from the config, for verl's ``compute_advantage`` and the rollout-level path alike."""
    algorithm = cfg.algorithm
    return {
        "adv_estimator": algorithm.adv_estimator,
        "gamma": algorithm.gamma,
        "lam": algorithm.lam,
        "num_repeat": cfg.actor_rollout_ref.rollout.n,
        "norm_adv_by_std_in_grpo": algorithm.get("norm_adv_by_std_in_grpo", True),
        "config": algorithm,
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
    return {metric_names.N_GROUPS: groups.n_groups, metric_names.N_ZERO_ADV_GROUPS: int((high - low == 0).sum())}


def _shallow_copy(rows: DataProto) -> DataProto:
    """A DataProto sharing the tensors of ``rows``, so adding or replacing fields leaves ``rows`` as it was.

    Non-tensor columns given as lists, tuples or Series become numpy arrays, which verl's row indexing needs.
    """
    return DataProto(
        batch=rows.batch.copy(), non_tensor_batch=as_arrays(rows.non_tensor_batch), meta_info=dict(rows.meta_info)
    )
