"""``key=value`` items anywhere among ``agl-lab``'s options: taken out in order, never an option's own value."""

import pytest

from agl_lab.cli import build_parser
from agl_lab.cli.dotlist import split_dotlist

COMMANDS = build_parser()[1].choices


@pytest.mark.parametrize(
    ("argv", "words", "items"),
    [
        (  # the command: items before, between and after the options
            ["sweep", "trainer.total_training_steps=2", "--seeds", "0", "lab.max_turns=3"],
            ["sweep", "--seeds", "0"],
            ["trainer.total_training_steps=2", "lab.max_turns=3"],
        ),
        (["train", "--show-config", "lab.seed=1"], ["train", "--show-config"], ["lab.seed=1"]),
        # an option of several values stops at the first override, however it is spelt
        (["sweep", "--seeds", "0", "1", "key=a,b"], ["sweep", "--seeds", "0", "1"], ["key=a,b"]),
        (["sweep", "--seeds", "0-4", "+new.key=1", "~old"], ["sweep", "--seeds", "0-4"], ["+new.key=1", "~old"]),
        (["sweep", "--seeds=0,1", "a=1"], ["sweep", "--seeds=0,1"], ["a=1"]),
        # an option of one value takes the next word whatever it looks like (a folder may be named a=b)
        (["launch", "--out", "a=b", "x=1", "--name", "n"], ["launch", "--out", "a=b", "--name", "n"], ["x=1"]),
        (["launch", "--ou", "a=b", "x=1"], ["launch", "--ou", "a=b"], ["x=1"]),  # argparse's abbreviations
        (["--debug", "check", "~algorithm", "--base", "agl"], ["--debug", "check", "--base", "agl"], ["~algorithm"]),
        (["check", "a=1", "--", "b=2", "-c"], ["check"], ["a=1", "b=2", "-c"]),
        # a subcommand's own positional argument (reproduce NAME) stays its argument; later plain words are items
        (
            ["reproduce", "a=1", "update-cap", "--max-seeds", "4", "b=2"],
            ["reproduce", "update-cap", "--max-seeds", "4"],
            ["a=1", "b=2"],
        ),
        (["reproduce", "update-cap", "stray"], ["reproduce", "update-cap"], ["stray"]),
        # no dotlist: every word is left for the subcommand (lab hands them to jupyter lab)
        (["lab", "nb", "--port", "8888", "x=1"], ["lab", "nb", "--port", "8888", "x=1"], []),
        (["--version"], ["--version"], []),
    ],
)
def test_items_are_taken_out_in_order(argv, words, items):
    assert split_dotlist(argv, commands=COMMANDS) == (words, items)
