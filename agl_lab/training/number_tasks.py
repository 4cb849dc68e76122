"""Two multi-turn tasks for a pretrained chat model, answered with a number: ``retry_arith`` and ``guess_number``.

Both say the exact answer format in the prompt ("a single number") and reward 1 for the right number, 0 otherwise.
How an answer is read (:func:`read_answer`; ``tests/test_number_tasks.py`` pins each rule with its texts):

* the **last** number of the response is its answer, in digits or written out up to twenty (a small chat model tends
  to write "7 + 5 = 12.", "The answer is 12." or "Seven.": the last number is the one it means); a response without
  one is unreadable and counts as no guess;
* **decimals read as numbers**: "7.0" is 7, "7.5" is 7.5 (wrong for 7), "12." is 12 (a full stop);
* **the prompt's own numbers are never an answer**: every echoed copy of the question's numbers (``a + b``; the range
  "1 and N") is taken out first, so "What is 0 + 7?" reads nothing while "0 + 7 = 7" still reads 7, and echoing the
  question ("between 1 and 5" once read 5; "What is 0 + b?" read b) wins nothing;
* **a cut-off answer is unreadable**: a response that hit the call's token limit (``data.max_response_length``)
  without the end-of-turn token counts as no guess, whatever number it stopped at ("12" cut to "1"). verl's gsm8k
  reward (``verl.utils.reward_score.gsm8k``, ``flexible``) reads the last number of the last 300 characters of
  whatever text it gets, finished or not; the lab keeps its 300-character window (:data:`CLIP_CHARS`) and declines
  the unfinished text, as a server's ``finish_reason="length"`` would let an agent do, so the policy is not paid for
  a number it was still writing.

Turns depend on the outcome (:class:`agl_lab.training.tasks.Episode`): a wrong or unreadable answer gets feedback and
another turn, up to ``lab.max_turns``. What a policy that never reads the feedback (or echoes the prompt) wins at the
same knobs is :mod:`agl_lab.training.blind_play`'s; docs/real-model.md sets it beside the model's success at step 0.

* ``retry_arith`` (the shape of verl's ``Gsm8kInteraction``: "incorrect, try again" until correct): item ``q`` of
  ``task_size²`` is ``a + b`` with ``a = q // task_size``, ``b = q % task_size``. Feedback: "Incorrect, try again." A
  rewritten context asks again and lists the wrong answers so far.
* ``guess_number`` (GEM's GuessTheNumber): item ``s`` is the secret ``s`` from 1 to ``task_size``; the environment
  answers "Higher." or "Lower.", so a good policy halves the range each turn. A rewritten context lists the guesses so
  far with their answers.

SmolLM2-135M-Instruct's success at step 0 with the pretrained presets (``conf/pretrained_<task>.yaml``), beside the
blind strategies', is measured in docs/real-model.md (``benchmarks/real_model_tasks.py``). These tasks need a model
that reads English: with the tiny word-level policy they are refused (:func:`agl_lab.config.model_source` names the
policy; the doctor says so).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar

import numpy as np

from agl_lab.training.tasks import NO_GUESS, Episode, HeldOut, check_task_knobs, split_items

__all__ = [
    "CLIP_CHARS",
    "ArithEpisode",
    "GuessEpisode",
    "GuessNumberTask",
    "RetryArithTask",
    "last_number",
    "read_answer",
    "strip_echoes",
]

_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty"
).split()
# a number in digits ("12", "-3", "7.0", "7.5"; a sentence's full stop is no decimal point), or a whole number written
# out from zero to twenty ("Seven."): the last one is the answer ("twenty-one" is no number it can read: neither word
# counts next to a hyphen)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?|(?<![\w-])(?:" + "|".join(_WORDS) + r")(?![\w-])", re.IGNORECASE)
_FORMAT = "Give your final answer as a single number."
_GUESS_FORMAT = "Reply with a single number."
# verl's gsm8k reward reads only the last 300 characters of a response (verl.utils.reward_score.gsm8k)
CLIP_CHARS = 300


def last_number(text: str) -> str | None:
    """The last number in ``text`` (``"-3"``, ``"12"``, ``"seven"`` as ``"7"``, ``"7.0"`` as ``"7"``, ``"7.50"`` as
    ``"7.5"``), without leading zeros; None when there is none."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    last = found[-1].lower()
    if last in _WORDS:
        return str(_WORDS.index(last))
    value = Decimal(last)
    return str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")


