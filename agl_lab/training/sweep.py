"""Sweeps: a grid of settings × seeds, each cell a short lab run, on Ray (local cores or a cluster) or serially.

A single short run is noise; a curve is reproduced by running each setting over several seeds and comparing
bands. Each cell is a short run (``agl_lab.short_run_config``: Agent Lightning's defaults, the short-run
sizes, your ``overrides`` and ``dotlist``, then the setting's own dotlist) in its own run directory,
``<sweep_dir>/<setting>/seed-<seed>/``, with a ``cell.json`` recording its setting, seed, dotlist and status
(``running``, ``done``, ``failed`` with the error). Running the same sweep again skips finished cells and
reruns failed or interrupted ones; a failing cell never loses the others. The result is one long-form table
(``history.COLUMNS``) over all finished cells.

A cell trains with ``lab.cpu_threads`` torch threads (1 by default) whichever executor runs it, so Ray and
serial sweeps give the same numbers for the same seeds. Ray workers register ``per_rollout_mean`` through
``agl_lab.ray_runtime_env``.
Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from tqdm.auto import tqdm

from agl_lab.config.compose import short_run_config
from agl_lab.config.lab_config import lab_field_rule
from agl_lab.core.loss import ray_runtime_env
from agl_lab.curves.history import COLUMNS, read_run_dir
from agl_lab.training.trainer import train

__all__ = ["Cell", "SweepResult", "plan_sweep", "run_sweep"]

Executor = Literal["ray", "serial"]


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: a named setting (a dotlist) at one seed, in its own directory."""

    setting: str
    seed: int
    dotlist: tuple[str, ...]
    run_dir: str


@dataclass
class SweepResult:
    sweep_dir: Path
    table: pd.DataFrame  # long form: source, run, setting, seed, step, metric, value (finished cells)
    cells: pd.DataFrame  # one line per cell: setting, seed, status, error, wall_s, run_dir
    stopped: bool = False  # Ctrl-C ended the sweep early; the table holds the cells that finished
    figures: dict[str, Path] = field(default_factory=dict)  # figures saved from the table (the demo saves them)


def plan_sweep(
    settings: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    *,
    sweep_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    dotlist: Sequence[str] = (),
) -> list[Cell]:
    """The cells of a sweep; every cell's config is composed now, so a bad setting fails before anything runs."""
    if not settings:
        raise ValueError("settings is empty: give at least one {name: [key=value, ...]}")
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    root = Path(sweep_dir)
    cells = []
    for name, items in settings.items():
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise ValueError(f"setting name {name!r} must be letters, digits or _ . + - (it names a directory)")
        for seed in seeds:
            run_dir = root / name / f"seed-{seed}"
            cell_dotlist = (
                *dotlist,
                *items,
                f"lab.seed={seed}",
                f"lab.run_dir={run_dir}",
                f"trainer.experiment_name={name}",
            )
            short_run_config(overrides, cell_dotlist)  # raises ConfigError naming the problem
            cells.append(Cell(setting=name, seed=int(seed), dotlist=cell_dotlist, run_dir=str(run_dir)))
    return cells


