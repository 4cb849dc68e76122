"""``agl-lab sweep``: settings × seeds from the command line, written like the demo (figures, summary table).

``agl-lab sweep algorithm.enable_rollout_level_advantage=true,false --seeds 0 1 2`` trains every combination of the
values given as ``key=a,b`` (:func:`agl_lab.config.grid.sweep_grid`) at every seed; single-valued items apply to
every run. Without an item of several values it sweeps the demo's settings
(:data:`agl_lab.config.settings.DEMO_SETTINGS`): notebook 04's sweep from a shell. Each run composes from the
short-run preset (base ``short-run``) like ``agl-lab train``. The sweep is :func:`agl_lab.run_sweep`: the same
command with the same ``--out`` skips finished runs and reruns failed or interrupted ones; a changed config for
finished runs is refused (exit 4), never retrained over them. It writes
:func:`agl_lab.training.demo.save_results`' panels (bands across seeds) and ``summary.csv``/``summary.md``, and
prints the sweep's folder last.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from agl_lab.cli_help import SUBCOMMAND_BASES, print_base
from agl_lab.config.grid import sweep_grid
from agl_lab.config.secrets import redact_argv
from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.curves.bands import BAND_LABELS
from agl_lab.curves.summary import number
from agl_lab.exit_codes import stopped

__all__ = ["add_sweep_parser", "run_sweep_command"]

_EXAMPLE = (
    "agl-lab sweep algorithm.enable_rollout_level_advantage=true,false agentlightning.max_ppo_update_times=null,2"
)


def add_sweep_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``sweep`` among the ``agl-lab`` subcommands."""
    sweep = commands.add_parser(
        "sweep",
        help="settings x seeds (key=a,b makes one setting per value); figures with bands and a summary table",
        description=(
            "Trains every combination of the values given as key=a,b at every seed; key=value items apply to every "
            f"run. Without a key=a,b item it sweeps the demo's settings ({', '.join(DEMO_SETTINGS)}). Each run "
            "composes from base short-run, like agl-lab train. The same command with the same --out skips finished "
            "runs and reruns failed or interrupted ones (a changed config for finished runs is refused, exit 4). "
            "Writes the demo's panels (bands across seeds), summary.csv, summary.md and cells.csv (the cells they "
            "cover) into the sweep folder and prints the folder last."
        ),
        epilog=f"example: {_EXAMPLE} --seeds 0 1 2",
    )
    sweep.add_argument(
        "dotlist", nargs="*", help="key=value for every run; key=a,b (several values) makes one setting per value"
    )
    sweep.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="lab.seed of each run (default 0 1 2)")
    sweep.add_argument("--out", default=None, help="sweep folder (default: a fresh sweeps/<time>/); reused: resumes")
    sweep.add_argument(
        "--executor", choices=("ray", "serial"), default="ray", help="ray: runs in parallel on the cores (default)"
    )
    bands = "; ".join(f"{name} = {label}" for name, label in BAND_LABELS.items())
    sweep.add_argument(
        "--band", choices=tuple(BAND_LABELS), default="ci95", help="across seeds: " + bands.replace("%", "%%")
    )
    sweep.add_argument(
        "--wandb-mode",
        choices=("online", "offline", "disabled"),
        default=None,
        help="every run's lab.wandb_mode (default auto: $WANDB_MODE, else offline unless a W&B key is configured)",
    )


def run_sweep_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab sweep``; 0 when every run finished, 1 when a run failed (the others are kept), 130 on Ctrl-C and
    143 on SIGTERM (after the summary of the cells that finished)."""
    from agl_lab.training.demo import demo_summary, save_results
    from agl_lab.training.sweep import run_sweep
    from agl_lab.training.sweep_plan import plan_sweep

    settings, common = sweep_grid(args.dotlist)
    if not settings:
        settings = {name: tuple(items) for name, items in DEMO_SETTINGS.items()}
    out = Path(args.out) if args.out else Path("sweeps") / f"{datetime.datetime.now():%Y%m%d-%H%M%S}"
    print_base(SUBCOMMAND_BASES["sweep"])
    plan_sweep(settings, args.seeds, sweep_dir=out, dotlist=common)  # every setting checked before any cell runs
    seeds = " ".join(str(s) for s in args.seeds)
    print(f"Sweep: {len(settings)} settings x {len(args.seeds)} seeds ({seeds}), {args.executor}, in {out}/")
    width = max(len(name) for name in settings)
    for name, items in settings.items():
        print(f"  {name:<{width}}  {' '.join(items) or '(the base as it is)'}")
    if common:
        print(f"  every run: {' '.join(redact_argv(common))}")
    result = run_sweep(
        settings, args.seeds, sweep_dir=out, dotlist=common, executor=args.executor, wandb_mode=args.wandb_mode
    )
    save_results(result, out, band=args.band)
    failed = result.cells[result.cells.status != "done"]
    for cell in failed.itertuples():
        print(f"not finished: {cell.setting} seed {cell.seed} ({cell.status}): {cell.error or ''}".rstrip(": "))
    if not result.table.empty:
        summary = demo_summary(result).drop(columns=["steps"], errors="ignore")
        print("\n" + summary.to_string(index=False, float_format=number))
        print("\nWritten:")
        for path in result.figures.values():
            print(f"  {path}")
    print(out.resolve())
    if result.stopped:
        return stopped(result.interrupted_by or "SIGINT")
    return 1 if len(failed) else 0