def read_answer(response: str, *, echoes: tuple[str, ...] = (), cut_off: bool = False) -> str | None:
    """The answer a task reads in ``response`` (module docstring): None when the response was ``cut_off``; else the
    last number of its last :data:`CLIP_CHARS` characters once every echoed copy of one of the prompt's ``echoes``
    (e.g. ``"3 + 4"``, ``"1 and 10"``) is taken out: ``"3 + 4 = 7"`` reads 7, ``"What is 3 + 4?"`` nothing."""
    if cut_off:
        return None
    return last_number(strip_echoes(response, echoes)[-CLIP_CHARS:])


def strip_echoes(text: str, echoes: tuple[str, ...]) -> str:
    """``text`` with every copy of each phrase of ``echoes`` replaced by a space: case and spaces between its words
    and signs are free ("3+4", "3 +  4"), a number in it matches only whole ("3 + 4" is not in "13 + 4" or "3 + 45")."""
    for phrase in echoes:
        text = _echo_pattern(phrase).sub(" ", text)
    return text


def _echo_pattern(phrase: str) -> re.Pattern[str]:
    pieces = re.findall(r"\d+|\w+|[^\w\s]", phrase)
    body = r"\s*".join(re.escape(piece) for piece in pieces)
    return re.compile(r"(?<![\w.])" + body + r"(?!\.?\d)", re.IGNORECASE)


@dataclass
class ArithEpisode(Episode):
    a: int = 0
    b: int = 0
    reads_unfinished: ClassVar[bool] = False  # a cut-off answer is unreadable (module docstring)

    @property
    def prompt(self) -> str:
        return f"What is {self.a} + {self.b}? {_FORMAT}"

    @property
    def echoes(self) -> tuple[str, ...]:
        """The question's numbers as an echo would copy them: never read as the answer."""
        return f"{self.a} + {self.b}", f"{self.a} plus {self.b}"

    def read(self, response: str) -> str | None:
        return read_answer(response, echoes=self.echoes)

    def correct(self, guess: str) -> bool:
        return Decimal(guess) == self.a + self.b

    def feedback(self, guess: str | None) -> str:
        if guess is None:
            return f"I could not find a number in your answer. {_FORMAT}"
        return f"Incorrect, try again. {_FORMAT}"

    def summary(self) -> str:
        tried = ", ".join(g for g in self.guesses if g != NO_GUESS) or "none readable"
        return f"What is {self.a} + {self.b}? Your earlier answers ({tried}) were wrong. {_FORMAT}"


@dataclass
class GuessEpisode(Episode):
    secret: int = 1
    high: int = 2
    reads_unfinished: ClassVar[bool] = False  # a cut-off answer is unreadable (module docstring)

    @property
    def prompt(self) -> str:
        # short and plain: SmolLM2-135M-Instruct gives a readable guess more often to this than to a longer rule
        return f"Guess my secret number. It is between 1 and {self.high}. Answer with just the number."

    @property
    def echoes(self) -> tuple[str, ...]:
        """The range's bounds as an echo would copy them ("between 1 and 10"): never read as a guess."""
        return tuple(f"1 {word} {self.high}" for word in ("and", "to", "-", "–"))

    def read(self, response: str) -> str | None:
        return read_answer(response, echoes=self.echoes)

    def correct(self, guess: str) -> bool:
        return Decimal(guess) == self.secret

    def feedback(self, guess: str | None) -> str:
        if guess is None:
            return f"I could not find a number in your reply. {_GUESS_FORMAT}"
        return f"{self._direction(guess)}. Guess again. {_GUESS_FORMAT}"

    def summary(self) -> str:
        tried = "; ".join(f"{g}: {self._direction(g).lower()}" for g in self.guesses if g != NO_GUESS) or "none"
        return (
            f"Guess my secret number. It is between 1 and {self.high}. Your guesses so far ({tried}) were wrong. "
            f"Guess again. {_GUESS_FORMAT}"
        )

    def _direction(self, guess: str) -> str:
        return "Higher" if Decimal(guess) < self.secret else "Lower"


