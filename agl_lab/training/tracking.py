"""Experiment tracking for short runs through verl's ``Tracking`` (backends from ``trainer.logger``).

Each backend (``console``, ``wandb``, ``file``, ``tensorboard``, …) gets its own verl ``Tracking``, so one that
fails to start or to log is warned about once and dropped while the run and the other backends go on: a
tracker must never cost a researcher a finished run. Everything a backend writes lands in the run directory:

* W&B: the run sits at ``<run_dir>/wandb/offline-run-*/`` (or ``run-*`` online). ``lab.wandb_mode`` chooses the
  mode for this run (a sweep sets it per cell; :mod:`agl_lab.training.wandb_mode`); online without a reachable server
  the run logs offline, with a warning saying where, instead of stalling; ``wandb sync`` uploads it later.
* ``file``: ``<run_dir>/tracking.jsonl`` (verl's ``{"step": N, "data": {...}}`` lines); ``tensorboard``:
  ``<run_dir>/tensorboard/``. Paths you set yourself (``VERL_FILE_LOGGER_PATH``, ``TENSORBOARD_DIR``) win.

W&B (like mlflow and the other hosted trackers) keeps one run per process in module-level state, and verl's
``Tracking`` logs through it; two runs of one process logging to it at once (the training panel's thread and a
notebook cell) would write into each other's run. So such a backend is claimed per run
(:func:`claim_process_backends`) and a second run that asks for it is refused with :class:`ConcurrentRunError`
before it creates anything. Backends start one run at a time, as they read the environment while they start.

The config handed to the backends is the resolved config with every secret (``agentlightning.agl_key``,
API keys, tokens) replaced by ``***`` (:func:`agl_lab.config.secrets.redact`), and logged values are plain Python
numbers (verl's metric helpers return numpy scalars, which JSON writers refuse).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf
from verl.utils.tracking import Tracking

from agl_lab.config.secrets import redact, redact_argv
from agl_lab.core.keys import LOGGER, WANDB_MODE
from agl_lab.curves.wandb_offline import wait_for_exit
from agl_lab.training.wandb_mode import point_wandb_at, wandb_key_configured

__all__ = [
    "ConcurrentRunError",
    "Tracker",
    "TrackerWarning",
    "claim_process_backends",
    "finish_tracking",
    "open_tracker",
    "plain_metrics",
    "release_process_backends",
    "wandb_key_configured",
]


EXIT_RECORD_TIMEOUT_S = 10.0  # how long finish() waits for an offline W&B run's exit record


# Backends whose package keeps one run per process (module-level state): one run of a process may use each at a time.
PROCESS_WIDE_BACKENDS = ("wandb", "tracking", "mlflow", "swanlab", "vemlp_wandb", "clearml", "trackio")
_claims: dict[str, str] = {}  # backend -> the run holding it
_claims_lock = threading.Lock()
_start_lock = threading.Lock()  # backends read os.environ and sys.argv while they start


class TrackerWarning(UserWarning):
    """A tracking backend failed; the run goes on without it."""


class ConcurrentRunError(RuntimeError):
    """Another run of this process is using a tracker that keeps one run per process (W&B, mlflow, ...)."""


def claim_process_backends(cfg: DictConfig, *, run: str) -> list[str]:
    """Claim the process-wide backends in ``trainer.logger`` for ``run``; refuse if another run holds one.

    Returns what was claimed, for :func:`release_process_backends`. W&B with ``WANDB_MODE=disabled`` keeps nothing.
    """
    names = [name for name in _names(cfg) if name in PROCESS_WIDE_BACKENDS]
    mode = OmegaConf.select(cfg, WANDB_MODE, default=None)  # a per-run mode, where the config has one
    if (mode if mode not in (None, "auto") else os.environ.get("WANDB_MODE")) == "disabled":
        names = [name for name in names if name not in ("wandb", "tracking")]
    with _claims_lock:
        busy = {name: _claims[name] for name in names if name in _claims}
        if busy:
            name, holder = next(iter(busy.items()))
            raise ConcurrentRunError(
                f"{LOGGER} has {name}, but another run of this process ({holder}) is logging to it, and {name} "
                f"keeps one run per process: wait for that run to end, give this one {LOGGER}=[file] (or "
                "[console]), or run it in its own process (agl-lab train, or run_sweep with executor='ray')"
            )
        _claims.update(dict.fromkeys(names, run))
    return names


def release_process_backends(names: list[str]) -> None:
    with _claims_lock:
        for name in names:
            _claims.pop(name, None)


class Tracker:
    """Logs to every backend that started; a backend that fails is warned about once and dropped."""

    def __init__(self, backends: dict[str, Any], *, wandb_run: str | None = None) -> None:
        self.backends = backends
        self.wandb_run = wandb_run  # the run's URL when online, its offline-run folder when offline

    def log(self, data: Mapping[str, Any], step: int) -> None:
        data = plain_metrics(data)
        for name, backend in list(self.backends.items()):
            try:
                backend.log(data=data, step=step)
            except Exception as exc:  # noqa: BLE001 — any backend error: drop the backend, keep the run
                self.backends.pop(name)
                _warn(
                    f"tracker backend {name!r} failed to log step {step} ({type(exc).__name__}: {exc}); "
                    "it is dropped and the run goes on without it"
                )

    def finish(self, *, exit_code: int = 0) -> None:
        """Finish every backend; an offline W&B run is complete on disk (its exit record written) on return."""
        for name, backend in list(self.backends.items()):
            try:
                finish_tracking(backend, exit_code=exit_code)
            except Exception as exc:  # noqa: BLE001
                _warn(f"tracker backend {name!r} failed to finish ({type(exc).__name__}: {exc})")
                continue
            if name == "wandb" and self.wandb_run and Path(self.wandb_run).is_dir():
                _await_exit_record(Path(self.wandb_run))
        self.backends.clear()


def finish_tracking(tracking: Any, *, exit_code: int = 0) -> None:
    """Finish a verl ``Tracking`` and its backends with ``exit_code``.

    verl 0.9's ``Tracking`` has ``finish(exit_code=...)``; verl 0.8.0's finishes only when it is garbage-collected, and
    always with exit code 0 (a stopped run would read as a clean one, and late). There its backends are finished here
    as 0.9's method finishes them, and taken off it, so that its ``__del__`` finishes nothing twice.
    """
    if hasattr(tracking, "finish"):
        tracking.finish(exit_code=exit_code)
        return
    loggers, tracking.logger = tracking.logger, {}
    for name, logger in loggers.items():
        if name in ("wandb", "vemlp_wandb"):
            logger.finish(exit_code=exit_code)
        elif hasattr(logger, "finish"):  # verl's console logger has nothing to finish
            logger.finish()


def open_tracker(cfg: DictConfig, *, run_dir: Path, tracking_cls: Callable[..., Any] = Tracking) -> Tracker:
    """Start one verl ``Tracking`` per backend in ``trainer.logger``, writing under ``run_dir``."""
    names = _names(cfg)
    config = redact(OmegaConf.to_container(cfg, resolve=True))
    backends: dict[str, Any] = {}
    wandb_run = None
    mode = OmegaConf.select(cfg, WANDB_MODE, default="auto")
    wandb_mode = None if mode == "auto" else mode
    with _start_lock, _backend_env(run_dir, wandb_backend="wandb" in names, wandb_mode=wandb_mode) as started:
        for name in names:
            start = functools.partial(
                tracking_cls,
                project_name=cfg.trainer.project_name,
                experiment_name=cfg.trainer.experiment_name,
                default_backend=[name],
                config=config,
            )
            try:
                backends[name] = start()
            except Exception as exc:  # noqa: BLE001 — an unknown backend (verl asserts), no network, missing package
                online = name == "wandb" and started.get("wandb") == "online"
                if online and (backend := _offline_retry(start, exc, run_dir)):
                    backends[name] = backend
                else:
                    _warn(
                        f"tracker backend {name!r} failed to start ({type(exc).__name__}: {exc}); "
                        "the run goes on without it"
                    )
                    continue
            if name == "wandb":
                wandb_run = _wandb_location(run_dir)
    return Tracker(backends, wandb_run=wandb_run)


def plain_metrics(data: Mapping[str, Any]) -> dict[str, Any]:
    """Numpy and torch scalars as Python numbers; other values as they are."""
    out = {}
    for key, value in data.items():
        if isinstance(value, np.generic):
            value = value.item()
        elif hasattr(value, "item") and getattr(value, "ndim", None) == 0:
            value = value.item()
        out[key] = value
    return out


def _names(cfg: DictConfig) -> list[str]:
    names = cfg.trainer.logger
    return list(dict.fromkeys([names] if isinstance(names, str) else list(names or [])))


@contextlib.contextmanager
def _backend_env(run_dir: Path, *, wandb_backend: bool, wandb_mode: str | None = None) -> Iterator[dict[str, str]]:
    """Point every backend at ``run_dir`` while they start (they read these settings only then); hide secrets."""
    paths = {"VERL_FILE_LOGGER_PATH": str(run_dir / "tracking.jsonl"), "TENSORBOARD_DIR": str(run_dir / "tensorboard")}
    chosen = {k: v for k, v in paths.items() if k not in os.environ}  # paths the user set stay theirs
    os.environ.update(chosen)
    argv = sys.argv
    sys.argv = redact_argv(argv)  # W&B records the command line, which may hold agentlightning.agl_key=...
    restore_wandb = None
    started: dict[str, str] = {}  # backend -> the mode it starts in (W&B's)
    if wandb_backend:
        try:
            restore_wandb, started["wandb"] = point_wandb_at(run_dir, wandb_mode, warn=_warn)
        except Exception as exc:  # noqa: BLE001 — the wandb backend will then fail to start, with its own warning
            _warn(f"could not point W&B at the run directory ({type(exc).__name__}: {exc})")
    try:
        yield started
    finally:
        sys.argv = argv
        for key in chosen:
            os.environ.pop(key, None)
        if restore_wandb is not None:
            restore_wandb()


def _offline_retry(start: Callable[[], Any], exc: Exception, run_dir: Path) -> Any:
    """W&B failed to start online (a server that accepted the probe, then did not answer): start it offline in the
    same run directory; None if that fails too."""
    import wandb

    for attempt in (run_dir / "wandb").glob("run-*"):  # the online run that never started: not a run to read back
        shutil.rmtree(attempt, ignore_errors=True)
    try:
        wandb.setup(settings=wandb.Settings(mode="offline"))
        backend = start()
    except Exception:  # noqa: BLE001 — reported by the caller with the first error
        return None
    _warn(
        f"W&B could not start online ({type(exc).__name__}: {exc}); this run logs to W&B offline instead, in "
        f"{run_dir / 'wandb'} (`wandb sync {run_dir / 'wandb'}/offline-run-*` uploads it later)"
    )
    return backend


def _wandb_location(run_dir: Path) -> str | None:
    """This run's W&B URL or offline folder; None when W&B is disabled (``wandb.run`` may then be an older run)."""
    import wandb

    run = wandb.run
    if run is None or getattr(run, "disabled", False) or not Path(run.dir).resolve().is_relative_to(run_dir.resolve()):
        return None
    if run.offline:  # asking an offline run for its URL makes wandb print a warning
        return str(Path(run.dir).parent)
    return run.url or str(Path(run.dir).parent)


def _await_exit_record(folder: Path) -> None:
    """Wait until an offline W&B run's exit record is on disk; warn if it does not come.

    ``wandb.finish()`` can return before its service writes the record, and readers skip a run without one: a
    sweep read right after its last cell finished would miss that cell's run.
    """
    try:
        complete = wait_for_exit(folder, timeout_s=EXIT_RECORD_TIMEOUT_S).complete
    except (OSError, ValueError) as exc:  # no run file, or one the reader refuses
        _warn(f"could not read the offline W&B run {folder} back ({exc})")
        return
    if not complete:
        _warn(
            f"the offline W&B run {folder} has no exit record {EXIT_RECORD_TIMEOUT_S:g} s after finishing; readers "
            "skip it until it has one (read_wandb_offline(..., include_incomplete=True) reads it as it is)"
        )


def _warn(message: str) -> None:
    warnings.warn(message, TrackerWarning, stacklevel=3)
