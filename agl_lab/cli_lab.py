"""``agl-lab lab``: JupyterLab on the repository's notebooks; other options go to ``jupyter lab``."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

__all__ = ["add_lab_parser", "run_lab_command"]


def add_lab_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``lab`` among the ``agl-lab`` subcommands."""
    lab = commands.add_parser(
        "lab",
        parents=[],  # no --debug of agl-lab's here: jupyter's own --debug passes through
        help="open JupyterLab on the repository's notebooks (other options go to jupyter lab)",
    )
    lab.set_defaults(run=run_lab_command, other_args=[])


def run_lab_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab lab``: jupyter lab's exit status, 2 without a clone's notebooks/."""
    return _lab(args.other_args)


def _lab(jupyter_args: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    if not (root / "notebooks").is_dir():
        print(f"no notebooks/ next to the package at {root}: run from a clone (pip install -e .)", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    command += ["--LabApp.default_url=/lab/tree/notebooks", *jupyter_args]
    print(" ".join(command))
    return subprocess.call(command)
