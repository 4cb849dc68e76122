"""Agent Lightning runs recorded and diagnosed while they train: a subclass of its trainer that Ray's workers use.

Agent Lightning 1.0.2's trainer (``agentlightning.verl.trainer.AgentLightningRayPPOTrainer``) writes no per-step
dump, so a user has nothing to bring to ``agl-lab weighting``. :func:`record_run` prepares a config so that
``agentlightning.verl.entrypoint.run_ppo(config, ...)`` trains with :func:`recording_trainer`'s subclass, which
trains exactly as Agent Lightning does and also, at every training step,

* writes the rows the rollout returned to ``DIR/<global_step>.parquet`` (the kept rows with the advantages the
  estimator gave them, the rows the update cap dropped with ``kept=False``) and ``DIR/recording.json`` once
  (:mod:`agl_lab.training.recording` has the layout and the column types);
* adds verl PR #7580's ``training/trajectory/*`` and agl_lab's ``lab/diagnostics/*`` and
  ``lab/partially_dropped_rollouts`` to the metrics the step returns, which ``fit`` logs to the run's own logger
  (``trainer.logger``: W&B, console, file, …).

How the subclass gets there: ``run_ppo`` creates the trainer inside a Ray actor, importing Agent Lightning's class
there, and starts Ray with the config's ``ray_kwargs.ray_init.runtime_env`` (its own ``worker_process_setup_hook``
unless the config names one). :func:`record_run` names :func:`setup_worker`, which does what Agent Lightning's hook
does and then swaps the subclass into ``agentlightning.verl.trainer`` the moment a worker imports it (a post-import
hook: workers that never build a trainer never import it). The record folder travels in the config
(``agl_lab.record_dir``, absolute). Nothing here imports ``agentlightning`` until a worker or a test asks for it.

What the subclass adds to Agent Lightning's step, and nothing else: each row the rollout returns is tagged with its
index (a non-tensor column, carried through the drops and to the workers like ``uid``, taken off after the step),
and for the step's duration the trainer module's ``normalize_advantages_by_rollout`` is wrapped so that the
advantages it is handed (the estimator's) are kept; it computes what it computed. The tests compare the batch the
actor gets and every metric with Agent Lightning's own trainer on the same rows and draw.

The two lines in a training script of one's own, before its ``run_ppo(config, ...)``::

    from agl_lab.training.agl_recorder import record_run
    config = record_run(config, "runs/my_run")
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import platform
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

__all__ = ["RECORD_DIR_KEY", "SETUP_HOOK", "SETUP_HOOK_KEY", "record_run", "recording_trainer", "setup_worker"]

RECORD_DIR_KEY = "agl_lab.record_dir"
SETUP_HOOK_KEY = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
SETUP_HOOK = f"{__name__}.setup_worker"
TRAINER_MODULE = "agentlightning.verl.trainer"
_AGL_SETUP_HOOK = "agentlightning.verl.per_rollout_loss.register_in_worker"  # what run_ppo names when none is set
_PRODUCER = f"agl_lab's recorder ({__name__}), subclassing {TRAINER_MODULE}.AgentLightningRayPPOTrainer"


def record_run(config: DictConfig, record_dir: str | os.PathLike) -> DictConfig:
    """``config`` (Agent Lightning's, struct mode off) set to record into ``record_dir`` when ``run_ppo`` trains it.

    Sets ``agl_lab.record_dir`` (made absolute: the trainer runs in a Ray worker with another working directory)
    and Ray's worker setup hook. Refuses a config whose setup hook is someone else's, a ``record_dir`` that is a
    file, and a process where Ray already runs (``run_ppo`` would not start it with the hook).
    """
    folder = Path(record_dir).expanduser().absolute()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"record_dir {str(folder)!r} is a file: name a folder (it is created if missing)")
    hook = OmegaConf.select(config, SETUP_HOOK_KEY, default=None)
    if hook not in (None, _AGL_SETUP_HOOK, SETUP_HOOK):
        raise ValueError(
            f"{SETUP_HOOK_KEY}={hook!r} is set: agl_lab's recorder needs that hook ({SETUP_HOOK!r}, which also runs "
            f"Agent Lightning's {_AGL_SETUP_HOOK}); call yours from a hook of your own that then calls setup_worker()"
        )
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        raise RuntimeError(
            "Ray is already started in this process, so run_ppo will not start it with the recorder's worker hook: "
            f"call record_run before ray.init, or pass runtime_env={{'worker_process_setup_hook': {SETUP_HOOK!r}}}"
        )
    OmegaConf.update(config, RECORD_DIR_KEY, str(folder), force_add=True)
    OmegaConf.update(config, SETUP_HOOK_KEY, SETUP_HOOK, force_add=True)
    return config


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook``: Agent Lightning's own (its losses, vLLM patches), then the recording
    trainer swapped into ``agentlightning.verl.trainer`` when this worker imports it (at once if it has)."""
    import wrapt

    module, name = _AGL_SETUP_HOOK.rsplit(".", 1)
    getattr(importlib.import_module(module), name)()
    wrapt.register_post_import_hook(_swap_in, TRAINER_MODULE)


def recording_trainer(base: type | None = None) -> type:
    """The recording subclass of ``base`` (default: Agent Lightning's trainer), one class per base."""
    if base is None:
        base = importlib.import_module(TRAINER_MODULE).AgentLightningRayPPOTrainer
    return _subclass(base)


def _swap_in(module: Any) -> None:
    module.AgentLightningRayPPOTrainer = recording_trainer(module.AgentLightningRayPPOTrainer)


@functools.cache
def _subclass(base: type) -> type:
    if getattr(base, "_records_steps", False):
        return base  # swapped in twice (a second hook call): record once

    class RecordingTrainer(base):  # type: ignore[misc, valid-type]
        """Agent Lightning's trainer, unchanged, that records each training step's rows and logs the lab's weighting
        diagnostics with the step's metrics (:mod:`agl_lab.training.agl_recorder`)."""

        _records_steps = True

        def _rollout(self, gen_batch: Any, is_train: bool) -> tuple[Any, dict[str, Any]]:
            batch, metrics = super()._rollout(gen_batch, is_train)
            if is_train:
                import numpy as np

                from agl_lab.training.recording import ROW

                batch.non_tensor_batch[ROW] = np.arange(len(batch), dtype=np.int64)  # survives the drops
                self._agl_lab_rows = batch  # the trainer adds uid (and response_mask) to this very object
            return batch, metrics

        def _train_step(self, timing_raw: dict[str, float], curr_step_profile: bool) -> Any:
            folder = _record_dir(self.config)  # checked before the step trains
            self._agl_lab_rows = None
            try:
                with _advantages_seen() as seen:
                    result = super()._train_step(timing_raw, curr_step_profile)
            finally:
                rows, self._agl_lab_rows = self._agl_lab_rows, None
            if rows is not None:
                kept = None if result is None else result[1]
                metrics = _record(self, folder, rows, kept, seen[-1] if seen else None)
                if result is not None:
                    result[0].update(metrics)
            return result

    RecordingTrainer.__qualname__ = RecordingTrainer.__name__
    RecordingTrainer.__module__ = __name__
    return RecordingTrainer


@contextlib.contextmanager
def _advantages_seen() -> Iterator[list[Any]]:
    """During one step, the advantages Agent Lightning's trainer hands to ``normalize_advantages_by_rollout`` (the
    estimator's, before per_rollout_mean's normalization) are kept; the function itself runs unchanged."""
    module = importlib.import_module(TRAINER_MODULE)
    original = module.normalize_advantages_by_rollout
    seen: list[Any] = []

    def watched(advantages: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(advantages)
        return original(advantages, *args, **kwargs)

    module.normalize_advantages_by_rollout = watched
    try:
        yield seen
    finally:
        module.normalize_advantages_by_rollout = original


def _record_dir(config: DictConfig) -> str:
    folder = OmegaConf.select(config, RECORD_DIR_KEY, default=None)
    if not folder:
        raise ValueError(f"{RECORD_DIR_KEY} is not set: prepare the config with record_run(config, DIR)")
    return str(folder)


def _record(trainer: Any, folder: str, rows: Any, kept: Any, before_normalization: Any) -> dict[str, float]:
    """Write the step's rows (and ``recording.json`` once); return its metrics (none when it trained nothing)."""
    from verl import DataProto

    from agl_lab.core.update_cap import partially_dropped
    from agl_lab.training import recording

    if not getattr(trainer, "_agl_lab_info_written", False):
        recording.write_info(folder, trainer.config, producer=_PRODUCER, versions=_versions())
        trainer._agl_lab_info_written = True
    advantages = None
    if kept is not None:
        advantages = kept.batch["advantages"] if before_normalization is None else before_normalization
    step = int(trainer.global_steps)
    recording.write_step(folder, recording.step_rows(rows, kept, advantages, step=step))
    if kept is None:
        return {}
    kept.non_tensor_batch.pop(recording.ROW, None)
    if getattr(trainer, "_agl_lab_cfg", None) is None:
        trainer._agl_lab_cfg = recording.diagnostics_config(trainer.config)
    fields = {key: kept.batch[key] for key in ("response_mask", "token_level_scores")}
    view = DataProto.from_dict({**fields, "advantages": advantages}, non_tensors=dict(kept.non_tensor_batch))
    metrics = recording.step_metrics(view, trainer._agl_lab_cfg)
    metrics.update(partially_dropped(rows, kept))  # as the lab trainer logs it
    return metrics


def _versions() -> dict[str, Any]:
    import agl_lab
    from agl_lab.training.recording import versions

    return {
        "agl_lab": agl_lab.__version__,
        **versions("agentlightning", "verl", "torch"),
        "python": platform.python_version(),
    }
