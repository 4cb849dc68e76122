"""``agl-lab reproduce NAME``: run a prepared reproduction of a reported effect and say whether it reproduced.

The experiments, their claims, sources and checks are :data:`agl_lab.studies.experiments.EXPERIMENTS` (``agl-lab
reproduce --list`` prints them). Each runs its settings over ``--pilot-seeds`` seeds (Ray in parallel, or
``--executor serial``), extends once to the seeds its unresolved checks ask for (capped by ``--max-seeds``), and
writes ``report.md``, ``effects.csv`` and figures into ``runs/reproduce-NAME/`` (``--out``); the same command again
skips the finished runs. It prints each check's verdict line, whether the claim reproduced, and the folder last. A
claim that does not reproduce is a result, not an error: exit 0; a failed run: 1; Ctrl-C 130, SIGTERM 143, SIGHUP 129.
``--report-only`` trains nothing: it redraws the report, tables and figures from a record (``--record DIR``; default
the one committed in the package, ``data/studies/NAME``), judging the checks anew.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agl_lab.cli.commands import Subcommand
from agl_lab.cli.help import add_run_options, print_base
from agl_lab.exit_codes import stopped

__all__ = ["COMMAND", "add_reproduce_arguments", "run_reproduce_command"]


def add_reproduce_arguments(reproduce: argparse.ArgumentParser) -> None:
    """``reproduce``'s arguments."""
    reproduce.add_argument("name", nargs="?", help="the experiment (agl-lab reproduce --list shows them)")
    reproduce.add_argument("dotlist", nargs="*", help="key=value for every run, after the experiment's own")
    reproduce.add_argument("--list", action="store_true", help="print the experiments and exit")
    reproduce.add_argument("--pilot-seeds", type=int, default=3, help="seeds of the first round (default 3, >= 2)")
    reproduce.add_argument("--max-seeds", type=int, default=10, help="at most this many seeds in all (default 10)")
    reproduce.add_argument("--out", default=None, help="folder (default runs/reproduce-NAME/); reused: resumes")
    reproduce.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: redraw the report from a record (--record; default the committed data/studies/NAME)",
    )
    reproduce.add_argument("--record", default=None, help="with --report-only: a record/ folder a reproduction wrote")
    add_run_options(reproduce)  # --executor, --wandb-mode


def run_reproduce_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab reproduce``; 0 when every run finished (reproduced or not), 1 when a run failed."""
    from agl_lab.studies.experiments import EXPERIMENTS
    from agl_lab.studies.reproduce import redraw_reproduction, run_reproduction
    from agl_lab.studies.reproduce_report import study_verdict

    if args.list:
        for experiment in EXPERIMENTS.values():
            print(f"{experiment.name}\n  claim: {experiment.claim}\n  source: {experiment.source}")
            print(f"  settings: {', '.join(experiment.settings)}")
        return 0
    if args.name not in EXPERIMENTS:
        given = f"unknown experiment {args.name!r}" if args.name else "no experiment named (agl-lab reproduce NAME)"
        raise ValueError(f"{given}; choose one of {list(EXPERIMENTS)} (--list shows their claims)")
    experiment = EXPERIMENTS[args.name]
    if args.record and not args.report_only:
        raise ValueError("--record names the record to redraw a report from: give it with --report-only")
    if args.report_only and args.dotlist:
        raise ValueError(f"--report-only trains nothing, so key=value items ({' '.join(args.dotlist)}) do nothing")
    if not args.report_only:
        print_base(COMMAND.base)
    kind = "Study" if experiment.smallest_effect is not None and not experiment.checks else "Reproduction"
    print(f"{kind} {experiment.name}: {experiment.claim}\n  source: {experiment.source}")
    if args.report_only:
        out = Path(args.out) if args.out else Path("runs") / f"reproduce-{args.name}-report"
        result = redraw_reproduction(args.name, record=args.record, out_dir=out)
        meta = result.meta
        print(f"  recorded {meta.get('date')} at commit {meta.get('commit')} on {meta.get('machine')}")
    else:
        out = Path(args.out) if args.out else Path("runs") / f"reproduce-{args.name}"
        result = run_reproduction(
            args.name,
            pilot_seeds=args.pilot_seeds,
            max_seeds=args.max_seeds,
            out_dir=out,
            dotlist=args.dotlist,
            executor=args.executor,
            wandb_mode=args.wandb_mode,
        )
    sweep = result.sweep
    if result.is_study:
        print(f"\nComparisons ({len(result.seeds)} seeds):")
        for row in result.shown.itertuples():
            print(f"  {row.metric} ({row.window}): {row.verdict}")
        print(f"\n{experiment.name}: {study_verdict(result)}")
    elif len(result.checks):
        print(f"\nChecks ({len(result.seeds)} seeds, {result.wall_s:.0f} s):")
        for check in result.checks.itertuples():
            status = "passed" if check.passed else f"not passed: {check.outcome}"
            print(f"  [{status}] {check.metric} ({check.window}): {check.verdict}")
        if len(result.shown):
            print("Also measured (no claim):")
            for shown in result.shown.itertuples():
                print(f"  {shown.metric} ({shown.window}): {shown.verdict}")
        print(f"\n{experiment.name}: {'reproduced' if result.reproduced else 'NOT reproduced'}")
    failed = sweep.cells[sweep.cells.status != "done"]
    if args.report_only:
        failed = failed.iloc[:0]  # a record's unfinished runs are the report's to name; nothing ran now
    for cell in failed.itertuples():
        print(f"not finished: {cell.setting} seed {cell.seed} ({cell.status}): {cell.error or ''}".rstrip(": "))
    if result.figures:
        print("\nWritten:")
        for path in result.figures.values():
            print(f"  {path}")
    print(out.resolve())
    if sweep.stopped:
        return stopped(sweep.interrupted_by or "SIGINT")
    return 1 if len(failed) else 0


COMMAND = Subcommand(
    name="reproduce",
    help="reproduce a reported effect over as many seeds as it needs; write report.md and figures",
    description=(
        "Runs a prepared experiment (--list shows them: claim, source, settings) over a pilot of seeds, extends "
        "once to the seeds its unresolved checks ask for (at most --max-seeds), and writes report.md, "
        "effects.csv and figures into runs/reproduce-NAME/. Reports whether the claim reproduced, with numbers."
    ),
    epilog="examples: agl-lab reproduce update-cap --max-seeds 6; agl-lab reproduce real-model-settings --report-only",
    base="short-run",
    add_arguments=add_reproduce_arguments,
    run=run_reproduce_command,
)
