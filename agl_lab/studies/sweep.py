"""Sweeps: a grid of settings × seeds, each cell a short lab run, on Ray (local cores or a cluster) or serially.

A single short run is noise; a curve is reproduced by running each setting over several seeds and comparing bands. Each
cell is a short run (``agl_lab.short_run_config``: Agent Lightning's defaults, the short-run sizes, your ``overrides``
and ``dotlist``, then the setting's own dotlist) in its own run directory, ``<sweep_dir>/<setting>/seed-<seed>/``, with
a ``cell.json`` recording its setting, seed, dotlist, status (``running``, ``done``, ``failed`` with the error,
``interrupted`` by a stop) and the hash of the resolved config it ran (:mod:`agl_lab.studies.sweep_cells`). Running the
same sweep again skips the cells done with the same config, reruns the unfinished ones (failed, interrupted, damaged:
metrics that do not read, a policy that does not load; warned about per cell) and trains new seeds or settings beside
them; finished cells whose config changed are never replaced: the sweep is refused before anything runs, naming what
changed (:func:`~agl_lab.studies.sweep_cells.refuse_changed`, exit 4). A failing or damaged cell never loses the
others. The result is one long-form table (``history.COLUMNS``) over all finished cells.

Every cell is planned and every setting checked before the first cell trains (:mod:`agl_lab.studies.sweep_plan`). A
sweep holds its directory while it runs (:func:`agl_lab.training.locks.directory_lock`): a second sweep into it is
refused, never mixed in. Ctrl-C, SIGTERM or SIGHUP stops it, serial or on Ray, keeping the finished cells
(:mod:`agl_lab.training.process_state`): on Ray the running cells are cancelled, each stopping like Ctrl-C in its
worker (its steps and policy kept), and the Ray instance the sweep started is shut down.

A cell trains with ``lab.cpu_threads`` torch threads (1 by default) whichever executor runs it, so Ray and
serial sweeps give the same numbers for the same seeds. Ray workers register ``per_rollout_mean`` through
``agl_lab.ray_runtime_env``. A sweep uses a Ray already running (:func:`agl_lab.studies.ray_start.start_ray` starts
it early, with warm workers) and leaves it running; one it starts itself it shuts down at its end.
Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from tqdm.auto import tqdm

from agl_lab.config.arguments import string_list
from agl_lab.config.compose import short_run_config
from agl_lab.config.lab_config import lab_field_rule
from agl_lab.config.secrets import mask_secrets, secret_values
from agl_lab.core.keys import WANDB_MODE
from agl_lab.studies.sweep_cells import (
    Cell,
    cell_status,
    collect,
    refuse_changed,
    warn_reruns,
    warn_without_policy,
    write_status,
)
from agl_lab.studies.sweep_plan import plan_sweep
from agl_lab.studies.sweep_ray import node_record, run_on_ray, shared_ray
from agl_lab.training.locks import directory_lock
from agl_lab.training.process_state import deferred_signals, stop_exception, stop_signals, stopped_by
from agl_lab.training.trainer import train

__all__ = ["Cell", "SweepResult", "plan_sweep", "run_cell", "run_cells", "run_sweep", "shared_ray", "wandb_mode_items"]

Executor = Literal["ray", "serial"]


@dataclass
class SweepResult:
    sweep_dir: Path
    table: pd.DataFrame  # long form: source, run, setting, seed, step, metric, value (finished cells)
    cells: pd.DataFrame  # one line per cell: setting, seed, status, error, wall_s, run_dir
    stopped: bool = False  # Ctrl-C, SIGTERM or SIGHUP ended the sweep early; the table holds the finished cells
    interrupted_by: str | None = None  # "SIGINT" (Ctrl-C), "SIGTERM" or "SIGHUP"
    figures: dict[str, Path] = field(default_factory=dict)  # figures saved from the table (the demo saves them)
    effects: pd.DataFrame | None = None  # compare_settings against the baseline, once save_results has run


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
    fetch_policies: bool = False,
    progress: bool = True,
    wandb_mode: str | None = None,
) -> SweepResult:
    """Run every unfinished cell and collect the finished ones into one table.

    ``executor="ray"`` uses a running Ray instance, the cluster at ``address`` (``HOST:PORT`` of its head), or starts
    a local one with ``num_cpus`` (default: the machine's cores); ``"serial"`` runs the cells here, one after another.
    On Ray each cell's files come back to ``sweep_dir`` through Ray, its policy only with ``fetch_policies``
    (:mod:`agl_lab.studies.sweep_ray`).
    ``wandb_mode`` (``online``, ``offline``, ``disabled``): every cell's ``lab.wandb_mode``, so the cells' W&B runs
    go where you say without touching ``WANDB_MODE`` in your environment (None: each cell's default, ``auto``).
    """
    _check_executor(executor)
    dotlist = [*string_list(dotlist, name="dotlist", what="Hydra overrides"), *wandb_mode_items(wandb_mode)]
    cells = plan_sweep(settings, seeds, sweep_dir=sweep_dir, overrides=overrides, dotlist=dotlist)
    return run_cells(
        cells, overrides, sweep_dir=sweep_dir, executor=executor, address=address, num_cpus=num_cpus,
        fetch_policies=fetch_policies, progress=progress,
    )  # fmt: skip


def wandb_mode_items(wandb_mode: str | None) -> list[str]:
    """The dotlist item that gives every cell ``lab.wandb_mode=wandb_mode`` (none for None); a ValueError otherwise."""
    if wandb_mode is None:
        return []
    modes = lab_field_rule("wandb_mode")["choices"]
    if wandb_mode not in modes:
        raise ValueError(f"wandb_mode must be one of {list(modes)} (or None), got {wandb_mode!r}")
    return [f"{WANDB_MODE}={wandb_mode}"]


def run_cells(
    cells: list[Cell],
    overrides: Mapping[str, Any] | None = None,
    *,
    sweep_dir: str | Path,
    executor: Executor = "ray",
    address: str | None = None,
    num_cpus: int | None = None,
    fetch_policies: bool = False,
    progress: bool = True,
) -> SweepResult:
    """:func:`run_sweep` for cells :func:`plan_sweep` planned with these ``overrides`` and ``sweep_dir``: what a
    caller that printed the plan first runs, so that nothing is planned twice."""
    _check_executor(executor)
    stopped, interrupted_by = False, None
    with directory_lock(sweep_dir, purpose="sweep"), stop_signals():
        refuse_changed(cells, sweep_dir=Path(sweep_dir), config=lambda cell: short_run_config(overrides, cell.dotlist))
        todo = [cell for cell in cells if cell_status(cell) != "done"]
        warn_reruns(todo)
        warn_without_policy(cells)
        bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="sweep cells", disable=not progress)
        try:
            if executor == "serial":
                for cell in todo:
                    run_cell(cell, overrides, progress=progress and len(cells) == 1, node=node_record())
                    bar.update()
            else:
                run_on_ray(todo, overrides, run_cell=run_cell, address=address, num_cpus=num_cpus,
                           fetch_policies=fetch_policies, bar=bar)  # fmt: skip
        except KeyboardInterrupt as exc:  # a stop signal: what finished is kept and returned; the next run resumes
            stopped, interrupted_by = True, stopped_by(exc)
        finally:
            bar.close()
        try:
            with deferred_signals():  # the table is read whole; a first signal meanwhile counts as a stop
                table, cell_lines = collect(cells)
        except KeyboardInterrupt as exc:
            stopped, interrupted_by = True, stopped_by(exc)
    return SweepResult(
        sweep_dir=Path(sweep_dir), table=table, cells=cell_lines, stopped=stopped, interrupted_by=interrupted_by
    )


def _check_executor(executor: str) -> None:
    if executor not in ("ray", "serial"):
        raise ValueError(f"executor must be 'ray' or 'serial', got {executor!r}")


def run_cell(
    cell: Cell, overrides: Mapping[str, Any] | None, *, progress: bool = False, node: dict | None = None
) -> str:
    """Run one cell in this process and record its status (and ``node``: the node's id and host, for ``cell.json``);
    a failure is recorded, not raised; a stop (Ctrl-C, SIGTERM, SIGHUP) is recorded as ``interrupted`` (the next sweep
    reruns the cell) and raised again as the same kind after the run kept its finished steps."""
    run_dir = Path(cell.run_dir)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an interrupted or failed attempt (run_sweep warned): start the cell afresh
    run_dir.mkdir(parents=True)
    write_status(cell, "running", node=node)
    start = time.perf_counter()
    try:
        result = train(short_run_config(overrides, cell.dotlist), progress=progress, composed=True)
    except KeyboardInterrupt:  # stopped before its first step: nothing of the run to keep
        write_status(cell, "interrupted", wall_s=round(time.perf_counter() - start, 1), node=node)
        raise
    except Exception as exc:  # a cell's failure is data for the table, not a crash of the sweep
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        write_status(cell, "failed", error=mask_secrets(error, secret_values(cell.dotlist)), node=node)
        return "failed"
    if result.stopped:
        write_status(cell, "interrupted", wall_s=round(time.perf_counter() - start, 1), node=node)
        raise stop_exception(result.interrupted_by or "SIGINT")
    write_status(cell, "done", wall_s=round(time.perf_counter() - start, 1), node=node)
    return "done"
