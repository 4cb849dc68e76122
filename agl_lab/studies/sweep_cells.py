"""A sweep's cells on disk: each cell's ``cell.json`` record, when a cell counts as done, and the table of all cells.

``<sweep_dir>/<setting>/seed-<n>/cell.json`` records the cell's setting, seed, dotlist (secrets as ``***``), status
(``running``, ``done``, ``failed`` with its error), wall time, where it ran (``node_id``: the Ray node's id, None
outside Ray; ``host``: the machine's name) and ``config_sha256``: the hash of the resolved config the cell trained with
(secrets masked, its own directory left out, so a sweep moved elsewhere still matches). A cell is done only for that
exact config. Finished work is never replaced silently: a sweep rerun into the same folder whose config changed for a
finished cell (other steps, a setting redefined, another shared item) is refused before anything runs
(:func:`refuse_changed`, exit 4), naming what changed and how to start anew; a sweep folder holds one config per
setting, so its summary and panels always describe one experiment. A finished cell counts as done only while its metrics
read and its ``policy/`` loads (its ``config.json`` parses and every weights file is whole: safetensors' header and
sizes check out, so a file cut short is caught); a cell without a ``policy/`` here (on a Ray cluster it stays on its
node unless fetched) keeps its results and is named in one warning (:func:`warn_without_policy`). What a rerun does run
— interrupted, failed or damaged cells, and new seeds or settings — is warned about per cell when a folder held steps,
with what was damaged (:func:`warn_reruns`). The record is written whole (temporary file + rename), so a killed sweep or
a full disk never leaves half of one, nor a stray temporary file.

:func:`collect` reads every cell on its own: a cell whose record or metrics are damaged is listed as ``damaged`` with
the reason, and the table holds every other cell.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.dotlist import hydra_value
from agl_lab.config.secrets import redact, redact_argv
from agl_lab.config.tree import leaves
from agl_lab.core.keys import CURVE_OVERLAY, CURVE_SMOOTHING, RUN_DIR
from agl_lab.curves.history import COLUMNS, read_run_dir
from agl_lab.files.atomic_files import write_whole
from agl_lab.files.jsonl import DamagedFileWarning, read_jsonl, read_text_file

__all__ = ["CELL_FILE", "Cell", "CellRerunWarning", "SweepChangedError", "cell_status", "collect", "config_sha256"]
__all__ += ["MissingPolicyWarning", "container_sha256", "policy_problem", "warn_without_policy"]
__all__ += ["refuse_changed", "warn_reruns", "write_status"]

CELL_FILE = "cell.json"
POLICY_DIR = "policy"
MISSING = "missing"  # policy_problem: the cell has no policy/ folder here


class SweepChangedError(FileExistsError):
    """The sweep folder holds finished cells of another config: rerunning would replace them (exit 4)."""


class CellRerunWarning(UserWarning):
    """An unfinished cell (interrupted, failed, damaged) is rerun from its first step."""


class MissingPolicyWarning(UserWarning):
    """Finished cells have no ``policy/`` folder here: their results count, their trained policies are elsewhere."""


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
_NOT_RESULTS = (RUN_DIR, CURVE_SMOOTHING, CURVE_OVERLAY)


def config_sha256(cfg: DictConfig, *, leave_out: tuple[str, ...] = _NOT_RESULTS) -> str:
    """sha256 of the resolved config (secrets masked), without the keys in ``leave_out``."""
    return container_sha256(redact(OmegaConf.to_container(cfg, resolve=True)), leave_out=leave_out)


def container_sha256(container: dict[str, Any], *, leave_out: tuple[str, ...] = _NOT_RESULTS) -> str:
    """:func:`config_sha256` of a config already resolved into plain dicts (secrets masked); ``container`` is left as
    it was. A sweep hashes its cells this way, one resolved config per setting with each cell's seed put in."""
    container = copy.deepcopy(container)
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
        if policy_problem(Path(cell.run_dir) / POLICY_DIR) not in (None, MISSING):
            return "damaged"
    return status


def policy_problem(folder: Path) -> str | None:
    """Why a run's ``policy/`` would not load (:data:`MISSING` when there is none), or None: its ``config.json``
    parses and every ``*.safetensors`` file is whole (header and sizes checked, no tensor read)."""
    from safetensors import SafetensorError, safe_open

    if not folder.is_dir():
        return MISSING
    try:
        json.loads(read_text_file(folder / "config.json", what="JSON file"))
    except (OSError, ValueError) as exc:
        return f"its config.json does not read ({exc})"
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and not list(folder.glob("*.bin")):
        return "it holds no weights file"
    for file in weights:
        try:
            with safe_open(str(file), framework="np"):
                pass
        except (OSError, SafetensorError) as exc:
            return f"{file.name} does not load ({exc}: cut short or damaged)"
    return None


