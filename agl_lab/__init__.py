"""agl_lab: Agent Lightning v1.0's per-rollout weighting (rollout-level advantage, per_rollout_mean, update cap)
on real verl parts, in a Jupyter lab.

``import agl_lab`` registers the ``per_rollout_mean`` policy loss in verl's registry.
"""

from __future__ import annotations

import logging
import warnings


def _drop_cpu_platform_notice(record: logging.LogRecord) -> bool:
    # verl announces at import that it found no GPU and falls back to CUDA names; on a CPU lab that is expected.
    return (
        "accelerator detected" not in record.getMessage() and "registered but not available" not in record.getMessage()
    )


logging.getLogger("verl.plugin.platform.platform_manager").addFilter(_drop_cpu_platform_notice)

with warnings.catch_warnings():
    # verl lists every optional training engine it could not import (megatron, torchtitan, ...): noise on a lab machine.
    warnings.filterwarnings("ignore", message=r".*engine is not available", category=UserWarning)
    from agl_lab.advantage import compute_rollout_level_advantage
    from agl_lab.config import ConfigError, LabConfig, compose_config
    from agl_lab.doctor import Finding, diagnose
    from agl_lab.loss import (
        PER_ROLLOUT_MEAN_LOSS_MODE,
        compute_policy_loss_per_rollout_mean,
        normalize_advantages_by_rollout,
        ray_runtime_env,
        register_in_worker,
    )
    from agl_lab.pipeline import compute_advantages, prepare_batch, select_rows
    from agl_lab.rows import build_rows, example_rows, rows_frame
    from agl_lab.trainer import TrainResult, short_run_config, train
    from agl_lab.update_cap import EmptyBatchWarning, apply_update_cap, drop_marked_rows

register_in_worker()

__version__ = "0.1.0"

__all__ = [
    "PER_ROLLOUT_MEAN_LOSS_MODE",
    "ConfigError",
    "TrainResult",
    "EmptyBatchWarning",
    "Finding",
    "LabConfig",
    "apply_update_cap",
    "build_rows",
    "compose_config",
    "compute_advantages",
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
    "select_rows",
    "short_run_config",
    "train",
]
