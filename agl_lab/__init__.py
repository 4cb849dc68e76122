"""agl_lab: Agent Lightning v1.0's per-rollout weighting (rollout-level advantage, per_rollout_mean, update cap)
on real verl parts, in a Jupyter lab.

``import agl_lab`` registers the ``per_rollout_mean`` and ``cispo_per_rollout_mean`` policy losses in verl's registry.
The package follows the data flow, one subpackage per stage:

* ``agl_lab.core`` — the batch math on verl ``DataProto`` rows: grouping, trace aggregation, advantage, loss,
  update cap, the trainer's steps 1–5, per-token weights (no UI, tracking or cluster imports);
* ``agl_lab.config`` — composing the config, the catalogues of loss modes and settings, the doctor, the hand-off;
* ``agl_lab.lab`` — batches to study: examples, synthetic batches, batch files, the weighting analysis and figures;
* ``agl_lab.training`` — short training runs: task, policy, rollouts, actor, trainer, run files, tracking, sweeps;
* ``agl_lab.curves`` — training histories: readers (run dirs, W&B), bands across seeds, summaries, figures;
* ``agl_lab.ui`` — the notebooks' widget panels.

The names of later stages (``train``, ``TrainResult``, ``run_sweep``, ``compare_settings``, ``weighting_diagnostics``,
``example_rows``) load
on first use, so the batch math imports light.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from typing import Any


def _drop_cpu_platform_notice(record: logging.LogRecord) -> bool:
    # verl announces at import that it found no GPU and falls back to CUDA names; on a CPU lab that is expected.
    return (
        "accelerator detected" not in record.getMessage() and "registered but not available" not in record.getMessage()
    )


logging.getLogger("verl.plugin.platform.platform_manager").addFilter(_drop_cpu_platform_notice)

with warnings.catch_warnings():
    # verl lists every optional training engine it could not import (megatron, torchtitan, ...): noise on a lab machine.
    warnings.filterwarnings("ignore", message=r".*engine is not available", category=UserWarning)
    from agl_lab.config.compose import ConfigError, compose_config, short_run_config
    from agl_lab.config.doctor import Finding, diagnose
    from agl_lab.config.lab_config import LabConfig
    from agl_lab.config.modes import LOSS_MODES
    from agl_lab.core.advantage import compute_rollout_level_advantage
    from agl_lab.core.loss import (
        CISPO_PER_ROLLOUT_MEAN_LOSS_MODE,
        PER_ROLLOUT_MEAN_LOSS_MODE,
        compute_policy_loss_cispo_per_rollout_mean,
        compute_policy_loss_per_rollout_mean,
        normalize_advantages_by_rollout,
        ray_runtime_env,
        register_in_worker,
    )
    from agl_lab.core.pipeline import compute_advantages, prepare_batch, select_rows
    from agl_lab.core.rows import build_rows, rows_frame
    from agl_lab.core.update_cap import EmptyBatchWarning, apply_update_cap, drop_marked_rows

register_in_worker()

__version__ = "0.1.0"

# name -> module, imported on first access (module-level __getattr__, PEP 562)
_LAZY = {
    "example_rows": "agl_lab.lab.examples",
    "train": "agl_lab.training.trainer",
    "TrainResult": "agl_lab.training.trainer",
    "run_sweep": "agl_lab.training.sweep",
    "compare_settings": "agl_lab.curves.effects",
    "weighting_diagnostics": "agl_lab.training.weighting_source",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agl_lab' has no attribute {name!r}")


__all__ = [
    "CISPO_PER_ROLLOUT_MEAN_LOSS_MODE",
    "LOSS_MODES",
    "PER_ROLLOUT_MEAN_LOSS_MODE",
    "ConfigError",
    "EmptyBatchWarning",
    "Finding",
    "LabConfig",
    "TrainResult",
    "apply_update_cap",
    "build_rows",
    "compare_settings",
    "compose_config",
    "compute_advantages",
    "compute_policy_loss_cispo_per_rollout_mean",
    "compute_policy_loss_per_rollout_mean",
    "compute_rollout_level_advantage",
    "diagnose",
    "drop_marked_rows",
    "example_rows",
    "normalize_advantages_by_rollout",
    "prepare_batch",
    "ray_runtime_env",
    "register_in_worker",
    "rows_frame",
    "run_sweep",
    "select_rows",
    "short_run_config",
    "train",
    "weighting_diagnostics",
]