def warn_without_policy(cells: list[Cell]) -> None:
    """One warning naming the finished cells that have no ``policy/`` folder here."""
    lacking = [c for c in cells if cell_status(c) == "done" and policy_problem(Path(c.run_dir) / POLICY_DIR) == MISSING]
    if lacking:
        named = ", ".join(f"{c.setting} seed {c.seed}" for c in lacking[:6]) + (" ..." if len(lacking) > 6 else "")
        warnings.warn(
            f"{len(lacking)} finished cell(s) have no policy/ folder here ({named}): their results count; on a Ray "
            "cluster a cell's policy stays on its node unless fetched (--fetch-policies)",
            MissingPolicyWarning,
            stacklevel=3,
        )


def write_status(
    cell: Cell, status: str, *, error: str | None = None, wall_s: float | None = None, node: dict | None = None
) -> None:
    """Replace the cell's record whole (:mod:`agl_lab.files.atomic_files`): a full disk leaves the old record and no
    temporary file, and its error names ``cell.json``. ``node``: where it ran (``node_id``: Ray's, ``host``)."""
    record = {**asdict(cell), "dotlist": redact_argv(list(cell.dotlist))}
    record.update(status=status, error=error, wall_s=wall_s)
    record.update({"node_id": None, "host": None, **(node or {})})
    write_whole(Path(cell.run_dir) / CELL_FILE, json.dumps(record, indent=1))


def refuse_changed(cells: list[Cell], *, sweep_dir: Path, config: Callable[[Cell], DictConfig]) -> None:
    """Raise :class:`SweepChangedError` when a cell finished with another config than the one planned for it
    (``config``: a cell's planned config, for naming what changed). Nothing is deleted or rerun then."""
    changed = [cell for cell in cells if cell_status(cell) == "changed"]
    if not changed:
        return
    changes: dict[str, str] = {}
    for cell in changed:
        changes.update(_changes(cell, config(cell)))
    what = "; ".join(f"{key}: {change}" for key, change in list(changes.items())[:6])
    what += f"; and {len(changes) - 6} more" if len(changes) > 6 else ""
    named = ", ".join(f"{cell.setting} seed {cell.seed}" for cell in changed[:4])
    named += f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    raise SweepChangedError(
        f"{sweep_dir} holds {len(changed)} finished cell(s) trained with another config ({named}): "
        f"{what or 'their config.yaml is missing, so what changed cannot be shown'}. Rerunning them would replace "
        f"finished work, so nothing ran: to keep them, give this sweep another folder (--out / sweep_dir); to start "
        f"anew here, delete {sweep_dir} first. One folder holds one config per setting: to extend a sweep, add seeds "
        "or settings and keep every other item as it was"
    )


def warn_reruns(cells: list[Cell]) -> None:
    """Warn, per cell about to be rerun from its first step, what its folder held (an interrupted or failed run's
    steps are replaced: a cell counts only once it has finished)."""
    for cell in cells:
        status = cell_status(cell)
        if status is None:
            continue
        metrics = Path(cell.run_dir) / "metrics.jsonl"
        steps = len(metrics.read_bytes().splitlines()) if metrics.is_file() else 0
        problem = policy_problem(Path(cell.run_dir) / POLICY_DIR) if status == "damaged" else None
        why = f" (its policy/: {problem})" if problem not in (None, MISSING) else ""
        warnings.warn(
            f"{cell.setting} seed {cell.seed} was {status}{why} after {steps} step(s): it is rerun from step 1 in "
            f"{cell.run_dir}",
            CellRerunWarning,
            stacklevel=3,
        )


def _changes(cell: Cell, cfg: DictConfig) -> dict[str, str]:
    """``key -> "old -> new"`` between the config the cell ran (its config.yaml) and ``cfg`` (secrets masked)."""
    try:
        old = yaml.safe_load(read_text_file(Path(cell.run_dir) / "config.yaml", what="YAML file"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    new = redact(OmegaConf.to_container(cfg, resolve=True))
    before, after = dict(leaves(old if isinstance(old, dict) else {})), dict(leaves(new))
    keys = [key for key in dict.fromkeys([*before, *after]) if key not in _NOT_RESULTS]
    return {
        key: f"{hydra_value(before.get(key))} -> {hydra_value(after.get(key))}"
        for key in keys
        if before.get(key) != after.get(key)
    }


def collect(cells: list[Cell]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The long-form table of every finished cell, and one line per cell (a damaged cell never loses the others)."""
    rows, tables = [], []
    for cell in cells:
        line: dict[str, Any] = {"setting": cell.setting, "seed": cell.seed, "status": "not run", "error": None}
        line.update(wall_s=None, run_dir=cell.run_dir, config_sha256=cell.config_sha256)
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
