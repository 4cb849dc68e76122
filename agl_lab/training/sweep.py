"""Sweeps: a grid of settings × seeds, each cell a short lab run, on Ray (local cores or a cluster) or serially.

A single short run is noise; a curve is reproduced by running each setting over several seeds and comparing
bands. Each cell is a short run (``agl_lab.short_run_config``: Agent Lightning's defaults, the short-run
sizes, your ``overrides`` and ``dotlist``, then the setting's own dotlist) in its own run directory,
``<sweep_dir>/<setting>/seed-<seed>/``, with a ``cell.json`` recording its setting, seed, dotlist, status
(``running``, ``done``, ``failed`` with the error) and the hash of the resolved config it ran
(:mod:`agl_lab.training.sweep_cells`). Running the same sweep again skips the cells done with the same config and
reruns the rest (failed, interrupted, or changed: other steps, a setting redefined); a failing or damaged cell never
loses the others. The result is one long-form table (``history.COLUMNS``) over all finished cells.

A sweep holds its directory while it runs (:func:`agl_lab.training.locks.directory_lock`): a second sweep into it is
refused, never mixed in. Duplicate seeds, and settings that resolve to the same config, are refused before anything
runs (each would be trained and counted twice). SIGTERM stops a serial sweep like Ctrl-C: finished cells are kept.

A cell trains with ``lab.cpu_threads`` torch threads (1 by default) whichever executor runs it, so Ray and
serial sweeps give the same numbers for the same seeds. Ray workers register ``per_rollout_mean`` through
``agl_lab.ray_runtime_env``. A sweep uses a Ray already running (:func:`agl_lab.training.ray_start.start_ray` starts
it early, with warm workers) and leaves it running; one it starts itself it shuts down at its end.
Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

import numbers
import re
import shutil
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from tqdm.auto import tqdm

from agl_lab.config.compose import short_run_config
from agl_lab.config.doctor import bad_keys_and_values, raise_for_errors
from agl_lab.config.lab_config import lab_field_rule
from agl_lab.config.secrets import mask_secrets, secret_values
from agl_lab.training.locks import directory_lock
from agl_lab.training.process_state import Terminated, sigterm_as_interrupt
from agl_lab.training.ray_start import start_ray
from agl_lab.training.sweep_cells import Cell, cell_status, collect, config_sha256, write_status
from agl_lab.training.trainer import train

__all__ = ["Cell", "SweepResult", "plan_sweep", "run_cell", "run_sweep", "shared_ray"]

Executor = Literal["ray", "serial"]


@dataclass
class SweepResult:
    sweep_dir: Path
    table: pd.DataFrame  # long form: source, run, setting, seed, step, metric, value (finished cells)
    cells: pd.DataFrame  # one line per cell: setting, seed, status, error, wall_s, run_dir
    stopped: bool = False  # Ctrl-C or SIGTERM ended the sweep early; the table holds the cells that finished
    interrupted_by: str | None = None  # "SIGINT" (Ctrl-C) or "SIGTERM"
    figures: dict[str, Path] = field(default_factory=dict)  # figures saved from the table (the demo saves them)
    effects: pd.DataFrame | None = None  # compare_settings against the baseline, once save_results has run


def plan_sweep(
    settings: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    *,
    sweep_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    dotlist: Sequence[str] = (),
) -> list[Cell]:
    """The cells of a sweep; every cell's config is composed now, and an unknown key or value (a typo) refused, so
    a bad setting fails before anything runs. What the doctor refuses of known values fails that cell alone.

    Refused too: duplicate seeds, seeds that are not integers >= 0, setting names that differ only in case (one
    directory on many file systems), and settings that resolve to the same config.
    """
    if not settings:
        raise ValueError("settings is empty: give at least one {name: [key=value, ...]}")
    seeds = _checked_seeds(seeds)
    root = Path(sweep_dir)
    cells, names, configs = [], {}, {}
    for name, items in settings.items():
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise ValueError(f"setting name {name!r} must be letters, digits or _ . + - (it names a directory)")
        if name.lower() in names:
            raise ValueError(f"settings {names[name.lower()]!r} and {name!r} differ only in case: rename one")
        names[name.lower()] = name
        if isinstance(items, str):
            raise ValueError(f"setting {name!r} must be a list of key=value items, got the string {items!r}")
        for seed in seeds:
            run_dir = root / name / f"seed-{seed}"
            cell_dotlist = (
                *dotlist,
                *items,
                f"lab.seed={seed}",
                f"lab.run_dir={run_dir}",
                f"trainer.experiment_name={name}",
            )
            cfg = short_run_config(overrides, cell_dotlist)  # raises ConfigError naming the problem
            if seed == seeds[0]:  # the setting's config without its name (names flow into other keys)
                raise_for_errors(bad_keys_and_values(cfg))  # a typo'd value; the doctor's other errors fail the cell
                unnamed = short_run_config(overrides, (*dotlist, *items, f"lab.seed={seed}"))
                same = configs.setdefault(config_sha256(unnamed), name)
                if same != name:
                    raise ValueError(
                        f"settings {same!r} and {name!r} resolve to the same config: each cell would be trained "
                        "twice and counted twice; drop one, or make them differ"
                    )
            cells.append(
                Cell(
                    setting=name,
                    seed=seed,
                    dotlist=cell_dotlist,
                    run_dir=str(run_dir),
                    config_sha256=config_sha256(cfg),
                )
            )
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
    stopped, interrupted_by = False, None
    with directory_lock(sweep_dir, purpose="sweep"), sigterm_as_interrupt():
        todo = [cell for cell in cells if cell_status(cell) != "done"]
        bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="sweep cells", disable=not progress)
        try:
            if executor == "serial":
                for cell in todo:
                    run_cell(cell, overrides, progress=progress and len(cells) == 1)
                    bar.update()
            else:
                _run_on_ray(todo, overrides, address=address, num_cpus=num_cpus, bar=bar)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: what finished is kept and returned; the next run resumes
            stopped, interrupted_by = True, "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        finally:
            bar.close()
        table, cell_lines = collect(cells)
    return SweepResult(
        sweep_dir=Path(sweep_dir), table=table, cells=cell_lines, stopped=stopped, interrupted_by=interrupted_by
    )


def run_cell(cell: Cell, overrides: Mapping[str, Any] | None, *, progress: bool = False) -> str:
    """Run one cell in this process and record its status; a failure is recorded, not raised."""
    run_dir = Path(cell.run_dir)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an interrupted, failed or changed attempt: start the cell afresh
    run_dir.mkdir(parents=True)
    write_status(cell, "running")
    start = time.perf_counter()
    try:
        result = train(short_run_config(overrides, cell.dotlist), progress=progress)
    except Exception as exc:  # a cell's failure is data for the table, not a crash of the sweep
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        write_status(cell, "failed", error=mask_secrets(error, secret_values(cell.dotlist)))
        return "failed"
    if result.stopped:  # Ctrl-C or SIGTERM: the cell stays "running", so the next sweep reruns it
        raise KeyboardInterrupt
    write_status(cell, "done", wall_s=round(time.perf_counter() - start, 1))
    return "done"


@contextmanager
def shared_ray() -> Iterator[None]:
    """Ray sweeps inside the block share one Ray instance: the first that needs Ray starts it, the block's end shuts
    it down (a reproduction's pilot and extension: a second start can time out on a loaded machine). A Ray instance
    already running is used as it is and stays yours."""
    with ExitStack() as stack:
        _SHARED.append(stack)
        try:
            yield
        finally:
            _SHARED.pop()


_SHARED: list[ExitStack] = []  # the open shared_ray() blocks of this process, innermost last


def _run_on_ray(cells: list[Cell], overrides, *, address: str | None, num_cpus: int | None, bar) -> None:
    import ray

    if not cells:
        return
    started_here = start_ray(address=address, num_cpus=num_cpus)  # False: a Ray already started (start_ray's)
    if started_here:
        if _SHARED:  # it outlives this sweep, until the shared_ray() block ends
            _SHARED[-1].callback(ray.shutdown)
            started_here = False
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
                    error = mask_secrets(f"Ray task failed: {type(exc).__name__}: {exc}", secret_values(cell.dotlist))
                    write_status(cell, "failed", error=error)
                bar.update()
    finally:
        if started_here:  # a Ray instance the sweep started goes with it; one you started stays yours
            ray.shutdown()


def _checked_seeds(seeds: Sequence[int]) -> list[int]:
    if isinstance(seeds, str | bytes) or not seeds:
        raise ValueError(
            "seeds is empty: give at least one seed" if not seeds else f"seeds must be a list, got {seeds!r}"
        )
    out = []
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= 2**32 - 1:
            raise ValueError(f"seeds must be integers in [0, 2**32-1] (lab.seed), got {seed!r}")
        out.append(int(seed))
    repeated = sorted({seed for seed in out if out.count(seed) > 1})
    if repeated:
        raise ValueError(f"seeds {repeated} appear more than once: each would be trained twice and counted twice")
    return out
