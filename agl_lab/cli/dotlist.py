"""Where ``agl-lab`` finds its ``key=value`` items: anywhere among the options, as Hydra's command lines take them.

``agl-lab sweep trainer.total_training_steps=2 --seeds 0 lab.max_turns=3`` and ``agl-lab train --show-config
lab.seed=1`` mean what they say. argparse alone cannot read them: a positional list is filled once, from the first
run of words, so items after an option are refused, and an option with several values (``--seeds 0 1``) takes
every word that follows it. So the items are taken out first (:func:`split_dotlist`): every word after the
subcommand's name that is neither an option nor an option's value, in the order given (but the first plain words of
a subcommand with positional arguments of its own, ``reproduce NAME``, stay its arguments). An option with several
values stops at the first word that looks like a Hydra override (``key=value``, ``+key=value``, ``~key``), so
``--seeds 0 1 key=a,b`` gives two seeds and one item. Subcommands without a dotlist (``lab``) keep every word.
Which options take several values is read from each subcommand's parser, a :class:`CommandParser`, which keeps the
arguments it was given (argparse keeps its own list private).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from agl_lab.exit_codes import MaskingParser

__all__ = ["CommandParser", "split_dotlist"]


def split_dotlist(argv: Sequence[str], *, commands: Mapping[str, CommandParser]) -> tuple[list[str], list[str]]:
    """``argv`` without its ``key=value`` items, and the items in their order.

    ``commands``: each subcommand's name and parser (the ``choices`` of the subparsers action). Words before the
    subcommand's name, a subcommand without a ``dotlist`` argument, and everything after ``--`` (items all) are
    handled as argparse would.
    """
    at = next((i for i, word in enumerate(argv) if word in commands), None)
    arguments = commands[argv[at]].arguments if at is not None else []
    if not _has_dotlist(arguments):
        return list(argv), []
    nargs = _option_nargs(arguments)
    positionals = _other_positionals(arguments)  # e.g. reproduce NAME: its first plain word is the name
    words, kept, items = list(argv[at + 1 :]), list(argv[: at + 1]), []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            items += words[i:]
            break
        if not word.startswith("-"):
            if positionals and not _looks_like_override(word):
                positionals -= 1
                kept.append(word)
            else:
                items.append(word)
            continue
        kept.append(word)
        if "=" in word:  # --option=value
            continue
        count = _resolved(nargs, word)
        if count is None:  # one value: the next word, whatever it looks like (--out a=b is a folder)
            kept += words[i : i + 1]
            i += 1
        elif count in ("+", "*"):  # several values: up to the next option or Hydra override
            while i < len(words) and not words[i].startswith("-") and not _looks_like_override(words[i]):
                kept.append(words[i])
                i += 1
    return kept, items


class CommandParser(MaskingParser):
    """``agl-lab``'s parser and, through ``add_subparsers``, each subcommand's: a :class:`MaskingParser` keeping in
    ``arguments`` every argument ``add_argument`` made (``-h`` too), each an ``argparse.Action``."""

    def __init__(self, *args, **kwargs) -> None:
        self.arguments: list[argparse.Action] = []  # before argparse's __init__, which adds -h
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.arguments.append(action)
        return action


def _has_dotlist(arguments: Sequence[argparse.Action]) -> bool:
    return any(action.dest == "dotlist" for action in arguments)


def _other_positionals(arguments: Sequence[argparse.Action]) -> int:
    """How many single-word positional arguments the subcommand takes besides its dotlist."""
    return sum(1 for action in arguments if not action.option_strings and action.dest != "dotlist")


def _option_nargs(arguments: Sequence[argparse.Action]) -> dict[str, int | str | None]:
    """Each option string → argparse's ``nargs``: None = one value, 0 = a flag, "+"/"*" = several."""
    return {option: action.nargs for action in arguments for option in action.option_strings}


def _resolved(nargs: Mapping[str, int | str | None], word: str) -> int | str | None:
    """The ``nargs`` of ``word``, an option or (as argparse allows) an unambiguous prefix of one; 0 if unknown."""
    if word in nargs:
        return nargs[word]
    matches = [option for option in nargs if option.startswith("--") and option.startswith(word)]
    return nargs[matches[0]] if len(matches) == 1 else 0


def _looks_like_override(word: str) -> bool:
    return "=" in word or word.startswith("~")
