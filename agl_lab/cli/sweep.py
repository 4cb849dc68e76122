"""``agl-lab sweep``: settings × seeds from the command line, written like the demo (figures, summary table).

``agl-lab sweep algorithm.enable_rollout_level_advantage=true,false --seeds 0 1 2`` trains every combination of the
values given as ``key=a,b`` (:func:`agl_lab.config.grid.sweep_grid`) at every seed (``--seeds 0 1 2``, ``0,1,2``
or ``0-4``: :func:`seed_list`); single-valued items apply to every run. Without an item of several values it sweeps
the demo's settings (:data:`agl_lab.config.settings.DEMO_SETTINGS`): notebook 04's sweep from a shell. Each run
composes from the short-run preset (base ``short-run``) like ``agl-lab train``. The sweep is
:func:`agl_lab.run_sweep`: the same command with the same ``--out`` skips finished runs and reruns failed or
interrupted ones. It writes :func:`agl_lab.studies.demo.save_results`' panels (bands across seeds),
``summary.csv``/``summary.md`` and ``effects.csv``/``effects.md`` (each setting against ``--baseline``, paired by
seed: success over the last 20% of steps; default :func:`agl_lab.curves.effects.default_baseline`: ``both_off`` when
swept, else the first setting), prints the summary and one verdict line per setting, and prints the sweep's folder
last. ``--address HOST:PORT`` runs the cells on an existing Ray cluster (:mod:`agl_lab.studies.sweep_ray`: each cell's
files come back through Ray, its policy with ``--fetch-policies``); the address is never printed nor written.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from agl_lab.cli.commands import Subcommand
from agl_lab.cli.help import add_run_options, print_base
from agl_lab.config.grid import MAX_SWEEP_CELLS, too_many_cells
from agl_lab.config.secrets import redact_argv
from agl_lab.core.keys import MAX_PPO_UPDATE_TIMES, ROLLOUT_LEVEL, SEED
from agl_lab.curves.band_kinds import BAND_LABELS
from agl_lab.exit_codes import stopped

__all__ = ["COMMAND", "DEFAULT_SEEDS", "add_sweep_arguments", "run_sweep_command", "seed_list"]

DEFAULT_SEEDS = (0, 1, 2)

_EXAMPLE = f"agl-lab sweep {ROLLOUT_LEVEL}=true,false {MAX_PPO_UPDATE_TIMES}=null,2"


def add_sweep_arguments(sweep: argparse.ArgumentParser) -> None:
    """``sweep``'s arguments."""
    sweep.add_argument(
        "dotlist", nargs="*", help="key=value for every run; key=a,b (several values) makes one setting per value"
    )
    sweep.add_argument(
        "--seeds",
        type=seed_list,
        nargs="+",
        default=None,
        metavar="SEEDS",
        help=f"{SEED} of each run: 0 1 2, 0,1,2 or a range 0-4 (default {' '.join(map(str, DEFAULT_SEEDS))})",
    )
    sweep.add_argument("--out", default=None, help="sweep folder (default: a fresh sweeps/<time>/); reused: resumes")
    add_run_options(sweep)  # --executor, --wandb-mode
    sweep.add_argument(
        "--address",
        default=None,
        metavar="HOST:PORT",
        help="run the cells on the Ray cluster whose head is at HOST:PORT (each cell's files come back here; "
        "never written to any file)",
    )
    sweep.add_argument(
        "--fetch-policies",
        action="store_true",
        help="with --address: bring each cell's trained policy/ back too (default: it stays on its node)",
    )
    bands = "; ".join(f"{name} = {label}" for name, label in BAND_LABELS.items())
    sweep.add_argument(
        "--band", choices=tuple(BAND_LABELS), default="ci95", help="across seeds: " + bands.replace("%", "%%")
    )
    sweep.add_argument(
        "--baseline",
        default=None,
        help="the setting every other is compared with, paired by seed (default: both_off when swept, else the first)",
    )


