"""A sweep's cells on disk: each cell's ``cell.json`` record, when a cell counts as done, and the table of all cells.

``<sweep_dir>/<setting>/seed-<n>/cell.json`` records the cell's setting, seed, dotlist (secrets as ``***``), status
(``running``, ``done``, ``failed`` with its error), wall time and ``config_sha256``: the hash of the resolved config
the cell trained with (secrets masked, its own directory left out, so a sweep moved elsewhere still matches). A cell
is done only for that exact config: rerunning a sweep whose steps, settings or overrides changed reruns the cells
they change. The record is replaced atomically, so a killed sweep never leaves half of one.

:func:`collect` reads every cell on its own: a cell whose record or metrics are damaged is listed as ``damaged`` with
the reason, and the table holds every other cell.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.secrets import redact, redact_argv
from agl_lab.curves.history import COLUMNS, read_run_dir
from agl_lab.curves.jsonl import DamagedFileWarning, read_jsonl, read_text_file

__all__ = ["CELL_FILE", "Cell", "cell_status", "collect", "config_sha256", "write_status"]

CELL_FILE = "cell.json"


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: a named setting (a dotlist) at one seed, in its own directory, for one resolved config."""

    setting: str
    seed: int
    dotlist: tuple[str, ...]
    run_dir: str
    config_sha256: str = ""


# Keys that change no result: where a run is written, how its curves are shown. A finished cell stays finished when
# only these differ (and a sweep made before the curve keys existed keeps its cells).
_NOT_RESULTS = ("lab.run_dir", "lab.curve_smoothing", "lab.curve_overlay")


def config_sha256(cfg: DictConfig, *, leave_out: tuple[str, ...] = _NOT_RESULTS) -> str:
    """sha256 of the resolved config (secrets masked), without the keys in ``leave_out``."""
    container = redact(OmegaConf.to_container(cfg, resolve=True))
    for path in leave_out:
        *parents, last = path.split(".")
        node = container
        for part in parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(last, None)
    return hashlib.sha256(json.dumps(container, sort_keys=True, default=str).encode()).hexdigest()


def cell_status(cell: Cell) -> str | None:
    """``done`` only when the cell finished with this exact config and its metrics are there; else its status."""
    try:
        record = _read(cell)
    except ValueError:
        return "damaged"
    if record is None:
        return None
    status = record.get("status")
    if status == "done":
        if record.get("config_sha256") != cell.config_sha256:
            return "changed"  # another config ran here: rerun with this one
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DamagedFileWarning)  # a torn tail keeps the cell; collect() warns
                read_jsonl(Path(cell.run_dir) / "metrics.jsonl")
        except (OSError, ValueError):
            return "damaged"
    return status


def write_status(cell: Cell, status: str, *, error: str | None = None, wall_s: float | None = None) -> None:
    """Replace the cell's record atomically (written beside it, then renamed over it)."""
    record = {**asdict(cell), "dotlist": redact_argv(list(cell.dotlist))}
    record.update(status=status, error=error, wall_s=wall_s)
    path = Path(cell.run_dir) / CELL_FILE
    partial = path.with_name(f".{CELL_FILE}.{os.getpid()}.partial")
    partial.write_text(json.dumps(record, indent=1))
    os.replace(partial, path)


def collect(cells: list[Cell]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The long-form table of every finished cell, and one line per cell (a damaged cell never loses the others)."""
    rows, tables = [], []
    for cell in cells:
        line: dict[str, Any] = {"setting": cell.setting, "seed": cell.seed, "status": "not run", "error": None}
        line.update(wall_s=None, run_dir=cell.run_dir)
        try:
            record = _read(cell) or {}
            line.update({key: record[key] for key in ("status", "error", "wall_s") if key in record})
            if line["status"] == "done":
                tables.append(read_run_dir(cell.run_dir, setting=cell.setting, seed=cell.seed))
        except (OSError, ValueError) as exc:
            line.update(status="damaged", error=f"{type(exc).__name__}: {exc}")
        rows.append(line)
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS)
    return table, pd.DataFrame(rows)


def _read(cell: Cell) -> dict[str, Any] | None:
    path = Path(cell.run_dir) / CELL_FILE
    if not path.exists():
        return None
    try:
        record = json.loads(read_text_file(path, what="JSON file"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc.msg}): the cell reruns") from exc
    if not isinstance(record, dict):
        raise ValueError(f"{path} is not a cell record (a JSON object): the cell reruns")
    return record
