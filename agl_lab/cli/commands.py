"""The one registry of ``agl-lab``'s subcommands: each declared once, in its own module, as a :class:`Subcommand`.

A subcommand's module ends with ``COMMAND = Subcommand(...)``: its name, its line in ``agl-lab --help``, the config
base it composes from (printed by ``--help`` and as the subcommand's first line), the function that adds its arguments
and the one that runs it. :func:`subcommands` lists them in the order ``--help`` does; :func:`agl_lab.cli.build_parser`
builds the parser from that list alone, so a name, a base or a handler is never spelled a second time. The modules
load only when the parser is built, after ``agl-lab`` has taken its stop signals.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Subcommand", "subcommands"]


@dataclass(frozen=True, kw_only=True)
class Subcommand:
    """One ``agl-lab`` subcommand, as its module declares it."""

    name: str
    help: str  # its line in agl-lab --help
    base: str | None  # the config base it composes from (agl_lab.config.bases.BASES); None: it composes no config
    add_arguments: Callable[[argparse.ArgumentParser], None]  # its options and positional arguments
    run: Callable[[argparse.Namespace], int]  # runs it; returns the exit status
    description: str | None = None  # what `agl-lab NAME --help` says above the options
    epilog: str | None = None
    usage: str | None = None
    # words it does not know go to the program it becomes (lab: to jupyter lab), --debug included; it takes no dotlist
    hands_on_unknown: bool = False


def subcommands() -> tuple[Subcommand, ...]:
    """Every subcommand, in the order ``agl-lab --help`` lists them."""
    from agl_lab.cli import check, demo, lab, launch, reproduce, sweep, train, weighting

    return (
        check.COMMAND,
        train.COMMAND,
        demo.COMMAND,
        launch.COMMAND,
        sweep.COMMAND,
        reproduce.COMMAND,
        weighting.COMMAND,
        lab.COMMAND,
    )