def run_sweep_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab sweep``; 0 when every run finished, 1 when a run failed (the others are kept), 130 on Ctrl-C,
    143 on SIGTERM and 129 on SIGHUP (after the summary of the cells that finished)."""
    from agl_lab.config.grid import sweep_grid
    from agl_lab.config.settings import DEMO_SETTINGS
    from agl_lab.curves.effects import default_baseline
    from agl_lab.curves.summary import number
    from agl_lab.curves.verdicts import effects_text
    from agl_lab.studies.demo import demo_summary, save_results
    from agl_lab.studies.sweep import run_cells, wandb_mode_items
    from agl_lab.studies.sweep_plan import plan_sweep

    seeds = [seed for given in args.seeds for seed in given] if args.seeds else list(DEFAULT_SEEDS)
    settings, common = sweep_grid(args.dotlist)
    if not settings:
        settings = {name: tuple(items) for name, items in DEMO_SETTINGS.items()}
    baseline = args.baseline or default_baseline(list(settings))
    if baseline not in settings:
        raise ValueError(f"--baseline {baseline!r} is not a setting of this sweep; choose one of {list(settings)}")
    if args.address is not None and args.executor != "ray":
        raise ValueError("--address names a Ray cluster: use it with --executor ray (the default)")
    out = Path(args.out) if args.out else Path("sweeps") / f"{datetime.datetime.now():%Y%m%d-%H%M%S}"
    print_base(COMMAND.base)
    cells = plan_sweep(settings, seeds, sweep_dir=out, dotlist=[*common, *wandb_mode_items(args.wandb_mode)])
    listed = " ".join(map(str, seeds))
    where = "ray cluster (--address)" if args.address else args.executor
    print(f"Sweep: {len(settings)} settings x {len(seeds)} seeds ({listed}), {where}, in {out}/")
    width = max(len(name) for name in settings)
    for name, items in settings.items():
        print(f"  {name:<{width}}  {' '.join(items) or '(the base as it is)'}")
    if common:
        print(f"  every run: {' '.join(redact_argv(common))}")
    result = run_cells(  # the cells planned (every setting checked) before any line above was printed
        cells, sweep_dir=out, executor=args.executor, address=args.address, fetch_policies=args.fetch_policies
    )
    save_results(result, out, band=args.band, baseline=baseline)
    failed = result.cells[result.cells.status != "done"]
    for cell in failed.itertuples():
        print(f"not finished: {cell.setting} seed {cell.seed} ({cell.status}): {cell.error or ''}".rstrip(": "))
    if not result.table.empty:
        summary = demo_summary(result).drop(columns=["steps"], errors="ignore")
        print("\n" + summary.to_string(index=False, float_format=number))
        if result.effects is not None:
            print("\n" + effects_text(result.effects))
        print("\nWritten:")
        for path in result.figures.values():
            print(f"  {path}")
    print(out.resolve())
    if result.stopped:
        return stopped(result.interrupted_by or "SIGINT")
    return 1 if len(failed) else 0


def seed_list(text: str) -> list[int]:
    """One ``--seeds`` value as seeds: ``3``, ``0,1,2`` or the range ``0-4`` (both ends included), or a mix; more
    than a sweep holds (:data:`agl_lab.config.grid.MAX_SWEEP_CELLS`) is refused before a range is listed."""
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a seed: give integers (0 1 2), a list (0,1,2) or a range (0-4)"
            ) from None
        if last < first:
            raise argparse.ArgumentTypeError(f"{part!r} is an empty range: the first seed comes first (0-4)")
        if len(seeds) + last - first + 1 > MAX_SWEEP_CELLS:
            raise argparse.ArgumentTypeError(f"{text}: {too_many_cells('seeds', len(seeds) + last - first + 1)}")
        seeds += range(first, last + 1)
    return seeds


COMMAND = Subcommand(
    name="sweep",
    help="settings x seeds (key=a,b makes one setting per value); figures with bands and a summary table",
    description=(
        "Trains every combination of the values given as key=a,b at every seed; key=value items apply to every "
        "run. Without a key=a,b item it sweeps the settings agl-lab demo trains side by side. Each run "
        "composes from base short-run, like agl-lab train. The same command with the same --out skips finished "
        "runs and reruns failed or interrupted ones (a changed config for finished runs is refused, exit 4). "
        "Writes the demo's panels (bands across seeds), summary.csv, summary.md, cells.csv (the cells they cover) "
        "and effects.csv/effects.md (each setting minus --baseline, paired by seed) into the sweep "
        "folder, prints the summary and the effects, and prints the folder last."
    ),
    epilog=f"example: {_EXAMPLE} --seeds 0 1 2",
    base="short-run",
    add_arguments=add_sweep_arguments,
    run=run_sweep_command,
)
