"""``agl-lab lab [DIR] [jupyter options]``: JupyterLab on the notebooks, from a clone or a plain install.

The notebooks ship inside the package: ``agl_lab/notebooks`` is a link to the repository's ``notebooks/`` (the one
copy of each), which the wheel carries as files, as ``agl_lab/data`` carries ``data/sample_batch``. The command
copies each notebook into DIR (default ``./agl-lab-notebooks``) unless a file of that name is already there, so a
notebook you edited is never overwritten, and says which it copied and which it kept. Then it becomes ``jupyter
lab`` serving DIR (``os.execv``: the server is this very process, so Ctrl-C, SIGTERM, SIGKILL and a closed terminal
stop it as they would stop the command). Jupyter's own options pass through after DIR; a root folder of yours
(``--ServerApp.root_dir``, ``--notebook-dir``) replaces DIR as the server's root. The notebooks read their data from
the package (:func:`agl_lab.files.batch_io.sample_batch_path`), so a copy runs anywhere. ``make lab`` serves a
clone's ``notebooks/`` itself (nothing to copy).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agl_lab.cli.commands import Subcommand
from agl_lab.config.secrets import mask_secrets, secret_values

__all__ = ["COMMAND", "DEFAULT_FOLDER", "SHIPPED_NOTEBOOKS", "add_lab_arguments", "copy_notebooks", "run_lab_command"]

SHIPPED_NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
DEFAULT_FOLDER = "agl-lab-notebooks"
# jupyter server's options (and alias) for the folder it serves: one given by the user wins over DIR
_ROOT_OPTIONS = ("--ServerApp.root_dir", "--ServerApp.notebook_dir", "--notebook-dir")


def add_lab_arguments(lab: argparse.ArgumentParser) -> None:
    """``lab``'s argument (the rest goes to jupyter lab)."""
    lab.add_argument("folder", nargs="?", default=DEFAULT_FOLDER, metavar="DIR", help=f"default: ./{DEFAULT_FOLDER}")


def run_lab_command(args: argparse.Namespace) -> int:
    """Copy the notebooks, then become ``jupyter lab`` (never returns, but for an error before it starts)."""
    folder = Path(args.folder)
    if folder.resolve() == SHIPPED_NOTEBOOKS.resolve():  # a clone's notebooks/ (make lab): nothing to copy
        print(f"Serving agl_lab's own notebooks in {folder}/")
    else:
        copied, kept = copy_notebooks(folder)
        if copied:
            print(f"Copied into {folder}/: {' '.join(copied)}")
        if kept:
            never = "yours are never overwritten; delete one to get it anew"
            print(f"Kept in {folder}/ as they are ({never}): {' '.join(kept)}")
    command = [sys.executable, "-m", "jupyterlab"]
    if not any(arg.split("=", 1)[0] in _ROOT_OPTIONS for arg in args.other_args):
        command.append(f"--ServerApp.root_dir={folder.resolve()}")
    command += args.other_args
    print(mask_secrets(" ".join(command), secret_values(command)), flush=True)  # a token of yours shows as ***
    sys.stderr.flush()
    os.execv(sys.executable, command)  # the server takes this process's place: its signals are the server's


def copy_notebooks(folder: Path) -> tuple[list[str], list[str]]:
    """Copy the shipped notebooks into ``folder`` (made if absent); a file of the same name is kept.

    Returns the names copied and the names kept. Each copy is created exclusively, so not even a file that
    appears meanwhile is overwritten.
    """
    shipped = sorted(SHIPPED_NOTEBOOKS.glob("*.ipynb"))
    if not shipped:
        raise FileNotFoundError(f"no notebooks in {SHIPPED_NOTEBOOKS}: this agl_lab install lacks its package data")
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file: give a folder for the notebooks")
    folder.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for notebook in shipped:
        target = folder / notebook.name
        try:
            copy = open(target, "xb")  # "x": create it, never open an existing file
        except FileExistsError:
            kept.append(notebook.name)
            continue
        with copy:
            try:
                copy.write(notebook.read_bytes())
            except BaseException:  # a half-written copy would be "kept" next time: leave none
                target.unlink()
                raise
        copied.append(notebook.name)
    return copied, kept


COMMAND = Subcommand(
    name="lab",
    help="copy the notebooks into DIR (keeping yours) and open JupyterLab there; other options go to jupyter lab",
    description=(
        "Copies agl_lab's notebooks into DIR, except those already there (yours are never overwritten), and "
        "runs JupyterLab on DIR in this process: it stops with the command. Options after DIR go to jupyter "
        "lab (e.g. --no-browser --port=8889); --ServerApp.root_dir=... of yours replaces DIR as its root."
    ),
    usage="agl-lab lab [-h] [DIR] [jupyter lab options]",
    base=None,
    add_arguments=add_lab_arguments,
    run=run_lab_command,
    hands_on_unknown=True,  # no --debug of agl-lab's here: jupyter's own --debug passes through
)
