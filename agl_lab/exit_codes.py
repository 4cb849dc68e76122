"""What ``agl-lab`` does with every failure: one line on stderr, secrets masked, and an exit code saying what kind.

A researcher (or a script, a scheduler) reads the last line and the exit code; the traceback is for whoever debugs
agl_lab, so it is printed only with ``--debug``. :data:`EXIT_CODES` is the one table of codes: ``agl-lab --help``
prints it and the docs' CLI page (docs/cli.md) lists it.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable
from contextlib import contextmanager

from agl_lab.config.secrets import mask_secrets, masked_output
from agl_lab.training.locks import DirectoryBusyError
from agl_lab.training.process_state import exit_protected, signal_exit_code, stop_signals, stopped_by, stopped_line

__all__ = ["CLOSED_PIPE", "EXCEPTION_CODES", "EXIT_CODES", "LAB_EXTRA_MODULES", "TrainedNothingError", "exit_code"]
__all__ += ["help_epilog", "output_closed", "report_errors", "stopped"]

CLOSED_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`
# The modules of pyproject.toml's `lab` extra (the base install records Agent Lightning runs and checks configs without
# them); tests/test_exit_codes.py holds this to the extra's packages
LAB_EXTRA_MODULES = frozenset(
    {"scipy", "statsmodels", "rliable", "matplotlib", "ipywidgets", "plotly", "anywidget", "ipykernel", "jupyterlab"}
    | {"jsonschema", "wandb", "gguf", "peft"}
)
EXIT_CODES = {
    0: "done",
    1: "the config doctor found an error (nothing ran; its findings are on stderr), or a run of a sweep or "
    "reproduction failed (the others are kept)",
    2: "a bad command line, config file, key or value, or several values outside `agl-lab sweep` (nothing was created)",
    3: "a package it needs is not installed (the line names it and what to install: the lab's extra, "
    "pip install 'agl_lab[lab]'); launch: exported, but Agent Lightning's trainer cannot run here",
    4: "the run or sweep directory is taken: it holds a run, another run or sweep is writing to it, or it holds a "
    "sweep's finished cells of another config",
    5: "a file or folder could not be read or written (missing model path or file, read-only or full disk)",
    6: "the run trained nothing: every step was skipped (its files are kept)",
    70: "an unexpected error (a bug in agl_lab or below it); --debug shows the traceback",
    129: "stopped by SIGHUP (a closed terminal or ssh session); finished steps are kept",
    130: "stopped by Ctrl-C (SIGINT), also while it starts; finished steps are kept",
    141: "its output went into a pipe that closed (`agl-lab check` into `head -1`): it stopped there, quietly",
    143: "stopped by SIGTERM (timeout, a scheduler, docker stop); finished steps are kept",
}
_STOPPED_BY = {signal_exit_code(name): name for name in ("SIGHUP", "SIGINT", "SIGTERM")}  # 129, 130, 143


class TrainedNothingError(RuntimeError):
    """A run finished, but no step had rows left to train after the drops."""


# Composition's error (a ValueError) by name: importing its module loads Hydra, which a command reading a batch file
# (`agl-lab weighting`) never needs
_CONFIG_ERROR = ("agl_lab.config.compose", "ConfigError")

# Each failure's code by its exception's class, most specific first: the first row with a class the exception is an
# instance of gives the code (DoctorError is a ConfigError, a ValueError; FileExistsError an OSError). A class given as
# (module, name) lives where torch or verl load with it: it is looked up only in a module this process has imported
# already, since an exception of a class whose module never loaded cannot have been raised.
EXCEPTION_CODES: tuple[tuple[int, tuple[type[BaseException] | tuple[str, str], ...]], ...] = (
    (6, (TrainedNothingError,)),
    (3, (ModuleNotFoundError,)),
    (1, (("agl_lab.config.doctor", "DoctorError"),)),
    (4, (FileExistsError, DirectoryBusyError, ("agl_lab.training.tracking", "ConcurrentRunError"))),
    (5, (OSError, ("agl_lab.files.batch_header", "BatchFileError"))),
    (2, (_CONFIG_ERROR, ValueError)),
)


def exit_code(exc: BaseException) -> int:
    """The documented exit code for ``exc``."""
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, SIGTERM or SIGHUP, by the first signal received
        return signal_exit_code(stopped_by(exc))
    for code, classes in EXCEPTION_CODES:
        if isinstance(exc, _loaded(classes)):
            return code
    return 70


def help_epilog() -> str:
    """The exit codes, for ``agl-lab --help``."""
    lines = [f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items()]
    return "exit codes:\n" + "\n".join(lines) + "\n\nErrors are one line on stderr; --debug adds the traceback."


@contextmanager
def report_errors(*, debug: bool, secrets: Iterable[str], result: list[int]):
    """Run a command's block as a command runs: every line it prints with ``secrets`` masked, SIGINT, SIGTERM and
    SIGHUP stopping it once (:func:`agl_lab.training.process_state.stop_signals`; later signals cannot interrupt what is
    being saved, nor the interpreter's exit hooks), and any exception turned into one masked line on stderr and its
    code in ``result``. Warnings print as one line each (``agl-lab: warning: ...``), masked too. Output into a pipe
    whose reader has gone (``| head -1``) ends the command quietly with :data:`CLOSED_PIPE`.
    """
    secrets = list(secrets)
    shown = warnings.showwarning
    warnings.showwarning = _warning_printer(secrets)
    try:
        with masked_output(secrets), stop_signals():
            try:
                yield
            except SystemExit:
                raise
            except BaseException as exc:  # noqa: BLE001 — every failure reaches the user as one line and a code
                if isinstance(exc, BrokenPipeError) and output_closed():
                    result.append(CLOSED_PIPE)  # the reader took what it wanted (| head -1): nothing to report
                    return
                code = exit_code(exc)
                if debug:
                    print(traceback.format_exc(), file=sys.stderr, end="")
                for line in _lines(exc, code):
                    print(f"agl-lab: {line}", file=sys.stderr)
                result.append(code)
    finally:
        warnings.showwarning = shown
        exit_protected()


def output_closed() -> bool:
    """Whether the reader of this process's stdout has gone (a pipe into ``head`` that exited). If so, stdout (and
    stderr when its reader went too) now write to ``/dev/null``: the lines still buffered, and the interpreter's last
    flush, then vanish instead of raising BrokenPipeError again ("Exception ignored ... Broken pipe")."""
    closed = [fd for fd in (1, 2) if _reader_gone(fd)]
    if 1 not in closed:
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in closed:
        os.dup2(devnull, fd)
    os.close(devnull)
    return True


def stopped(interrupted_by: str) -> int:
    """Print the line a stopped command ends with and return its exit code (129 SIGHUP, 130 Ctrl-C, 143 SIGTERM), for
    commands that stop by returning what finished rather than by raising."""
    code = signal_exit_code(interrupted_by)
    print(f"agl-lab: {_lines(KeyboardInterrupt(), code)[0]}", file=sys.stderr)
    return code


class MaskingParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (which echo the arguments) never show a secret."""

    secrets: list[str] = []

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, mask_secrets(f"{self.prog}: error: {message}\n", self.secrets))


