"""The config doctor: one line per finding, each with its fix.

It reads any composed config (``agl_lab.compose_config``, a run's saved ``config.yaml``, a config built by
hand) and explains what would surprise a researcher at step 1 or step 500: the rollout-level pair set
half-way, estimators Agent Lightning refuses, a dual-clip constant that verl rejects, an update cap
that drops everything, a mini-batch larger than the batch, misspelt keys, wrong types and unknown
enum values, single values that would crash or train nothing (:mod:`agl_lab.config.checks`: NaN
numbers, ``top_p=0``, micro-batches or ``ppo_epochs`` of 0, GAE without its critic), and what the installed verl
lacks (:mod:`agl_lab.config.verl_features`: ``token-sum`` on verl 0.8.0). Errors stop ``agl-lab train`` and go to
stderr; warnings and notes are printed.

``trainer`` says whose trainer gets the config: ``lab`` (the short-run trainer: the lab's task and its ``lab.*``
knobs count) or ``agl`` (Agent Lightning's, as ``agl-lab launch`` sends it: their agent makes the rollouts and the
``lab:`` section is dropped, so no finding is about a ``lab.*`` knob or the lab's task).
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from verl.trainer.ppo import core_algos

from agl_lab.config.checks import Finding, policy_findings, value_findings, verl_actor_problem
from agl_lab.config.compose import ConfigError, shared_base
from agl_lab.config.estimator_flags import std_flag_finding
from agl_lab.config.key_types import key_problem, type_problem
from agl_lab.config.lab_config import LabConfig, lab_field_rule
from agl_lab.config.modes import LOSS_MODES
from agl_lab.config.settings import SETTINGS, estimator_choices
from agl_lab.config.task_rows import row_limit_problem
from agl_lab.config.tree import INTERPOLATION, leaves
from agl_lab.config.turn_checks import turn_credit_findings
from agl_lab.config.verl_features import feature_for, verl_notes, verl_problems
from agl_lab.core.aggregation import TRACE_LEVELS
from agl_lab.core.keys import (
    ESTIMATOR,
    LAB,
    LOSS_AGG_MODE,
    LOSS_MODE,
    MAX_PPO_UPDATE_TIMES,
    MAX_TURNS,
    NORM_ADV_BY_STD,
    ROLLOUT_LEVEL,
    TRACE_LEVEL,
    USE_KL_IN_REWARD,
    USE_KL_LOSS,
    lab_key,
)
from agl_lab.core.loss import PER_ROLLOUT_LOSS_MODES, PER_ROLLOUT_MEAN_LOSS_MODE
from agl_lab.core.row_weights import SESSION_EQUAL
from agl_lab.core.turn_estimators import is_turn_estimator

__all__ = [
    "TRAINERS",
    "DoctorError",
    "Finding",
    "bad_keys_and_values",
    "diagnose",
    "findings_frame",
    "raise_for_errors",
    "settings_frame",
]

TRAINERS = ("lab", "agl")  # whose trainer a config is diagnosed for (module docstring)

# Estimators whose advantages vary along a row: rollout-level advantage cannot broadcast them.
TOKEN_LEVEL_ESTIMATORS = ("gae", "optimal_token_baseline", "tir_optimal_token_baseline")
# verl's loss_agg_mode values: those the catalogue's verl modes select.
_AGG_MODES = [m.settings[LOSS_AGG_MODE] for m in LOSS_MODES.values() if LOSS_AGG_MODE in m.settings]
# The lab: section's accepted values, from its own metadata.
_LAB_RULES = {name: lab_field_rule(name) for name in LabConfig.__dataclass_fields__}

ADV, PAIR_ADV = ESTIMATOR, ROLLOUT_LEVEL
_ABSENT = object()  # a path the base does not have


def diagnose(cfg: DictConfig, *, trainer: str = "lab", composed: bool = False) -> list[Finding]:
    """Every finding for ``cfg`` as ``trainer`` (``lab`` or ``agl``: :data:`TRAINERS`) would run it, errors first.

    ``composed=True``: ``cfg`` is what :func:`agl_lab.compose_config` returned, which has checked its keys, types and
    interpolations already (it raises otherwise); those checks are skipped, the rest is the same. Resolving the
    interpolations again is most of the doctor's time, which a live form (notebook 02) pays on every change.
    """
    if trainer not in TRAINERS:
        raise ValueError(f"trainer must be one of {TRAINERS}, got {trainer!r}")
    if not OmegaConf.is_config(cfg):
        raise TypeError(f"cfg must be a composed config (agl_lab.compose_config(...)), got {type(cfg).__name__}")
    findings = _enums(_getter(cfg)) if composed else bad_keys_and_values(cfg)
    if findings:
        return findings  # the checks below would reason about keys and values that do not exist
    get = _getter(cfg)
    findings += value_findings(cfg, get)
    findings += _pair(get)
    findings += _algorithm(get)
    findings += turn_credit_findings(get, trainer=trainer)  # per-turn estimators (agl_lab.config.turn_checks)
    findings += [problem] if (problem := verl_actor_problem(get)) else []
    findings += [Finding("error", key, message, fix) for key, message, fix in verl_problems(cfg)]
    findings += [Finding("note", key, message, fix) for key, message, fix in verl_notes(cfg)]
    if trainer == "lab":
        findings += policy_findings(cfg) + _task_rows(cfg)
    else:  # Agent Lightning's trainer never reads lab: (launch drops it) and runs its users' agents, not the lab's task
        findings = [f for f in findings if not f.key.startswith(f"{LAB}.")]
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted(findings, key=lambda f: order[f.level])


def bad_keys_and_values(cfg: DictConfig) -> list[Finding]:
    """The errors no run of ``cfg`` gets past, whatever the rest says: unknown keys, values of the wrong type, and
    values outside a key's choices (a typo, with the nearest choice). :func:`diagnose` stops at them."""
    findings = _structure(cfg)
    return findings or _enums(_getter(cfg))


