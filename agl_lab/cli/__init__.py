"""``agl-lab`` (also ``python -m agl_lab``): the lab from the command line.

Every subcommand composes its config from a named base (:data:`agl_lab.config.bases.BASES`) and prints which
first: ``check`` from ``example`` (Agent Lightning's defaults + the example overrides), ``train``, ``demo`` and
``sweep`` from ``short-run`` (+ the short-run preset), ``launch`` from ``agl`` (Agent Lightning's defaults alone:
what its trainer gets). ``check --base agl`` checks exactly what ``launch`` sends.

One module per subcommand, each declaring it once as a :class:`~agl_lab.cli.commands.Subcommand` (name, help, base,
its arguments and the function that runs it): :mod:`agl_lab.cli.check` (the three settings, the doctor, the example
batch), :mod:`agl_lab.cli.train` (a short run), :mod:`agl_lab.cli.demo` (the settings that matter side by side),
:mod:`agl_lab.cli.sweep` (settings × seeds), :mod:`agl_lab.cli.reproduce` (a reported effect over seeds),
:mod:`agl_lab.cli.weighting` (the weighting diagnostics of a batch or a run), :mod:`agl_lab.cli.launch` (the hand-off
to Agent Lightning), :mod:`agl_lab.cli.lab` (JupyterLab on the notebooks). The one registry,
:func:`agl_lab.cli.commands.subcommands`, lists them: a new subcommand is a new module and its line there.

Every failure reaches the user as one line on stderr and a documented exit code (:mod:`agl_lab.exit_codes`, listed by
``agl-lab --help``); ``--debug`` adds the traceback. The stop signals are handled from the command's first moment:
:func:`main` takes them before it imports anything else (this module imports only the standard library), so Ctrl-C while
the stack loads is one line and exit 130 too; a closed output pipe (``agl-lab check | head -1``) ends the command
quietly (exit 141, as ``yes | head -1`` does); a working directory that was deleted is one line. Secrets given on the
command line or in the environment are masked in everything printed. ``key=value`` items may stand anywhere among the
options (:mod:`agl_lab.cli.dotlist`).
"""

from __future__ import annotations

import os
import sys

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    from agl_lab.training.process_state import (  # the standard library only
        exit_protected,
        signal_exit_code,
        stop_signals,
        stopped_by,
        stopped_line,
    )

    with stop_signals():  # from the first moment: a stop while the rest loads is one line and its exit code too
        try:
            return _main(sys.argv[1:] if argv is None else list(argv))
        except KeyboardInterrupt as exc:  # stopped before report_errors took over (imports, parsing): modules may be
            name = stopped_by(exc)  # half-imported now, so the line comes from the standard library alone
            print(f"agl-lab: {stopped_line(name)}", file=sys.stderr)
            return signal_exit_code(name)
        except BrokenPipeError:  # --help or --version into a closed pipe (report_errors handles the commands')
            from agl_lab.exit_codes import CLOSED_PIPE, output_closed

            if not output_closed():
                raise
            return CLOSED_PIPE
        finally:
            exit_protected()


def _main(argv: list[str]) -> int:
    try:
        os.getcwd()
    except FileNotFoundError:  # torch's libraries would die loading (oneMKL FATAL ERROR) with no line of ours
        print(
            "agl-lab: file error: the working directory no longer exists (deleted or unmounted): cd into a folder "
            "that exists and run the command again",
            file=sys.stderr,
        )
        return 5
    from agl_lab.cli.dotlist import split_dotlist
    from agl_lab.config.secrets import secret_values
    from agl_lab.exit_codes import MaskingParser, report_errors

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


def build_parser() -> tuple:
    """``agl-lab``'s parser (an ``argparse.ArgumentParser``) and its subcommands (the subparsers action: ``.choices``
    maps each name to its parser), from the registry (:func:`agl_lab.cli.commands.subcommands`). argparse loads here:
    until :func:`main` takes the stop signals, every import is time in which Ctrl-C would print a traceback."""
    import argparse

    from agl_lab.cli.commands import subcommands
    from agl_lab.cli.dotlist import CommandParser
    from agl_lab.cli.help import EPILOG, description, version

    registry = subcommands()
    parser = CommandParser(
        prog="agl-lab",
        description=description(registry),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--debug", action="store_true", help="print the traceback of an error, not just its line")
    commands = parser.add_subparsers(dest="command", required=True)  # each subcommand's parser a CommandParser too
    for command in registry:
        options = {"description": command.description, "epilog": command.epilog, "usage": command.usage}
        sub = commands.add_parser(command.name, help=command.help, **{k: v for k, v in options.items() if v})
        if command.hands_on_unknown:  # what it does not know goes on (lab: to jupyter lab, whose --debug is its own)
            sub.set_defaults(other_args=[])
        else:  # every other subcommand takes --debug after its name too
            sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser, commands