def _lines(exc: BaseException, code: int) -> list[str]:
    if code in _STOPPED_BY:
        return [stopped_line(_STOPPED_BY[code])]
    if isinstance(exc, _loaded((_CONFIG_ERROR,))):
        problems = [line.removeprefix("  - ") for line in str(exc).splitlines()[1:]] or [str(exc)]
        return [f"config error: {problem}" for problem in problems]
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, ModuleNotFoundError):
        top = (exc.name or "").split(".")[0]
        fix = "install the lab's extra: pip install 'agl_lab[lab]'" if top in LAB_EXTRA_MODULES else f"install {top}"
        return [f"missing package: {text}: this command needs it; {fix}"]
    if code == 70:
        return [f"unexpected error: {type(exc).__name__}: {text} (rerun with --debug for the traceback)"]
    kind = {2: "error", 4: "directory taken", 5: "file error", 6: "trained nothing"}.get(code, "error")
    return [f"{kind}: {text}"]


def _warning_printer(secrets: list[str]) -> Callable[..., None]:
    shown: set[str] = set()  # each text once per command: Python's once-per-place memory is reset whenever any
    # code enters warnings.catch_warnings(), so a warning raised in a loop (a reproduction's checks) would repeat

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        if text in shown:
            return
        shown.add(text)
        print(mask_secrets(f"agl-lab: warning: {text}", secrets), file=file or sys.stderr)

    return show


def _reader_gone(fd: int) -> bool:
    """A pipe whose every reader has closed it polls as an error (POLLERR) on its writing end."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError):
        return False


def _loaded(classes: tuple[type[BaseException] | tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    """The classes of a row of :data:`EXCEPTION_CODES` that exist in this process: a ``(module, name)`` one only if its
    module has been imported (never imported here: that would load torch and verl, seconds, to classify an error)."""
    found = []
    for given in classes:
        if isinstance(given, type):
            found.append(given)
        elif (loaded := getattr(sys.modules.get(given[0]), given[1], None)) is not None:
            found.append(loaded)
    return tuple(found)
