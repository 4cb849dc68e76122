"""``agl-lab`` (also ``python -m agl_lab``): the lab from the command line.

Every subcommand composes its config from a named base (:data:`agl_lab.config.compose.BASES`) and prints which
first: ``check`` from ``example`` (Agent Lightning's defaults + the example overrides), ``train``, ``demo`` and
``sweep`` from ``short-run`` (+ the short-run preset), ``launch`` from ``agl`` (Agent Lightning's defaults alone:
what its trainer gets). ``check --base agl`` checks exactly what ``launch`` sends.

One module per subcommand, each with ``add_<name>_parser(commands)`` (its options; it sets ``run`` to
``run_<name>_command(args) -> int``): :mod:`agl_lab.cli_check` (the three settings, the doctor, the example batch),
:mod:`agl_lab.cli_train` (a short run), :mod:`agl_lab.cli_demo` (the settings that matter side by side),
:mod:`agl_lab.cli_sweep` (settings × seeds), :mod:`agl_lab.cli_reproduce` (a reported effect over seeds),
:mod:`agl_lab.cli_launch` (the hand-off to Agent Lightning),
:mod:`agl_lab.cli_lab` (JupyterLab on the notebooks). A new subcommand is a new module and one line in
:data:`SUBCOMMANDS`.

Every failure reaches the user as one line on stderr and a documented exit code (:mod:`agl_lab.exit_codes`, listed
by ``agl-lab --help``); ``--debug`` adds the traceback. Secrets given on the command line or in the environment are
masked in everything printed. ``key=value`` items may stand anywhere among the options (:mod:`agl_lab.cli_dotlist`).
"""

from __future__ import annotations

import argparse
import functools
import sys

from agl_lab.cli_check import add_check_parser
from agl_lab.cli_demo import add_demo_parser
from agl_lab.cli_dotlist import split_dotlist
from agl_lab.cli_help import DESCRIPTION, EPILOG, version
from agl_lab.cli_lab import add_lab_parser
from agl_lab.cli_launch import add_launch_parser
from agl_lab.cli_reproduce import add_reproduce_parser
from agl_lab.cli_sweep import add_sweep_parser
from agl_lab.cli_train import add_train_parser
from agl_lab.cli_weighting import add_weighting_parser
from agl_lab.config.secrets import secret_values
from agl_lab.exit_codes import MaskingParser, report_errors

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

# The subcommands, in the order --help lists them: each adds its parser and sets the function that runs it.
SUBCOMMANDS = (
    add_check_parser,
    add_train_parser,
    add_demo_parser,
    add_launch_parser,
    add_sweep_parser,
    add_reproduce_parser,
    add_weighting_parser,
    add_lab_parser,
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    MaskingParser.secrets = secret_values(argv)
    parser, commands = build_parser()
    words, dotlist = split_dotlist(argv, commands=commands.choices)
    args, extra = parser.parse_known_args(words)
    if hasattr(args, "dotlist"):
        args.dotlist = dotlist
    if hasattr(args, "other_args"):  # a subcommand that hands on what it does not know (lab: to jupyter lab)
        args.other_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    result: list[int] = []
    with report_errors(debug=args.debug, secrets=MaskingParser.secrets, result=result):
        result.append(args.run(args))
    return result[0]


def build_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """``agl-lab``'s parser and its subcommands (the subparsers action: ``.choices`` maps each name to its parser)."""
    parser = MaskingParser(
        prog="agl-lab", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error, not just its line")
    common = argparse.ArgumentParser(add_help=False)  # every subcommand takes --debug too (after its name)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    # each subcommand's parser takes --debug too; one that hands on what it does not know passes parents=[] (lab)
    commands.add_parser = functools.partial(commands.add_parser, parents=[common])
    for add_subcommand in SUBCOMMANDS:
        add_subcommand(commands)
    return parser, commands
