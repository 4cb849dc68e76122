"""The lab trainer: short single-process training runs in Agent Lightning's step order, on verl's parts.

:func:`train` runs ``trainer.total_training_steps`` steps (:mod:`agl_lab.training.train_step` has what one step does,
in Agent Lightning's order), writes each to the run directory as it finishes (:mod:`agl_lab.training.session`), shows
a progress bar of the steps (and, within a step, of its rollouts), and takes the stops: the Stop event (checked
before every step and between two sampled tokens), Ctrl-C, SIGTERM, SIGHUP. It reads the real trainer's keys
(``data.*``, ``actor_rollout_ref.*``, ``algorithm.*``, ``agentlightning.*``, ``trainer.*``) plus ``lab:``;
:func:`agl_lab.short_run_config` sizes one for a laptop. Notebook: ``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig
from tqdm.auto import tqdm

from agl_lab.core import keys
from agl_lab.training.policy import GenerationStopped, StopEvent
from agl_lab.training.preflight import check_trainable
from agl_lab.training.process_state import (
    deferred_signals,
    raise_if_stopping,
    signal_exit_code,
    stop_signals,
    stopped_by,
    torch_threads,
)
from agl_lab.training.runs import TRAINED_NOTHING
from agl_lab.training.session import open_session
from agl_lab.training.tracking import open_tracker
from agl_lab.training.train_step import ProgressHook, RunState
from agl_lab.training.validation import validation_steps

__all__ = ["TrainResult", "train", "trained_any"]


@dataclass
class TrainResult:
    run_dir: Path
    history: pd.DataFrame  # one row per finished step: `step` + every metric (= metrics.jsonl)
    timings: pd.DataFrame  # one row per finished step: `step` + timing_s/* and perf/* (= timings.jsonl)
    stopped: bool  # True when the Stop event or a stop signal ended the run before trainer.total_training_steps
    wandb_run: str | None  # the W&B run's URL (online) or offline-run folder; None without the wandb backend
    config: DictConfig  # the config the run trained with (config.yaml holds it with secrets as ***)
    interrupted_by: str | None = None  # "SIGINT" (Ctrl-C), "SIGTERM" or "SIGHUP" when a signal stopped the run
    exit_code: int = 0  # what status.json and the trackers record: 0 trained, 6 every step skipped, 128 + N signal N
    # one row per held-out evaluation: `step` (0 = before training) + val-core/... (= validation.jsonl; empty when
    # trainer.test_freq <= 0)
    validation: pd.DataFrame = field(default_factory=pd.DataFrame)


def train(
    cfg: DictConfig,
    *,
    stop_event: StopEvent | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    progress: bool = True,
    composed: bool = False,
    on_progress: ProgressHook | None = None,
    on_validation: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Run ``trainer.total_training_steps`` steps; return the history. Files go to the run directory as it runs.

    ``stop_event`` (e.g. a ``threading.Event``) is checked before every step and between two sampled tokens (a step
    stopped while sampling is dropped whole); setting it, Ctrl-C, SIGTERM or SIGHUP ends the run cleanly: finished
    steps are kept, the policy saved, the trackers closed, ``stopped=True``. ``on_step`` gets each step's
    metrics.jsonl record (``step`` + metrics) once the step is written. ``progress``: tqdm bars of the steps and, within
    a step, of its rollouts; ``on_progress(step, rollouts done, rollouts, phase)`` is told the same within a step.
    ``composed=True``: ``cfg`` is what composition returned, its keys and types already checked
    (:func:`~agl_lab.training.preflight.check_trainable`). Files and trackers: :mod:`agl_lab.training.session` (nothing
    half-made if the run fails before step 1).

    Held-out evaluation (``trainer.test_freq`` > 0: step 0, every ``test_freq`` steps and the last step;
    :mod:`agl_lab.training.validation`) runs after the step's update and joins its record; ``on_validation`` gets
    each evaluation's validation.jsonl record (``step`` + ``val-core/...``; step 0's before step 1) once written. A step
    stopped while it is evaluated is kept without its evaluation.
    """
    steps, actor = check_trainable(cfg, composed=composed)
    with torch_threads(int(cfg.lab.cpu_threads)), stop_signals():
        return _train(cfg, steps=steps, actor=actor, stop_event=stop_event, on_step=on_step, progress=progress,
                      on_progress=on_progress, on_validation=on_validation)  # fmt: skip


