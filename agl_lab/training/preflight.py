"""The short run's gate: everything a run checks before it writes a byte, as one list of doctor findings.

:func:`trainer_findings` is what ``agl-lab check`` and ``agl-lab train`` both print, so the two give the same line
for a config the trainer would refuse. In order: the config doctor (:func:`agl_lab.diagnose`: keys, types, every
range of :data:`agl_lab.config.constraints.CONSTRAINTS`, the settings' pairs); what the trainer's start-up code
refuses, asked of that code (:mod:`agl_lab.training.startup_checks`: verl's actor, optimizer, LR schedule, policy
loss and KL, the step count, ``lab.device``); then, for a config with no error so far, whether the policy can still
sample after one update at ``optim.lr`` (:mod:`agl_lab.training.first_update`) and the memory and time one step needs
on this machine (:mod:`agl_lab.config.feasibility`: an error when it cannot fit or cannot finish, a warning when it
would be slow). A config for Agent Lightning's trainer (``trainer="agl"``, ``check --base agl``) gets the doctor's
findings alone: the lab's trainer never runs it.

:func:`check_trainable` raises for the errors (and for a model folder that is missing or incomplete), warns for the
rest: :func:`agl_lab.train` runs it first, and a sweep runs it for every setting before the first cell trains.
Whether the lab's batch pipeline can compute the estimator is checked there too (``check`` skips its example batch
instead: the config is valid for Agent Lightning's trainer).
"""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig

from agl_lab.config.checks import Finding, lab_estimator_problem
from agl_lab.config.compose import ConfigError
from agl_lab.config.doctor import bad_keys_and_values, diagnose, raise_for_errors
from agl_lab.config.feasibility import feasibility_findings
from agl_lab.config.model_source import UNLOADABLE, check_model_source, model_source
from agl_lab.training.first_update import first_update_findings
from agl_lab.training.startup_checks import startup_findings

__all__ = ["FeasibilityWarning", "check_trainable", "trainer_findings"]


class FeasibilityWarning(UserWarning):
    """By a rough count, one step of the run would be slow on this machine."""


def trainer_findings(cfg: DictConfig, *, trainer: str = "lab", composed: bool = False) -> list[Finding]:
    """Every finding for a run of ``cfg`` by ``trainer`` (``lab`` or ``agl``), errors first (module docstring).
    ``composed=True``: ``cfg`` is what composition returned, whose keys, types and interpolations it checked (as
    :func:`agl_lab.diagnose` takes it: resolving them again is most of the doctor's time)."""
    return _findings(cfg, trainer=trainer, composed=composed)[0]


def check_trainable(cfg: DictConfig, *, composed: bool = False) -> tuple[int, Any]:
    """Raise :class:`~agl_lab.config.doctor.DoctorError` (or ``ConfigError``) for what would stop a short run of
    ``cfg``, warn for a slow one; return the step count and verl's actor config. ``composed``: as for
    :func:`trainer_findings`."""
    if not isinstance(cfg, DictConfig):
        raise TypeError(
            f"cfg must be a composed config (agl_lab.short_run_config(...) or compose_config), got {type(cfg).__name__}"
        )
    findings, actor, slow = _findings(cfg, trainer="lab", composed=composed)
    raise_for_errors(findings)
    if problem := lab_estimator_problem(cfg):
        raise ConfigError(f"config has problems:\n  - {problem}")
    check_model_source(cfg)  # a model folder that is missing, no causal LM, lacks its tokenizer, a Hub id: refused now
    for finding in slow:
        warnings.warn(f"{finding.message}: {finding.fix}", FeasibilityWarning, stacklevel=3)
    return int(cfg.trainer.total_training_steps), actor


def _findings(cfg: DictConfig, *, trainer: str, composed: bool = False) -> tuple[list[Finding], Any, list[Finding]]:
    """The findings, verl's actor config (None when not built) and the feasibility count's warnings."""
    structural = [] if composed else bad_keys_and_values(cfg)  # no value can be read past these
    if structural:
        return structural, None, []
    findings = diagnose(cfg, trainer=trainer, composed=True)  # (composed: its structure was just checked)
    if trainer != "lab":
        return findings, None, []
    erred = {f.key for f in findings if f.level == "error"}
    started, actor = startup_findings(cfg, erred=erred)
    findings += [f for f in started if f.key not in erred]  # one error per key: the doctor's words come first
    if not _errors(findings) and model_source(cfg).kind != UNLOADABLE:  # that one check_trainable refuses, check says
        check_model_source(cfg)  # what the next two load: a missing folder is a file error (exit 5), raised
        findings += first_update_findings(cfg, actor)
    feasibility = [] if _errors(findings) else feasibility_findings(cfg)
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted([*findings, *feasibility], key=lambda f: order[f.level]), actor, feasibility


def _errors(findings: list[Finding]) -> bool:
    return any(f.level == "error" for f in findings)
