"""The doctor's checks of single values: numbers that must be finite, ranges, batch sizes, and what an estimator
needs. Each returns :class:`Finding` lines with their fix; :mod:`agl_lab.config.doctor` runs them all.

These are the values that passed composition (right key, right type) yet would crash a run at step 1 or train
nothing: a null or zero size, ``top_p=0`` (every token filtered out), ``lr=-1``, ``lr=nan``, ``ppo_epochs=0`` — each
range from the one table :data:`agl_lab.config.constraints.CONSTRAINTS` — and GAE with the critic switched off.
:func:`lab_estimator_problem` says which estimators the lab's own batch pipeline cannot run
(they need a critic's values or extra actor outputs that only Agent Lightning's real trainer computes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from omegaconf import DictConfig

from agl_lab.config.compose import shared_base
from agl_lab.config.constraints import constraint_problems
from agl_lab.config.key_types import default_value
from agl_lab.config.lab_config import PRETRAINED_TASKS
from agl_lab.config.model_source import TINY, model_source
from agl_lab.config.tree import leaves
from agl_lab.core.keys import (
    ACTOR,
    ACTOR_BACKEND,
    CAP_DROP_UNIT,
    ESTIMATOR,
    GDPO_REWARD_KEYS,
    LAB,
    LORA_RANK,
    LOSS_MODE,
    MINI_BATCH,
    MODEL,
    MODEL_PATH_LAB,
    ROLLOUT_LEVEL,
    TASK,
    TRAIN_BATCH,
)
from agl_lab.core.row_weights import ROW_WEIGHTED_LOSS_MODES

__all__ = ["Finding", "lab_estimator_problem", "policy_findings", "value_findings", "verl_actor_problem"]

Getter = Callable[[str], Any]

# Keys that must be finite numbers, by their last name or a section they sit in ("optim." = every optimizer value).
_FINITE_NAMES = ("gamma", "lam", "temperature", "top_p", "entropy_coeff", "kl_loss_coef", "kl_coef", "clip_ratio")
_FINITE_NAMES += ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "reward_fillna_value")
# Estimators whose inputs the lab's batch pipeline does not produce, and what they need.
_LAB_CANNOT_RUN = {
    "gae": "a critic's values (batch['values']); the lab trains no critic",
    "optimal_token_baseline": "sum_pi_squared from verl's actor (actor.calculate_sum_pi_squared)",
    "tir_optimal_token_baseline": "sum_pi_squared from verl's actor (actor.calculate_sum_pi_squared)",
    "gdpo": f"per-component rewards ({GDPO_REWARD_KEYS}) from a reward function",
}


@dataclass(frozen=True)
class Finding:
    level: Literal["error", "warning", "note"]
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.level:<7} {self.key}: {self.message} -> fix: {self.fix}"


def value_findings(cfg: DictConfig, get: Getter) -> list[Finding]:
    """Every finding about single values of ``cfg`` (``get``: a dotted key -> its value, None when absent): NaN/inf
    anywhere, every range of :data:`agl_lab.config.constraints.CONSTRAINTS`, and what the estimator needs."""
    findings = _finite(cfg)
    reported = {finding.key for finding in findings}  # a NaN is reported once, as not finite
    findings += [
        Finding("error", key, message, fix)
        for key, message, fix in constraint_problems(cfg, default=lambda key: default_value(shared_base(), key))
        if key not in reported
    ]
    return [*findings, *_mini_batch(get), *_estimator_inputs(get), *_lora_rank(get)]


def lab_estimator_problem(cfg: DictConfig) -> str | None:
    """Why agl_lab's batch pipeline (short runs, ``agl-lab check``'s example) cannot run the configured estimator."""
    estimator = str(cfg.algorithm.adv_estimator)
    if estimator not in _LAB_CANNOT_RUN:
        return None
    return (
        f"{ESTIMATOR}={estimator} needs {_LAB_CANNOT_RUN[estimator]}: agl_lab's short runs and example batch cannot "
        f"compute it (Agent Lightning's real trainer can); use grpo, rloo or reinforce_plus_plus here"
    )


def verl_actor_problem(get: Getter) -> Finding | None:
    """Why ``lab.actor=verl`` cannot train what the config asks, or None. verl's actor engine needs whole PPO
    mini-batches (its ``make_iterator`` asserts it), which ``lab.cap_drop_unit=rollout`` may not leave; and verl PR
    #7580's row weights belong on the entropy and KL terms too (revision 2), which the engine aggregates unweighted.
    The doctor reports it; :class:`agl_lab.training.verl_actor.VerlActor` refuses with the same line."""
    if get(ACTOR_BACKEND) != "verl":
        return None
    if (get(LORA_RANK) or 0) > 0:
        return Finding(
            "error",
            LORA_RANK,
            "the lab copies verl's actor engine's weights back into its policy after each update, which a LoRA adapter "
            "(peft's, in the lab) does not fit",
            f"set {ACTOR_BACKEND}=lab (it trains the adapter), or {LORA_RANK}=0",
        )
    if get(CAP_DROP_UNIT) == "rollout":
        return Finding(
            "error",
            CAP_DROP_UNIT,
            "whole-rollout drops can leave a last PPO mini-batch short, and verl's actor engine trains whole "
            "mini-batches only",
            f"set {ACTOR_BACKEND}=lab (it trains a short last mini-batch), or {CAP_DROP_UNIT}=row",
        )
    if get(LOSS_MODE) not in ROW_WEIGHTED_LOSS_MODES:
        return None
    terms = [f"{ACTOR}.entropy_coeff={get(f'{ACTOR}.entropy_coeff')}"] if get(f"{ACTOR}.entropy_coeff") else []
    terms += [f"{ACTOR}.use_kl_loss=true"] if get(f"{ACTOR}.use_kl_loss") else []
    if not terms:
        return None
    return Finding(
        "error",
        ACTOR_BACKEND,
        f"{get(LOSS_MODE)} weighs every loss term by the row's loss_weight, but verl's actor engine applies it to the "
        f"advantages only and aggregates {' and '.join(terms)} unweighted",
        f"set {ACTOR_BACKEND}=lab (the lab's actor weighs every term), or turn the entropy and KL terms off",
    )


def policy_findings(cfg: DictConfig) -> list[Finding]:
    """The short run's policy and task must fit: one policy named, and a task in English for a model that reads it
    (:mod:`agl_lab.config.model_source`)."""
    try:
        source = model_source(cfg)
    except ValueError as exc:
        return [Finding("error", MODEL, str(exc).split(": set ")[0], f"set {MODEL}={TINY} or {MODEL_PATH_LAB}=null")]
    task = cfg.lab.task
    if task in PRETRAINED_TASKS and source.kind == TINY:
        return [
            Finding(
                "error",
                TASK,
                f"{task} asks its questions in English, which the tiny word-level policy cannot read",
                f"set {MODEL}=smollm2-135m-instruct (or {MODEL_PATH_LAB} to a chat model), or {TASK}=lock",
            )
        ]
    return []


def _finite(cfg: DictConfig) -> list[Finding]:
    findings = []
    for path, value in leaves(cfg):
        if not isinstance(value, float) or math.isfinite(value):
            continue
        name = path.rsplit(".", 1)[-1]
        if math.isnan(value) or ".optim." in f".{path}." or name in _FINITE_NAMES or path.startswith(f"{LAB}."):
            findings.append(Finding("error", path, f"must be a finite number, got {value}", f"set {path} to a number"))
    return findings


def _mini_batch(get: Getter) -> list[Finding]:
    batch, mini = get(TRAIN_BATCH), get(MINI_BATCH)
    if isinstance(batch, int) and isinstance(mini, int) and mini > batch >= 1:
        return [
            Finding(
                "error",
                MINI_BATCH,
                f"ppo_mini_batch_size ({mini}) is larger than {TRAIN_BATCH} ({batch}): one mini-batch needs "
                f"{mini} x rollout.n rows but a step may collect only {batch} x rollout.n, so steps are skipped",
                f"set {MINI_BATCH} <= {batch}",
            )
        ]
    return []


def _lora_rank(get: Getter) -> list[Finding]:
    """A negative ``lora_rank`` is no error in verl: its workers add an adapter only for ``lora_rank > 0``, so the run
    fine-tunes every weight. Said, not refused, so a config that verl runs runs here too."""
    rank = get(LORA_RANK)
    if not isinstance(rank, int) or rank >= 0:
        return []
    return [
        Finding(
            "warning",
            LORA_RANK,
            f"lora_rank={rank} is below 0, which verl reads as LoRA off: the run fine-tunes every weight, as with "
            "lora_rank=0",
            f"set {LORA_RANK}=0 for full fine-tuning, or a rank > 0 (e.g. 16) for a LoRA adapter",
        )
    ]


def _estimator_inputs(get: Getter) -> list[Finding]:
    """What verl's own trainer refuses at step 1 for the estimator: GAE without its critic, the optimal baselines
    without ``sum_pi_squared``, GDPO without its reward keys (rollout-level advantage has its own check)."""
    estimator, rollout_level = get(ESTIMATOR), get(ROLLOUT_LEVEL)  # rollout-level on refuses per-token estimators
    if estimator == "gae" and not rollout_level and get("critic.enable") is False:
        return [Finding("error", ESTIMATOR, "gae needs a critic but critic.enable=false", "set critic.enable=null")]
    optimal = estimator in ("optimal_token_baseline", "tir_optimal_token_baseline")
    if optimal and not rollout_level and not get(f"{ACTOR}.calculate_sum_pi_squared"):
        return [
            Finding(
                "error",
                ESTIMATOR,
                f"{estimator} needs sum_pi_squared from the actor, which is off",
                f"set {ACTOR}.calculate_sum_pi_squared=true (or use grpo)",
            )
        ]
    if estimator == "gdpo" and not get(GDPO_REWARD_KEYS):
        return [
            Finding(
                "error",
                ESTIMATOR,
                f"gdpo needs the reward components to normalize separately ({GDPO_REWARD_KEYS})",
                f"add +{GDPO_REWARD_KEYS}=[key1,key2] (the keys your compute_score returns) or use grpo",
            )
        ]
    return []
