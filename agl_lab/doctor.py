"""The config doctor: one line per finding, each with its fix.

It reads any composed config (``agl_lab.compose_config``, a run's saved ``config.yaml``, a config built by
hand) and explains what would surprise a researcher at step 1 or step 500: the rollout-level pair set
half-way, estimators Agent Lightning refuses, a dual-clip constant that verl rejects, an update cap
that drops everything, a mini-batch larger than the batch, misspelt keys, wrong types and unknown
enum values. Errors stop ``agl-lab train``; warnings and notes are printed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from verl.trainer.ppo import core_algos

from agl_lab.aggregation import TRACE_LEVELS
from agl_lab.config import ConfigError, _composed_base, key_problem, type_problem
from agl_lab.loss import DIVISORS, PER_ROLLOUT_MEAN_LOSS_MODE
from agl_lab.tasks import TASKS

__all__ = ["LOSS_AGG_MODES", "SETTINGS", "Finding", "diagnose", "findings_frame", "raise_for_errors", "settings_frame"]

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# Estimators whose advantages vary along a row: rollout-level advantage cannot broadcast them.
TOKEN_LEVEL_ESTIMATORS = ("gae", "optimal_token_baseline", "tir_optimal_token_baseline")

ADV = "algorithm.adv_estimator"
PAIR_ADV = "algorithm.enable_rollout_level_advantage"
LOSS_MODE = "actor_rollout_ref.actor.policy_loss.loss_mode"
CAP = "agentlightning.max_ppo_update_times"
MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"


# The three per-rollout settings, with what each does; agl_lab's divisor rides along with the loss mode.
SETTINGS = {
    PAIR_ADV: "one advantage per rollout (estimator on each rollout's first row), broadcast to its rows",
    LOSS_MODE: "per_rollout_mean: advantage / (rollout tokens x rows), clipped PPO summed over tokens",
    CAP: "at most this many PPO mini-batch updates per step; surplus rows dropped (null: no cap)",
    "lab.per_rollout_divisor": "rows = Agent Lightning v1.0 (total n_rollouts/n_rows); rollouts = Eq. 16 (total 1)",
    ADV: "verl advantage estimator",
}


@dataclass(frozen=True)
class Finding:
    level: Literal["error", "warning", "note"]
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.level:<7} {self.key}: {self.message} -> fix: {self.fix}"


def diagnose(cfg: DictConfig) -> list[Finding]:
    """Every finding for ``cfg``, errors first."""
    findings = _structure(cfg)
    if any(f.level == "error" for f in findings):
        return findings  # semantic checks would only repeat the same broken values
    get = _getter(cfg)
    findings += _enums(get)
    findings += _pair(get)
    findings += _algorithm(get)
    findings += _batch_sizes(get)
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted(findings, key=lambda f: order[f.level])


def settings_frame(cfg: DictConfig) -> pd.DataFrame:
    """The three settings (and the divisor, the estimator) as resolved in ``cfg``, beside Agent Lightning's defaults.

    Values read as in YAML: an unset cap shows as ``null``.
    """
    defaults = _composed_base()

    def show(value: Any) -> Any:
        return "null" if value is None else value

    rows = [
        {
            "key": key,
            "value": show(OmegaConf.select(cfg, key, default=None)),
            "default": show(OmegaConf.select(defaults, key, default=None)),
            "meaning": meaning,
        }
        for key, meaning in SETTINGS.items()
    ]
    return pd.DataFrame(rows)


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    """The doctor's findings as a table (level, key, message, fix)."""
    return pd.DataFrame([vars(f) for f in findings], columns=["level", "key", "message", "fix"])


def raise_for_errors(findings: list[Finding]) -> None:
    """Raise :class:`ConfigError` with every error finding, one per line."""
    errors = [str(f) for f in findings if f.level == "error"]
    if errors:
        raise ConfigError("config has problems:\n" + "\n".join(f"  - {e}" for e in errors))


def _structure(cfg: DictConfig) -> list[Finding]:
    base = _composed_base()
    findings: list[Finding] = []
    reported: list[str] = []
    for path, value in _leaves(cfg):
        if any(path.startswith(r + ".") for r in reported):
            continue
        problem = key_problem(path, base)
        if problem:
            first_unknown = _first_unknown(path, base)
            reported.append(first_unknown)
            findings.append(Finding("error", first_unknown, problem, "rename it to the suggested key or remove it"))
            continue
        problem = None if value is _INTERPOLATION else type_problem(path, value, base)
        if problem:
            findings.append(Finding("error", path, problem, f"set {path} to a value of that type"))
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        findings.append(Finding("error", "config", str(exc).splitlines()[0], "fix or replace the interpolation"))
    return findings


def _enums(get) -> list[Finding]:
    choices = {
        ADV: sorted({e.value for e in core_algos.AdvantageEstimator} | set(core_algos.ADV_ESTIMATOR_REGISTRY)),
        LOSS_MODE: sorted(core_algos.POLICY_LOSS_REGISTRY),
        "actor_rollout_ref.actor.loss_agg_mode": list(LOSS_AGG_MODES),
        "agentlightning.trace_aggregator.level": list(TRACE_LEVELS),
        "lab.per_rollout_divisor": list(DIVISORS),
        "lab.task": list(TASKS),
    }
    findings = []
    for key, allowed in choices.items():
        value = get(key)
        if isinstance(value, str) and value in allowed:
            continue
        near = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.5)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        findings.append(Finding("error", key, f"unknown value {value!r}{hint}", f"use one of: {', '.join(allowed)}"))
    return findings


