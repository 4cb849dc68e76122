"""A short run's directory: the resolved config, one JSON line of metrics per step, timings, the policy.

Layout (``lab.run_dir``, or a fresh ``runs/<time>-<experiment_name>-s<seed>/`` under the working directory)::

    config.yaml      the resolved config, secrets as ***           (written before step 1)
    metrics.jsonl    {"step": N, "<metric>": value, ...} per step   (identical for the same seed on one machine)
    timings.jsonl    {"step": N, "timing_s/...": s, "perf/...": x}  (wall clock, kept apart so the above is exact)
    policy/          save_pretrained model + tokenizer              (at the end, also after Stop / Ctrl-C)
    wandb/           the W&B run, offline-run-*/ when offline       (trainer.logger has wandb)
    tracking.jsonl   verl's file backend                            (trainer.logger has file)

Lines are flushed as they are written, so a run that is stopped or crashes keeps every finished step.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agl_lab.config.secrets import redact

__all__ = ["RunFiles", "create_run_dir", "resolved_config_yaml"]


def create_run_dir(cfg: DictConfig) -> Path:
    """``lab.run_dir`` (created if needed; refused if it already holds a run), else a fresh timestamped folder."""
    if cfg.lab.run_dir:
        path = Path(cfg.lab.run_dir).expanduser()
        if (path / "metrics.jsonl").exists():
            raise FileExistsError(
                f"lab.run_dir={str(path)!r} already holds a run (metrics.jsonl): choose another directory, "
                "delete it, or leave lab.run_dir null for a fresh one"
            )
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{stamp}-{cfg.trainer.experiment_name}-s{cfg.lab.seed}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            return path.resolve()
        except FileExistsError:  # two runs started in the same second (a sweep, the demo)
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def resolved_config_yaml(cfg: DictConfig) -> str:
    """The config as YAML, interpolations resolved and every secret replaced by ``***``."""
    return OmegaConf.to_yaml(OmegaConf.create(redact(OmegaConf.to_container(cfg, resolve=True))))


class RunFiles:
    """Writes ``config.yaml`` on opening, then ``metrics.jsonl`` and ``timings.jsonl`` one line per step."""

    def __init__(self, run_dir: Path, cfg: DictConfig) -> None:
        self.run_dir = run_dir
        (run_dir / "config.yaml").write_text(resolved_config_yaml(cfg))
        self._metrics = (run_dir / "metrics.jsonl").open("w")
        self._timings = (run_dir / "timings.jsonl").open("w")

    def write(self, step: int, metrics: Mapping[str, Any], timings: Mapping[str, Any]) -> None:
        for file, values in ((self._metrics, metrics), (self._timings, timings)):
            file.write(json.dumps({"step": step, **values}) + "\n")
            file.flush()

    def close(self) -> None:
        self._metrics.close()
        self._timings.close()
