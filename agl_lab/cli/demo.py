"""``agl-lab demo [--out DIR] [key.path=value ...]``: the settings that matter, trained side by side.

One short run per setting of :data:`agl_lab.config.settings.DEMO_SETTINGS` (base ``short-run``, same seed), then
figures and a summary table (:mod:`agl_lab.studies.demo`); prints the output folder last.
"""

from __future__ import annotations

import argparse
import sys

from agl_lab.cli.commands import Subcommand
from agl_lab.cli.help import print_base
from agl_lab.core.keys import SEED
from agl_lab.exit_codes import stopped

__all__ = ["COMMAND", "add_demo_arguments", "run_demo_command"]


def add_demo_arguments(demo: argparse.ArgumentParser) -> None:
    """``demo``'s arguments."""
    demo.add_argument("dotlist", nargs="*", help=f"Hydra overrides for every run, e.g. {SEED}=1")
    demo.add_argument("--out", default=None, help="output folder (default: a fresh runs/demo-<time>/)")


def run_demo_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab demo``: 0 when every run finished, 1 when one failed, 129/130/143 when stopped."""
    return _demo(args.dotlist, out=args.out)


def _demo(dotlist: list[str], *, out: str | None) -> int:
    from agl_lab.config.settings import DEMO_SETTINGS
    from agl_lab.curves.summary import number
    from agl_lab.curves.verdicts import effects_text
    from agl_lab.studies.demo import demo_summary, run_demo

    print_base(COMMAND.base)
    print("Settings, one short run each:")
    for name, items in DEMO_SETTINGS.items():
        print(f"  {name:<14} {' '.join(items)}")
    result = run_demo(out_dir=out, dotlist=dotlist)
    if not result.table.empty:
        summary = demo_summary(result).drop(columns=["n_seeds", "steps"], errors="ignore")
        print("\n" + summary.to_string(index=False, float_format=number))
    if result.effects is not None:
        print("\n" + effects_text(result.effects))
    print("\nWritten:")
    for path in result.figures.values():
        print(f"  {path}")
    print(result.sweep_dir.resolve())
    if result.stopped:
        return stopped(result.interrupted_by or "SIGINT")
    failed = result.cells[result.cells.status != "done"]
    for cell in failed.itertuples():
        print(f"agl-lab: {cell.setting} seed {cell.seed} {cell.status}: {cell.error}", file=sys.stderr)
    return 1 if len(failed) else 0


COMMAND = Subcommand(
    name="demo",
    help="train the settings that matter side by side; write figures and a table",
    base="short-run",
    add_arguments=add_demo_arguments,
    run=run_demo_command,
)
