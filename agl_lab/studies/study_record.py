"""A reproduction's record: what redraws its report without training, small enough to commit under ``data/``.

:func:`agl_lab.studies.reproduce.run_reproduction` writes it into ``<out>/record/`` beside the report; committed as
``data/studies/<name>/`` it ships in the package, and ``agl-lab reproduce NAME --report-only`` reads it back
(:func:`read_record`), judges the checks anew on its table and writes the report, its tables and figures. Three files:

* ``table.csv.gz`` — the long-form history (``setting, seed, step, metric, value``; read back with ``source`` =
  ``record`` and ``run`` = ``<setting>/seed-<seed>``) of every finished run, cut to the
  metrics the report reads: the experiment's checks and shown comparisons, the summary's columns, the held-out
  evaluation (verl's ``val-core/...``) and the rows per rollout a real-model result must name
  (:func:`recorded_metrics`);
* ``cells.csv`` — one line per run: ``setting, seed, status, wall_s``;
* ``meta.json`` — the experiment's name, the date (UTC), the commit, the machine, the library versions, which policy
  played which task, the seed plan (pilot, what the power analysis asked for, the cap) and the first run's resolved
  config (``config.yaml``, secrets already masked).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from agl_lab.core.keys import (
    MULTI_ROW_MASS_SHARE,
    N_ROLLOUTS,
    N_SAMPLE,
    N_SAMPLE_DROPPED_RANDOM,
    N_SAMPLE_DROPPED_SAME_REWARD,
    N_SAMPLE_TRAINED,
    PPO_UPDATES,
    ROLLOUT_LEVEL_MAX_ROWS_PER_ROLLOUT,
    SUCCESS_RATE,
    VAL_CORE,
)
from agl_lab.curves.history_table import COLUMNS

if TYPE_CHECKING:
    from agl_lab.studies.experiment import Experiment
    from agl_lab.studies.reproduce import Reproduction

__all__ = ["RECORD_FILES", "machine_meta", "packaged_record", "read_record", "recorded_metrics", "write_record"]

RECORD_FILES = ("table.csv.gz", "cells.csv", "meta.json")
_CELL_COLUMNS = ["setting", "seed", "status", "wall_s"]
# what every report shows beside the compared metrics: the summary's columns and how much the rollouts split
_ALWAYS = (
    SUCCESS_RATE,
    N_SAMPLE,
    N_ROLLOUTS,
    N_SAMPLE_TRAINED,
    N_SAMPLE_DROPPED_SAME_REWARD,
    N_SAMPLE_DROPPED_RANDOM,
    PPO_UPDATES,
    MULTI_ROW_MASS_SHARE,
    ROLLOUT_LEVEL_MAX_ROWS_PER_ROLLOUT,
)
_VERSIONS = ("agl_lab", "torch", "transformers", "peft", "verl", "numpy", "pandas")


def recorded_metrics(experiment: Experiment) -> list[str]:
    """The metrics a record keeps (module docstring), in a fixed order."""
    compared = [check.metric for check in (*experiment.checks, *experiment.shown)]
    return list(dict.fromkeys([*compared, *_ALWAYS, *experiment.recorded]))


def write_record(reproduction: Reproduction, folder: str | Path) -> Path:
    """Write ``reproduction``'s record into ``folder``, replacing the one there only once the new one is whole."""
    folder = Path(folder)
    table = reproduction.sweep.table
    names = table["metric"].astype(str)
    recorded = names.isin(recorded_metrics(reproduction.experiment)) | names.str.startswith(f"{VAL_CORE}/")
    # a run is named by its setting and seed (its folder is where it ran, not part of the record)
    kept = table.loc[recorded, ["setting", "seed", "step", "metric", "value"]]
    cells = reproduction.sweep.cells.reindex(columns=_CELL_COLUMNS)
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        kept.to_csv(partial / "table.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
        cells.to_csv(partial / "cells.csv", index=False)
        (partial / "meta.json").write_text(json.dumps(reproduction.meta, indent=1) + "\n")
        old = folder.with_name(partial.name + "-old")
        if folder.exists():
            folder.rename(old)
        partial.rename(folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    return folder


def read_record(folder: str | Path, *, experiment: Experiment) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """``(table, cells, meta)`` of a record written by :func:`write_record`; refuses a folder that is not one, or one
    that records another experiment."""
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(
            f"no record at {folder}: run `agl-lab reproduce {experiment.name}` first (it writes "
            f"runs/reproduce-{experiment.name}/record), or give --record the record/ folder of a run that finished"
        )
    missing = [name for name in RECORD_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} is no reproduction record (missing {', '.join(missing)}): give the record/ folder a "
            f"reproduction wrote (runs/reproduce-{experiment.name}/record) or a committed one "
            f"(data/studies/{experiment.name})"
        )
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("experiment") != experiment.name:
        raise ValueError(
            f"{folder} records the experiment {meta.get('experiment')!r}, not {experiment.name!r}: give "
            f"agl-lab reproduce {meta.get('experiment')} --report-only, or the record of {experiment.name}"
        )
    table = pd.read_csv(folder / "table.csv.gz")
    run = table["setting"].astype(str) + "/seed-" + table["seed"].astype("Int64").astype(str)
    table = table.assign(source="record", run=run)[COLUMNS]
    cells = pd.read_csv(folder / "cells.csv", keep_default_na=False, na_values={"wall_s": [""], "seed": [""]})
    return table, cells.assign(run_dir=""), meta


def packaged_record(name: str) -> Path:
    """Where the committed record of experiment ``name`` lies in the package (``data/studies/<name>``)."""
    return Path(__file__).resolve().parents[1] / "data" / "studies" / name


def machine_meta(*, played: str, config_text: str | None) -> dict[str, Any]:
    """Date, commit, machine and versions for a record's ``meta.json`` (the experiment's own fields are added by
    the caller)."""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in _VERSIONS},
        "played": played,
        "config": config_text,
    }


def _commit() -> str | None:
    """The repository's commit (``+dirty`` with uncommitted changes), or None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