def _train(
    cfg: DictConfig,
    *,
    steps: int,
    actor: Any,
    stop_event: StopEvent | None,
    on_step: Callable[[dict[str, Any]], None] | None,
    progress: bool,
    on_progress: ProgressHook | None,
    on_validation: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    run = RunState(cfg, actor=actor, total_steps=steps)  # builds the policy: a bad model path fails before any file
    with run.backend:  # closed last: the policy is saved first (the verl backend syncs it after every update)
        history: list[dict[str, Any]] = []
        timings: list[dict[str, Any]] = []
        validation: list[dict[str, Any]] = []
        evaluate_after = set(validation_steps(cfg, total_steps=steps))
        stopped = finished = False
        interrupted_by = None
        session = bar = None
        try:
            session = open_session(cfg, tracker_factory=open_tracker)  # undoes itself when stopped half-way
            bar = tqdm(total=steps, desc=f"{cfg.trainer.experiment_name} s{cfg.lab.seed}", disable=not progress)
            if 0 in evaluate_after:  # verl's val_before_train: the initial policy, logged at step 0
                try:
                    val, seconds = run.validate(0, stop_event=stop_event)
                except GenerationStopped:  # the Stop event is set: the loop below ends before step 1
                    stopped = True
                else:
                    with deferred_signals():
                        session.write_validation(0, val, {"timing_s/testing": seconds})
                        validation.append({"step": 0, **val})
                    if on_validation is not None:
                        on_validation(validation[-1])
            for step in range(1, steps + 1):
                raise_if_stopping()  # a stop signal whose exception something swallowed (a finalizer) ends it here
                if stop_event is not None and stop_event.is_set():
                    stopped = True
                    break
                try:
                    metrics, timing, transcript = run.step(
                        step, stop_event=stop_event, progress=progress, on_progress=on_progress
                    )
                except GenerationStopped:  # Stop while sampling: this step has no rows to train, and is dropped
                    stopped = True
                    break
                val = None
                if step in evaluate_after:  # after the update, as verl: merged into the step's metrics
                    try:
                        val, timing["timing_s/testing"] = run.validate(step, stop_event=stop_event)
                        metrics = {**metrics, **val}
                    except GenerationStopped:  # the step trained: kept, without its evaluation
                        stopped = True
                with deferred_signals():  # a step is in metrics.jsonl, the trackers (W&B) and the history, or none
                    session.write(step, metrics, timing, transcript)
                    history.append({"step": step, **metrics})
                    timings.append({"step": step, **timing})
                    if val is not None:
                        session.write_validation(step, val)
                        validation.append({"step": step, **val})
                bar.update()
                success, rows = metrics[keys.SUCCESS_RATE], metrics[keys.N_SAMPLE]
                bar.set_postfix(success=success, rows=rows, refresh=False)
                if on_step is not None:
                    on_step(history[-1])
                if on_validation is not None and val is not None:
                    on_validation(validation[-1])
                if stopped:
                    break
            finished = not stopped
        except KeyboardInterrupt as exc:
            if session is None:  # stopped before the run had files: nothing to keep, the caller reports the stop
                raise
            stopped, interrupted_by = True, stopped_by(exc)
        finally:  # also on an error: what finished stays on disk, the policy is saved and the trackers are closed
            if bar is not None:
                bar.close()
            if session is not None:
                # a signal now waits until the files are whole (and is raised after them, if it is the first)
                with deferred_signals():
                    code = 0 if finished else signal_exit_code(interrupted_by) if interrupted_by else 1
                    code = TRAINED_NOTHING if finished and not trained_any(history) else code
                    close_errors = session.close(save_policy=run.policy.save, exit_code=code, stopped=stopped)
        if close_errors:  # only when the run itself raised nothing: that error would be the one to see
            raise close_errors[0]
        return TrainResult(
            run_dir=session.run_dir,
            history=pd.DataFrame(history),
            timings=pd.DataFrame(timings),
            stopped=stopped,
            wandb_run=session.tracker.wandb_run,
            config=cfg,
            interrupted_by=interrupted_by,
            exit_code=code,
            validation=pd.DataFrame(validation),
        )


def trained_any(history: list[dict[str, Any]]) -> bool:
    """Whether any step of ``history`` (metrics.jsonl's records) trained rows: a step with no rows left after the
    drops is skipped, and a run whose every step was skipped trained nothing."""
    return any(record.get(keys.N_SAMPLE_TRAINED, 0) > 0 for record in history)
