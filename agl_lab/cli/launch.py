"""``agl-lab launch [--config FILE.yaml] [key.path=value ...]``: the experiment handed to Agent Lightning's trainer.

Composes from base ``agl`` (Agent Lightning's defaults alone: what its trainer gets; then the ``--config`` file, as
``agl-lab check --config`` reads it, then the items), stops on a doctor's error,
exports overrides, dotlist and a launch script (:mod:`agl_lab.config.handoff`) and runs the script when
``agentlightning`` can run here, else says what to install (exit 3). ``--record DIR``: the script trains through
agl_lab's recorder (:mod:`agl_lab.training.agl_recorder`), which records each step's rows into ``DIR``.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from agl_lab.cli.commands import Subcommand
from agl_lab.cli.help import print_base, print_settings_and_findings
from agl_lab.config.bases import BASES

__all__ = ["COMMAND", "add_launch_arguments", "run_launch_command"]


def add_launch_arguments(launch: argparse.ArgumentParser) -> None:
    """``launch``'s arguments."""
    launch.add_argument("dotlist", nargs="*", help="Hydra overrides over Agent Lightning's defaults")
    launch.add_argument("--base", choices=tuple(BASES), default=COMMAND.base, help="compose from this base")
    launch.add_argument("--config", default=None, metavar="FILE.yaml", help="a YAML file read before the items")
    launch.add_argument("--name", default="experiment", help="names the launch script (launch_<name>.py)")
    launch.add_argument("--out", default=None, help="export folder (default: agl_export/<name>)")
    launch.add_argument(
        "--record",
        default=None,
        metavar="DIR",
        help="the run records each step's trained rows into DIR and logs agl_lab's diagnostics (agl_lab's recorder)",
    )


def run_launch_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab launch``: the trainer's exit status, 1 on a doctor's error, 3 when it cannot run here."""
    return _launch(args.dotlist, name=args.name, out=args.out, base=args.base, record=args.record, config=args.config)


def _launch(
    dotlist: list[str], *, name: str, out: str | None, base: str, record: str | None, config: str | None
) -> int:
    from agl_lab.config.compose import compose_from
    from agl_lab.config.handoff import INSTALL_HINT, export_experiment, launch_blockers

    cfg = compose_from(base, dotlist=dotlist, config_file=config)
    print_base(base)
    if not print_settings_and_findings(cfg, trainer=BASES[base].trainer):
        file = f" --config {config}" if config else ""
        print(f"Nothing exported. `agl-lab check --base {base}{file}` with the same dotlist shows the same findings.")
        return 1
    out_dir = Path(out) if out else Path("agl_export") / name
    export = export_experiment(cfg, out_dir, name=name, record=record)
    script = out_dir / f"launch_{name}.py"
    print(f"\nExported to {out_dir}/: overrides.yaml, dotlist.txt, {script.name}")
    print("dotlist:", shlex.join(export.dotlist) or "(Agent Lightning's defaults)")
    if record:
        print(
            f"recording: {script.name} runs Agent Lightning's trainer through agl_lab's recorder: each step's rows to "
            f"{record}/<step>.parquet, lab/diagnostics/* with the run's metrics (agl_lab must be installed where Ray "
            "runs the trainer)"
        )
    blockers = launch_blockers()
    if blockers:
        # the command is for copying into a shell: a folder named with a space or a quote stays one argument
        print("\n" + INSTALL_HINT.format(script=shlex.quote(str(script)), reasons="; ".join(blockers)), file=sys.stderr)
        return 3
    print(f"\nAgent Lightning's trainer can run here: running {script} (the key comes from $AGL_KEY)")
    return subprocess.call([sys.executable, str(script)])


COMMAND = Subcommand(
    name="launch",
    help="export the experiment for Agent Lightning and run it there if possible",
    base="agl",
    add_arguments=add_launch_arguments,
    run=run_launch_command,
)
