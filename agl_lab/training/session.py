"""A run's files and trackers from the first byte to the last: claimed before step 1, closed whatever happens.

:func:`open_session` claims what a run may not share (the process-wide trackers, then the run directory through
``config.yaml``, :class:`~agl_lab.training.runs.RunFiles`) and starts the trackers. Anything that stops it half-way —
Ctrl-C while W&B starts, a directory another run took, a read-only disk — undoes what it made: no half-made run
directory is left behind. :meth:`RunSession.close` then ends a run in three parts that each run even when one
before it fails (a full disk refusing the last flush must not cost the policy or the W&B exit record): close the
files, save the policy, record how the run ended (``status.json``), finish the trackers. The trainer runs it with stop
signals deferred (:func:`agl_lab.training.process_state.deferred_signals`), and the policy and the status are written
whole (:mod:`agl_lab.files.atomic_files`), so no number of signals leaves a half-written file.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agl_lab.training.runs import RunFiles, create_run_dir
from agl_lab.training.tracking import Tracker, claim_process_backends, open_tracker, release_process_backends

__all__ = ["RunCloseWarning", "RunSession", "open_session"]


class RunCloseWarning(UserWarning):
    """A part of ending a run failed (closing the files, saving the policy); the other parts still ran."""


@dataclass
class RunSession:
    run_dir: Path
    files: RunFiles
    tracker: Tracker
    claimed: list[str] = field(default_factory=list)  # process-wide trackers this run holds

    def write(
        self, step: int, metrics: Mapping[str, Any], timing: Mapping[str, Any], transcript: list | None = None
    ) -> None:
        """One finished step: its lines in metrics.jsonl, timings.jsonl and transcripts.jsonl, then the trackers."""
        self.files.write(step, metrics, timing, transcript)
        self.tracker.log({**metrics, **timing}, step=step)

    def write_validation(self, step: int, metrics: Mapping[str, Any], timing: Mapping[str, Any] | None = None) -> None:
        """One held-out evaluation: its line in validation.jsonl; at step 0 (before training) also the trackers, at
        that step, as verl logs it (a training step's evaluation reaches them in that step's metrics)."""
        self.files.write_validation(step, metrics)
        if step == 0:
            self.tracker.log({**metrics, **(timing or {})}, step=0)

    def close(self, *, save_policy: Callable[[Path], None], exit_code: int, stopped: bool = False) -> list[Exception]:
        """Close the files, save the policy to ``policy/``, write ``status.json``, finish the trackers.

        ``exit_code``: 0 when the run finished, 128 + N when signal N stopped it (130 Ctrl-C, 143 SIGTERM), else 1;
        the trackers record it (W&B's exit code) and ``status.json`` says ``finished``, ``stopped`` or ``failed``.
        Every part runs whatever the others do; the errors come back in order (each also warned about), for the
        caller to raise the first unless an error of its own is already on its way.
        """
        errors: list[Exception] = []
        parts = (
            ("close metrics.jsonl/timings.jsonl", self.files.close),
            ("save the policy", lambda: save_policy(self.run_dir / "policy")),
            ("write status.json", lambda: self.files.write_status(exit_code=exit_code, stopped=stopped)),
            ("finish the trackers", lambda: self.tracker.finish(exit_code=exit_code)),
        )
        try:
            for what, part in parts:
                try:
                    part()
                except Exception as exc:  # noqa: BLE001 — the next parts must run; reported below and returned
                    errors.append(exc)
                    warnings.warn(
                        f"{self.run_dir}: could not {what} ({type(exc).__name__}: {exc})", RunCloseWarning, stacklevel=2
                    )
        finally:
            release_process_backends(self.claimed)
        return errors


def open_session(cfg: DictConfig, *, tracker_factory: Callable[..., Tracker] = open_tracker) -> RunSession:
    """Claim the trackers and the run directory, write ``config.yaml``, start the trackers; undo all on failure."""
    claimed = claim_process_backends(cfg, run=str(cfg.lab.run_dir or cfg.trainer.experiment_name))
    files = None
    try:
        run_dir = create_run_dir(cfg)
        files = RunFiles(run_dir, cfg)
        tracker = tracker_factory(cfg, run_dir=run_dir)
    except BaseException:  # Ctrl-C while a tracker starts included: nothing half-made stays
        if files is not None:
            files.discard()
        release_process_backends(claimed)
        raise
    return RunSession(run_dir=run_dir, files=files, tracker=tracker, claimed=claimed)
