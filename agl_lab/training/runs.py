"""A short run's directory: the resolved config, one JSON line of metrics per step, timings, the policy.

Layout (``lab.run_dir``, or a fresh ``runs/<time>-<experiment_name>-s<seed>/`` under the working directory)::

    config.yaml      the resolved config, secrets as ***           (written before step 1)
    metrics.jsonl    {"step": N, "<metric>": value, ...} per step   (identical for the same seed on one machine)
    timings.jsonl    {"step": N, "timing_s/...": s, "perf/...": x}  (wall clock, kept apart so the above is exact)
    transcripts.jsonl {"step": N, "rollouts": [...]} per step: each rollout's messages, rows and advantages
                     (agl_lab.training.transcripts)
    validation.jsonl {"step": N, "val-core/...": x, ...} per held-out evaluation, step 0 (before training) included;
                     those of steps >= 1 are also in that step's metrics.jsonl line (trainer.test_freq > 0 only;
                     agl_lab.training.validation)
    policy/          save_pretrained model + tokenizer              (at the end, also after Stop / Ctrl-C; whole)
    status.json      {"status", "steps", "exit_code"} (at the end; absent: killed): finished (0), trained_nothing (6:
                     every step skipped), stopped (128 + N: signal N; the Stop button: 1), failed (1)
    wandb/           the W&B run, offline-run-*/ when offline       (trainer.logger has wandb)
    tracking.jsonl   verl's file backend                            (trainer.logger has file)

Lines are flushed as they are written, so a run that is stopped or crashes keeps every finished step. A run claims
its directory by creating ``config.yaml`` exclusively (``O_EXCL``, atomic on a local file system): of two runs
started into one ``lab.run_dir`` one gets it and the other is refused before it writes anything, and a directory
that holds a run is never written into again.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agl_lab.config.secrets import redacted_yaml
from agl_lab.core.keys import RUN_DIR
from agl_lab.files.atomic_files import write_whole

__all__ = ["STATUS_FILE", "TRAINED_NOTHING", "TRANSCRIPTS_FILE", "RunFiles", "create_run_dir", "finished_runs"]
__all__ += ["VALIDATION_FILE", "resolved_config_yaml"]

STATUS_FILE = "status.json"
TRANSCRIPTS_FILE = "transcripts.jsonl"
VALIDATION_FILE = "validation.jsonl"  # created at the first held-out evaluation
TRAINED_NOTHING = 6  # the exit code of a run that finished with every step skipped (agl_lab.exit_codes)


def create_run_dir(cfg: DictConfig) -> Path:
    """``lab.run_dir`` (created if needed; refused if it already holds a run), else a fresh timestamped folder in
    ``runs/``, named after ``trainer.experiment_name`` with its path separators as ``_``: a name never leaves ``runs/``
    (``../../escaped`` becomes ``.._.._escaped``)."""
    if cfg.lab.run_dir:
        path = Path(cfg.lab.run_dir).expanduser()
        if (path / "config.yaml").exists() or (path / "metrics.jsonl").exists():
            raise FileExistsError(_taken(path))
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[/\\\x00]", "_", str(cfg.trainer.experiment_name))
    base = Path("runs") / f"{stamp}-{name}-s{cfg.lab.seed}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path.resolve()
        except FileExistsError:  # two runs started in the same second (a sweep, the demo)
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def finished_runs(roots: Iterable[str | Path]) -> list[Path]:
    """The finished runs under ``roots``: run directories (``runs/<run>/``) and sweep cells
    (``sweeps/<sweep>/<setting>/seed-<n>/``, a demo's ``runs/demo/<setting>/seed-<n>/``) with their config, metrics
    and ``policy/``, which a run writes last (also when stopped); sorted by path."""
    found = set()
    for root in map(Path, roots):
        for config in (path for depth in ("*", "*/*", "*/*/*") for path in root.glob(f"{depth}/config.yaml")):
            run = config.parent
            if (run / "metrics.jsonl").is_file() and (run / "policy").is_dir():
                found.add(run)
    return sorted(found)


def resolved_config_yaml(cfg: DictConfig) -> str:
    """The config as YAML, interpolations resolved and every secret replaced by ``***``."""
    return redacted_yaml(cfg)


class RunFiles:
    """Claims the run directory by creating ``config.yaml``, then writes ``metrics.jsonl`` and ``timings.jsonl``."""

    def __init__(self, run_dir: Path, cfg: DictConfig) -> None:
        self.run_dir = run_dir
        self.steps = 0  # steps written
        self.created: list[Path] = []
        self._validation = None  # validation.jsonl, opened at the first evaluation
        config = run_dir / "config.yaml"
        try:
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise FileExistsError(_taken(run_dir)) from None
        self.created.append(config)
        try:
            with os.fdopen(fd, "w") as file:
                file.write(resolved_config_yaml(cfg))
            self._metrics = self._create("metrics.jsonl")
            self._timings = self._create("timings.jsonl")
            self._transcripts = self._create(TRANSCRIPTS_FILE)
        except BaseException:
            self.discard()
            raise

    def write(
        self, step: int, metrics: Mapping[str, Any], timings: Mapping[str, Any], transcript: list | None = None
    ) -> None:
        lines = [(self._metrics, metrics), (self._timings, timings)]
        lines += [(self._transcripts, {"rollouts": transcript})] if transcript is not None else []
        _write_lines(step, lines)
        self.steps += 1

    def write_validation(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One held-out evaluation's line in ``validation.jsonl`` (created by the first)."""
        if self._validation is None:
            self._validation = self._create(VALIDATION_FILE)
        _write_lines(step, [(self._validation, metrics)])

    def write_status(self, *, exit_code: int, stopped: bool) -> None:
        """``status.json``: how the run ended (``finished``, ``trained_nothing``, ``stopped`` by a signal or the Stop
        button, ``failed``), its finished steps and exit code (what the trackers record, and what ``agl-lab train``
        exits with). Written whole; a killed run has none."""
        ended = {0: "finished", TRAINED_NOTHING: "trained_nothing"}
        status = "stopped" if stopped else ended.get(exit_code, "failed")
        record = {"status": status, "steps": self.steps, "exit_code": exit_code}
        write_whole(self.run_dir / STATUS_FILE, json.dumps(record, indent=1) + "\n")

    def close(self) -> None:
        """Close the files; a failure on one (a full disk refusing the last flush) still closes the others."""
        try:
            self._metrics.close()
        finally:
            try:
                self._timings.close()
            finally:
                try:
                    self._transcripts.close()
                finally:
                    if self._validation is not None:
                        self._validation.close()

    def discard(self) -> None:
        """Undo a run that never started: remove what it created here (and what its trackers began), and the
        directory if that leaves it empty. Files that were there before are left alone."""
        for file in ("_metrics", "_timings", "_transcripts", "_validation"):
            if getattr(self, file, None) is not None:
                getattr(self, file).close()
        for path in self.created:
            path.unlink(missing_ok=True)
        for name in ("wandb", "tensorboard"):
            shutil.rmtree(self.run_dir / name, ignore_errors=True)
        (self.run_dir / "tracking.jsonl").unlink(missing_ok=True)
        try:
            self.run_dir.rmdir()
        except OSError:  # not empty: a sweep's cell.json or the user's own files
            pass

    def _create(self, name: str):
        file = (self.run_dir / name).open("x")
        self.created.append(self.run_dir / name)
        return file


def _write_lines(step: int, lines: list[tuple[Any, Mapping[str, Any]]]) -> None:
    for file, values in lines:
        try:
            file.write(json.dumps({"step": step, **values}) + "\n")
            file.flush()
        except OSError as exc:  # a full disk: say which file, the steps before this one are on disk
            if exc.filename is not None or exc.errno is None:
                raise
            raise type(exc)(exc.errno, exc.strerror, file.name) from exc


def _taken(path: Path) -> str:
    return (
        f"{RUN_DIR}={str(path)!r} already holds a run (or another run is writing to it): choose another directory, "
        f"delete it, or leave {RUN_DIR} null for a fresh one"
    )
