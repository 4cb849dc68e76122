"""Everything a short run checks before it writes a byte: what would stop it at step 1, or never let step 1 end.

:func:`check_trainable` asks, in order: the config doctor (:func:`agl_lab.diagnose`: keys, types, every range of
:data:`agl_lab.config.constraints.CONSTRAINTS`, the settings' pairs), whether the lab's batch pipeline can compute the
estimator, the step count, verl's own ``ActorConfig`` checks (its batch divisibility rules), that a ``lab.model_path``
is a folder holding a causal LM and its tokenizer (:mod:`agl_lab.training.local_model`), and the memory and time one
step needs on this machine (:mod:`agl_lab.config.feasibility`: an error when it cannot fit, a warning when it
would be slow). :func:`agl_lab.train` runs it first; a sweep runs it for every cell before the first cell trains, so a
bad setting fails the sweep at once rather than after the others trained.
"""

from __future__ import annotations

import warnings
from typing import Any

from hydra.errors import InstantiationException
from omegaconf import DictConfig
from verl.utils.config import omega_conf_to_dataclass

from agl_lab.config.checks import lab_estimator_problem
from agl_lab.config.compose import ConfigError
from agl_lab.config.doctor import diagnose, raise_for_errors
from agl_lab.config.feasibility import feasibility_findings
from agl_lab.training.local_model import check_model_folder

__all__ = ["FeasibilityWarning", "check_trainable"]


class FeasibilityWarning(UserWarning):
    """By a rough count, one step of the run would be slow on this machine."""


def check_trainable(cfg: DictConfig) -> tuple[int, Any]:
    """Raise :class:`~agl_lab.config.doctor.DoctorError` (or ``ConfigError``) for what would stop a short run of
    ``cfg``, warn for a slow one; return the step count and verl's actor config."""
    if not isinstance(cfg, DictConfig):
        raise TypeError(
            f"cfg must be a composed config (agl_lab.short_run_config(...) or compose_config), got {type(cfg).__name__}"
        )
    raise_for_errors(diagnose(cfg))
    if problem := lab_estimator_problem(cfg):
        raise ConfigError(f"config has problems:\n  - {problem}")
    steps = cfg.trainer.total_training_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(
            f"trainer.total_training_steps must be a positive integer for a short run, got {steps!r}: "
            "set it, e.g. trainer.total_training_steps=40 (agl_lab.short_run_config sets it)"
        )
    try:
        actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        actor.validate(n_gpus=1, train_batch_size=int(cfg.data.train_batch_size))
    except (InstantiationException, ValueError, AssertionError) as exc:
        cause = exc.__cause__ or exc
        raise ConfigError(
            f"verl refuses actor_rollout_ref.actor: {cause} (agl_lab.short_run_config sizes the batch for a short run)"
        ) from exc
    check_model_folder(cfg)  # a model folder that is missing, no causal LM or lacks its tokenizer: refused now
    findings = feasibility_findings(cfg)
    raise_for_errors(findings)
    for finding in findings:
        warnings.warn(f"{finding.message}: {finding.fix}", FeasibilityWarning, stacklevel=3)
    return steps, actor
