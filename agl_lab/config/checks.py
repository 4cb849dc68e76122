"""The doctor's checks of single values: numbers that must be finite, ranges, batch sizes, and what an estimator
needs. Each returns :class:`Finding` lines with their fix; :mod:`agl_lab.config.doctor` runs them all.

These are the values that passed composition (right key, right type) yet would crash a run at step 1 or train
nothing: ``top_p=0`` (every token filtered out), a micro-batch of 0, ``lr=nan``, ``ppo_epochs=0``, GAE with the
critic switched off. :func:`lab_estimator_problem` says which estimators the lab's own batch pipeline cannot run
(they need a critic's values or extra actor outputs that only Agent Lightning's real trainer computes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from omegaconf import DictConfig

from agl_lab.config.lab_config import LabConfig, lab_field_rule
from agl_lab.config.settings import ESTIMATOR, MINI_BATCH, ROLLOUT_LEVEL
from agl_lab.config.tree import leaves

__all__ = ["Finding", "lab_estimator_problem", "value_findings"]

Getter = Callable[[str], Any]

_LAB_RULES = {name: lab_field_rule(name) for name in LabConfig.__dataclass_fields__}
_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"
# Keys that must be finite numbers, by their last name or a section they sit in ("optim." = every optimizer value).
_FINITE_NAMES = ("gamma", "lam", "temperature", "top_p", "entropy_coeff", "kl_loss_coef", "kl_coef", "clip_ratio")
_FINITE_NAMES += ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "reward_fillna_value")
_MICRO_BATCHES = (
    f"{_ACTOR}.ppo_micro_batch_size_per_gpu",
    f"{_ACTOR}.ppo_micro_batch_size",
    f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu",
    f"{_ROLLOUT}.log_prob_micro_batch_size",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
)
# Estimators whose inputs the lab's batch pipeline does not produce, and what they need.
_LAB_CANNOT_RUN = {
    "gae": "a critic's values (batch['values']); the lab trains no critic",
    "optimal_token_baseline": "sum_pi_squared from verl's actor (actor.calculate_sum_pi_squared)",
    "tir_optimal_token_baseline": "sum_pi_squared from verl's actor (actor.calculate_sum_pi_squared)",
    "gdpo": "per-component rewards (algorithm.gdpo_reward_keys) from a reward function",
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
    """Every finding about single values of ``cfg`` (``get``: a dotted key -> its value, None when absent)."""
    return [
        *_finite(cfg),
        *_lab_ranges(get),
        *_sampling(get),
        *_batch_sizes(get),
        *_estimator_inputs(get),
    ]


def lab_estimator_problem(cfg: DictConfig) -> str | None:
    """Why agl_lab's batch pipeline (short runs, ``agl-lab check``'s example) cannot run the configured estimator."""
    estimator = str(cfg.algorithm.adv_estimator)
    if estimator not in _LAB_CANNOT_RUN:
        return None
    return (
        f"{ESTIMATOR}={estimator} needs {_LAB_CANNOT_RUN[estimator]}: agl_lab's short runs and example batch cannot "
        f"compute it (Agent Lightning's real trainer can); use grpo, rloo or reinforce_plus_plus here"
    )


def _finite(cfg: DictConfig) -> list[Finding]:
    findings = []
    for path, value in leaves(cfg):
        if not isinstance(value, float) or math.isfinite(value):
            continue
        name = path.rsplit(".", 1)[-1]
        if math.isnan(value) or ".optim." in f".{path}." or name in _FINITE_NAMES or path.startswith("lab."):
            findings.append(Finding("error", path, f"must be a finite number, got {value}", f"set {path} to a number"))
    return findings


def _lab_ranges(get: Getter) -> list[Finding]:
    findings = []
    for name, rule in _LAB_RULES.items():
        low, high, value = rule.get("low"), rule.get("high"), get(f"lab.{name}")
        if low is None or not isinstance(value, int | float) or isinstance(value, bool) or low <= value <= high:
            continue
        findings.append(
            Finding("error", f"lab.{name}", f"must be in [{low}, {high}], got {value!r}", f"set lab.{name} in range")
        )
    return findings


def _sampling(get: Getter) -> list[Finding]:
    findings = []
    top_p, top_k = get(f"{_ROLLOUT}.top_p"), get(f"{_ROLLOUT}.top_k")
    if _number(top_p) and not 0 < top_p <= 1:
        findings.append(
            Finding(
                "error",
                f"{_ROLLOUT}.top_p",
                f"must be in (0, 1], got {top_p}: nucleus sampling keeps the tokens that cover top_p of the "
                "probability, so 0 keeps none",
                f"set {_ROLLOUT}.top_p=1 (off) or e.g. 0.9",
            )
        )
    if _number(top_k) and top_k < -1:
        findings.append(
            Finding("error", f"{_ROLLOUT}.top_k", f"must be -1 (off) or >= 0, got {top_k}", f"set {_ROLLOUT}.top_k=-1")
        )
    temperature = get(f"{_ROLLOUT}.temperature")
    if _number(temperature) and temperature < 0:
        findings.append(
            Finding(
                "error", f"{_ROLLOUT}.temperature", f"must be >= 0, got {temperature}", f"set {_ROLLOUT}.temperature=1"
            )
        )
    return findings


def _batch_sizes(get: Getter) -> list[Finding]:
    findings = []
    sizes = {key: get(key) for key in ("data.train_batch_size", MINI_BATCH, f"{_ROLLOUT}.n", f"{_ACTOR}.ppo_epochs")}
    for key, value in sizes.items():
        if isinstance(value, int) and value < 1:
            why = ": the actor would make no update, so nothing trains" if key.endswith("ppo_epochs") else ""
            findings.append(Finding("error", key, f"must be a positive integer, got {value}{why}", f"set {key} >= 1"))
    for key in _MICRO_BATCHES:
        value = get(key)
        if isinstance(value, int) and value < 1:
            findings.append(
                Finding("error", key, f"must be null or a positive integer, got {value}", f"set {key} >= 1 (or null)")
            )
    batch, mini = sizes["data.train_batch_size"], sizes[MINI_BATCH]
    if isinstance(batch, int) and isinstance(mini, int) and mini > batch >= 1:
        findings.append(
            Finding(
                "error",
                MINI_BATCH,
                f"ppo_mini_batch_size ({mini}) is larger than data.train_batch_size ({batch}): one mini-batch needs "
                f"{mini} x rollout.n rows but a step may collect only {batch} x rollout.n, so steps are skipped",
                f"set {MINI_BATCH} <= {batch}",
            )
        )
    return findings


def _estimator_inputs(get: Getter) -> list[Finding]:
    """What verl's own trainer refuses at step 1 for the estimator: GAE without its critic, the optimal baselines
    without ``sum_pi_squared``, GDPO without its reward keys (rollout-level advantage has its own check)."""
    estimator, rollout_level = get(ESTIMATOR), get(ROLLOUT_LEVEL)  # rollout-level on refuses per-token estimators
    if estimator == "gae" and not rollout_level and get("critic.enable") is False:
        return [Finding("error", ESTIMATOR, "gae needs a critic but critic.enable=false", "set critic.enable=null")]
    optimal = estimator in ("optimal_token_baseline", "tir_optimal_token_baseline")
    if optimal and not rollout_level and not get(f"{_ACTOR}.calculate_sum_pi_squared"):
        return [
            Finding(
                "error",
                ESTIMATOR,
                f"{estimator} needs sum_pi_squared from the actor, which is off",
                f"set {_ACTOR}.calculate_sum_pi_squared=true (or use grpo)",
            )
        ]
    if estimator == "gdpo" and not get("algorithm.gdpo_reward_keys"):
        return [
            Finding(
                "error",
                ESTIMATOR,
                "gdpo needs the reward components to normalize separately (algorithm.gdpo_reward_keys)",
                "add +algorithm.gdpo_reward_keys=[key1,key2] (the keys your compute_score returns) or use grpo",
            )
        ]
    return []


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