@dataclass(frozen=True)
class _NumberTask:
    size: int
    max_turns: int
    rewrite_prob: float
    seed: int
    turn_cost: float = 0.0
    heldout_size: int = 0  # lab.heldout_size: the items set aside for held-out evaluation (heldout_items)
    _items_per_size = 1  # how many items a size gives: size (guess_number), size² (retry_arith)

    def __post_init__(self) -> None:
        check_task_knobs(self.size, max_turns=self.max_turns, rewrite_prob=self.rewrite_prob,
                         turn_cost=self.turn_cost, what=self._what)  # fmt: skip

    @property
    def n_items(self) -> int:
        """How many items there are (questions, secrets)."""
        return self.size**self._items_per_size

    def words(self) -> list[str]:
        return []  # questions in English: the tiny word-level policy cannot play them (module docstring)

    def sample_items(self, *, step: int, batch_size: int) -> list[int]:
        """The items of one training step (``data.train_batch_size`` of them; distinct while there are enough), never
        a held-out one (:meth:`heldout_items`)."""
        pool = self._split[1]
        rng = np.random.default_rng([self.seed, 1, step])
        return pool[rng.choice(len(pool), size=batch_size, replace=batch_size > len(pool))].tolist()

    def heldout_items(self) -> HeldOut:
        """The items a held-out evaluation plays: ``heldout_size`` of them, fixed by the seed and never drawn for
        training, while the task has at least twice as many (retry_arith's ``task_size²`` questions usually do);
        a smaller task (guess_number's few secrets) evaluates ``min(heldout_size, items)`` training items greedily
        instead, named as such (``disjoint=False``, ``lab/val_items_held_out`` = 0)
        (:func:`agl_lab.training.tasks.split_items`)."""
        return self._split[0]

    @functools.cached_property
    def _split(self) -> tuple[HeldOut, np.ndarray]:
        return split_items(self.n_items, self.heldout_size, seed=self.seed)

    def _episode_rng(self, step: int, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, 2, step, index])


@dataclass(frozen=True)
class RetryArithTask(_NumberTask):
    """``retry_arith``: ``a + b`` with operands from 0 to ``size`` − 1 (module docstring)."""

    _items_per_size = 2
    _what = "operands from 0 to task_size - 1"

    def start(self, item: int, *, step: int, index: int) -> ArithEpisode:
        a, b = divmod(int(item), self.size)
        return ArithEpisode(a=a, b=b, max_turns=self.max_turns, rewrite_prob=float(self.rewrite_prob),
                            rng=self._episode_rng(step, index), turn_cost=float(self.turn_cost))  # fmt: skip


@dataclass(frozen=True)
class GuessNumberTask(_NumberTask):
    """``guess_number``: a secret from 1 to ``size`` (module docstring)."""

    _what = "secrets from 1 to task_size"

    def start(self, item: int, *, step: int, index: int) -> GuessEpisode:
        return GuessEpisode(secret=int(item) + 1, high=self.size, max_turns=self.max_turns,
                            rewrite_prob=float(self.rewrite_prob), rng=self._episode_rng(step, index),
                            turn_cost=float(self.turn_cost))  # fmt: skip