def run_sweep(
    settings: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    *,
    sweep_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    dotlist: Sequence[str] = (),
    executor: Executor = "ray",
    address: str | None = None,
    num_cpus: int | None = None,
    progress: bool = True,
    wandb_mode: str | None = None,
) -> SweepResult:
    """Run every unfinished cell and collect the finished ones into one table.

    ``executor="ray"`` uses a running Ray instance, the cluster at ``address``, or starts a local one with
    ``num_cpus`` (default: the machine's cores); ``"serial"`` runs the cells here, one after another.
    ``wandb_mode`` (``online``, ``offline``, ``disabled``): every cell's ``lab.wandb_mode``, so the cells' W&B runs
    go where you say without touching ``WANDB_MODE`` in your environment (None: each cell's default, ``auto``).
    """
    if executor not in ("ray", "serial"):
        raise ValueError(f"executor must be 'ray' or 'serial', got {executor!r}")
    if wandb_mode is not None:
        modes = lab_field_rule("wandb_mode")["choices"]
        if wandb_mode not in modes:
            raise ValueError(f"wandb_mode must be one of {list(modes)} (or None), got {wandb_mode!r}")
        dotlist = [*dotlist, f"lab.wandb_mode={wandb_mode}"]
    cells = plan_sweep(settings, seeds, sweep_dir=sweep_dir, overrides=overrides, dotlist=dotlist)
    todo = [cell for cell in cells if _status(cell) != "done"]
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="sweep cells", disable=not progress)
    stopped = False
    try:
        if executor == "serial":
            for cell in todo:
                run_cell(cell, overrides, progress=progress and len(cells) == 1)
                bar.update()
        else:
            _run_on_ray(todo, overrides, address=address, num_cpus=num_cpus, bar=bar)
    except KeyboardInterrupt:  # Ctrl-C: what finished is kept and returned; the next run resumes the rest
        stopped = True
    finally:
        bar.close()
    result = _collect(Path(sweep_dir), cells)
    result.stopped = stopped
    return result


def run_cell(cell: Cell, overrides: Mapping[str, Any] | None, *, progress: bool = False) -> str:
    """Run one cell in this process and record its status; a failure is recorded, not raised."""
    run_dir = Path(cell.run_dir)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an interrupted or failed attempt: start the cell afresh
    run_dir.mkdir(parents=True)
    _write_status(cell, "running")
    start = time.perf_counter()
    try:
        result = train(short_run_config(overrides, cell.dotlist), progress=progress)
    except Exception as exc:  # a cell's failure is data for the table, not a crash of the sweep
        _write_status(cell, "failed", error="".join(traceback.format_exception_only(type(exc), exc)).strip())
        return "failed"
    if result.stopped:  # Ctrl-C: the cell stays "running", so the next sweep reruns it
        raise KeyboardInterrupt
    _write_status(cell, "done", wall_s=round(time.perf_counter() - start, 1))
    return "done"


def _run_on_ray(cells: list[Cell], overrides, *, address: str | None, num_cpus: int | None, bar) -> None:
    import ray

    if not cells:
        return
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=address,
            num_cpus=None if address else num_cpus,
            runtime_env=ray_runtime_env(),
            include_dashboard=False,
            log_to_driver=False,
        )
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_cell)
        pending = {task.remote(cell, dict(overrides or {})): cell for cell in cells}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                cell = pending.pop(ref)
                try:
                    ray.get(ref)
                except Exception as exc:  # the worker died (killed, out of memory): the cell failed, not the sweep
                    _write_status(cell, "failed", error=f"Ray task failed: {type(exc).__name__}: {exc}")
                bar.update()
    finally:
        if started_here:  # a Ray instance the sweep started goes with it; one you started stays yours
            ray.shutdown()


def _status(cell: Cell) -> str | None:
    path = Path(cell.run_dir) / "cell.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text()).get("status")
    except json.JSONDecodeError:
        return None


def _write_status(cell: Cell, status: str, *, error: str | None = None, wall_s: float | None = None) -> None:
    record = {**asdict(cell), "dotlist": list(cell.dotlist), "status": status, "error": error, "wall_s": wall_s}
    (Path(cell.run_dir) / "cell.json").write_text(json.dumps(record, indent=1))


def _collect(sweep_dir: Path, cells: list[Cell]) -> SweepResult:
    rows, tables = [], []
    for cell in cells:
        path = Path(cell.run_dir) / "cell.json"
        record = json.loads(path.read_text()) if path.exists() else {"status": "not run", "error": None}
        rows.append(
            {
                "setting": cell.setting,
                "seed": cell.seed,
                "status": record["status"],
                "error": record["error"],
                "wall_s": record.get("wall_s"),
                "run_dir": cell.run_dir,
            }
        )
        if record["status"] == "done":
            tables.append(read_run_dir(cell.run_dir, setting=cell.setting, seed=cell.seed))
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=COLUMNS)
    return SweepResult(sweep_dir=sweep_dir, table=table, cells=pd.DataFrame(rows))