def _pair(get) -> list[Finding]:
    rollout_level = bool(get(PAIR_ADV))
    per_rollout = get(LOSS_MODE) == PER_ROLLOUT_MEAN_LOSS_MODE
    if rollout_level and not per_rollout:
        return [
            Finding(
                "warning",
                LOSS_MODE,
                f"rollout-level advantage is on but loss_mode is {get(LOSS_MODE)!r}: each rollout gets one advantage, "
                "yet the loss still weighs a rollout by how many rows/tokens it became",
                f"set {LOSS_MODE}={PER_ROLLOUT_MEAN_LOSS_MODE} (or {PAIR_ADV}=false for plain verl)",
            )
        ]
    if per_rollout and not rollout_level:
        return [
            Finding(
                "warning",
                PAIR_ADV,
                "per_rollout_mean is on but rollout-level advantage is off: a rollout split into k rows sits k times "
                "in its GRPO group and shifts the group's mean and std",
                f"set {PAIR_ADV}=true (or {LOSS_MODE}=vanilla for plain verl)",
            )
        ]
    return []


def _algorithm(get) -> list[Finding]:
    findings = []
    estimator = str(get(ADV))
    if estimator == core_algos.AdvantageEstimator.REMAX.value:
        findings.append(
            Finding(
                "error",
                ADV,
                "REMAX baseline not yet supported in AgentLightningRayPPOTrainer",
                f"use {ADV}=grpo (or rloo, reinforce_plus_plus)",
            )
        )
    if estimator in TOKEN_LEVEL_ESTIMATORS and get(PAIR_ADV):
        findings.append(
            Finding(
                "error",
                ADV,
                f"{estimator} gives per-token advantages; rollout-level advantage refuses them "
                "('requires scalar outcome-style advantages')",
                f"use an outcome estimator (grpo, rloo, ...) or set {PAIR_ADV}=false",
            )
        )
    if get("algorithm.use_kl_in_reward") and get(PAIR_ADV):
        findings.append(
            Finding(
                "error",
                "algorithm.use_kl_in_reward",
                "a KL penalty in the reward gives each row of a rollout a different reward sum, which rollout-level "
                "advantage refuses ('share the same scalar token_level_rewards sum')",
                "set algorithm.use_kl_in_reward=false and, for a KL term, actor_rollout_ref.actor.use_kl_loss=true",
            )
        )
    clip_ratio_c = get("actor_rollout_ref.actor.clip_ratio_c")
    if clip_ratio_c is not None and not clip_ratio_c > 1.0:
        findings.append(
            Finding(
                "error",
                "actor_rollout_ref.actor.clip_ratio_c",
                f"clip_ratio_c must be greater than 1.0, got {clip_ratio_c}",
                "set actor_rollout_ref.actor.clip_ratio_c above 1 (default 3.0)",
            )
        )
    cap = get(CAP)
    if cap is None:
        findings.append(
            Finding(
                "note",
                CAP,
                "no update cap: a step whose rollouts split into many rows makes that many more PPO updates",
                f"{CAP}=2 is what the Agent Lightning docs recommend for stability",
            )
        )
    elif isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        findings.append(
            Finding(
                "error",
                CAP,
                f"must be null or an integer >= 1, got {cap!r}: a cap below 1 drops every row, so no step trains",
                f"set {CAP}=null (no cap) or 2 (recommended)",
            )
        )
    return findings


def _batch_sizes(get) -> list[Finding]:
    findings = []
    sizes = {key: get(key) for key in ("data.train_batch_size", MINI, "actor_rollout_ref.rollout.n")}
    for key, value in sizes.items():
        if isinstance(value, int) and value < 1:
            findings.append(Finding("error", key, f"must be a positive integer, got {value}", f"set {key} >= 1"))
    batch, mini = sizes["data.train_batch_size"], sizes[MINI]
    if isinstance(batch, int) and isinstance(mini, int) and mini > batch >= 1:
        findings.append(
            Finding(
                "error",
                MINI,
                f"ppo_mini_batch_size ({mini}) is larger than data.train_batch_size ({batch}): one mini-batch needs "
                f"{mini} x rollout.n rows but a step may collect only {batch} x rollout.n, so steps are skipped",
                f"set {MINI} <= {batch}",
            )
        )
    return findings


def _getter(cfg: DictConfig):
    def get(path: str) -> Any:
        return OmegaConf.select(cfg, path, default=None)

    return get


_INTERPOLATION = object()


def _leaves(cfg: DictConfig, prefix: str = "") -> list[tuple[str, Any]]:
    """(path, raw value) of every leaf; interpolations are resolved separately, so they are not type-checked."""
    out = []
    for key in cfg.keys():
        path = f"{prefix}{key}"
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and not node._is_none() and len(node):
            out.extend(_leaves(node, prefix=f"{path}."))
        elif OmegaConf.is_interpolation(cfg, str(key)):
            out.append((path, _INTERPOLATION))
        elif isinstance(node, DictConfig | ListConfig) and not node._is_none():
            out.append((path, OmegaConf.to_container(node)))
        else:
            out.append((path, node._value()))
    return out


def _first_unknown(path: str, base: DictConfig) -> str:
    parts = path.split(".")
    for depth in range(1, len(parts) + 1):
        prefix = ".".join(parts[:depth])
        if key_problem(prefix, base):
            return prefix
    return path