def settings_frame(cfg: DictConfig) -> pd.DataFrame:
    """The three settings (and the divisor, the estimator) as resolved in ``cfg``, beside Agent Lightning's defaults.

    Values read as in YAML: an unset cap shows as ``null``.
    """

    def show(value: Any) -> Any:
        return "null" if value is None else value

    rows = [
        {
            "setting": setting.label,  # the catalogue's words, as every panel and the CLI show them
            "key": key,
            "value": show(OmegaConf.select(cfg, key, default=None)),
            "default": show(setting.default),
            "meaning": setting.meaning,
        }
        for key, setting in SETTINGS.items()
    ]
    return pd.DataFrame(rows)


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    """The doctor's findings as a table (level, key, message, fix)."""
    return pd.DataFrame([vars(f) for f in findings], columns=["level", "key", "message", "fix"])


class DoctorError(ConfigError):
    """The doctor found an error in a composed config: nothing ran (``agl-lab`` exits 1)."""


def raise_for_errors(findings: list[Finding]) -> None:
    """Raise :class:`DoctorError` with every error finding, one per line."""
    errors = [str(f) for f in findings if f.level == "error"]
    if errors:
        raise DoctorError("config has problems:\n" + "\n".join(f"  - {e}" for e in errors))


def _structure(cfg: DictConfig) -> list[Finding]:
    base, defaults = shared_base(), _base_leaves()
    findings: list[Finding] = []
    reported: list[str] = []
    for path, value in leaves(cfg):
        default = defaults.get(path, _ABSENT)
        if type(default) is type(value) and default == value:
            continue  # the base's own key and value: nothing to check (most of a composed config)
        if any(path.startswith(r + ".") for r in reported):
            continue
        problem = key_problem(path, base)
        if problem:
            first_unknown = _first_unknown(path, base)
            reported.append(first_unknown)
            findings.append(Finding("error", first_unknown, problem, "rename it to the suggested key or remove it"))
            continue
        problem = None if value is INTERPOLATION else type_problem(path, value, base)
        if problem:
            findings.append(Finding("error", path, problem, f"set {path} to a value of that type"))
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        findings.append(Finding("error", "config", str(exc).splitlines()[0], "fix or replace the interpolation"))
    return findings


@functools.lru_cache(maxsize=1)
def _base_leaves() -> dict[str, Any]:
    return dict(leaves(shared_base()))


def _enums(get) -> list[Finding]:
    choices = {
        ADV: estimator_choices(),
        LOSS_MODE: sorted(core_algos.POLICY_LOSS_REGISTRY),
        LOSS_AGG_MODE: _AGG_MODES,
        TRACE_LEVEL: list(TRACE_LEVELS),
        **{lab_key(name): list(rule["choices"]) for name, rule in _LAB_RULES.items() if "choices" in rule},
    }
    findings = []
    for key, allowed in choices.items():
        value = get(key)
        if isinstance(value, str) and (value in allowed or feature_for(key, value)):
            continue  # (a value only a newer verl has: verl_problems names the version it needs)
        near = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.5)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        findings.append(Finding("error", key, f"unknown value {value!r}{hint}", f"use one of: {', '.join(allowed)}"))
    return findings


def _pair(get) -> list[Finding]:
    rollout_level = bool(get(PAIR_ADV))
    # per_rollout_mean, cispo_per_rollout_mean, or verl PR #7580's session_equal: each weighs every rollout alike
    per_rollout = get(LOSS_MODE) in (*PER_ROLLOUT_LOSS_MODES, SESSION_EQUAL)
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
    if per_rollout and not rollout_level and not is_turn_estimator(get(ADV)):  # per-turn groups by turn, not row
        return [
            Finding(
                "warning",
                PAIR_ADV,
                f"{get(LOSS_MODE)} is on but rollout-level advantage is off: a rollout split into k rows sits k "
                "times in its GRPO group and shifts the group's mean and std",
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
    if get(USE_KL_IN_REWARD) and get(PAIR_ADV):
        findings.append(
            Finding(
                "error",
                USE_KL_IN_REWARD,
                "a KL penalty in the reward gives each row of a rollout a different reward sum, which rollout-level "
                "advantage refuses ('share the same scalar token_level_rewards sum')",
                f"set {USE_KL_IN_REWARD}=false and, for a KL term, {USE_KL_LOSS}=true",
            )
        )
    if found := std_flag_finding(estimator, get(NORM_ADV_BY_STD)):
        findings.append(Finding("warning", *found))
    if get(MAX_PPO_UPDATE_TIMES) is None:
        findings.append(
            Finding(
                "note",
                MAX_PPO_UPDATE_TIMES,
                "no update cap: a step whose rollouts split into many rows makes that many more PPO updates",
                f"{MAX_PPO_UPDATE_TIMES}=2 is what the Agent Lightning docs recommend for stability",
            )
        )
    return findings


def _task_rows(cfg: DictConfig) -> list[Finding]:
    problem = row_limit_problem(cfg)
    return [] if problem is None else [Finding("warning", MAX_TURNS, *problem)]


def _getter(cfg: DictConfig):
    def get(path: str) -> Any:
        return OmegaConf.select(cfg, path, default=None)

    return get


def _first_unknown(path: str, base: DictConfig) -> str:
    parts = path.split(".")
    for depth in range(1, len(parts) + 1):
        prefix = ".".join(parts[:depth])
        if key_problem(prefix, base):
            return prefix
    return path
