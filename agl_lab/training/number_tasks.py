"""Two multi-turn tasks for a pretrained chat model, answered with a number: ``retry_arith`` and ``guess_number``.

Both say the exact answer format in the prompt ("a single number"), read the **last** whole number of a response as
its answer, in digits or written out up to twenty (a small chat model tends to write "7 + 5 = 12.", "The answer is
12." or "Seven.": the last number is the one it means; a response without one is unreadable and counts as no guess),
and reward 1 for the right number, 0 otherwise.
Turns depend on the outcome (:class:`agl_lab.training.tasks.Episode`): a wrong or unreadable answer gets feedback and
another turn, up to ``lab.max_turns``.

* ``retry_arith`` (the shape of verl's ``Gsm8kInteraction``: "incorrect, try again" until correct): item ``q`` of
  ``task_size²`` is ``a + b`` with ``a = q // task_size``, ``b = q % task_size``. Feedback: "Incorrect, try again." A
  rewritten context asks again and lists the wrong answers so far.
* ``guess_number`` (GEM's GuessTheNumber): item ``s`` is the secret ``s`` from 1 to ``task_size``; the environment
  answers "Higher." or "Lower.", so a good policy halves the range each turn. A rewritten context lists the guesses so
  far with their answers.

SmolLM2-135M-Instruct's success at step 0 with the pretrained preset (``conf/pretrained.yaml``) is measured in
docs/real-model.md. These tasks need a model that reads English: with the tiny word-level policy they are refused
(:func:`agl_lab.config.model_source` names the policy; the doctor says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from agl_lab.training.tasks import NO_GUESS, Episode, check_task_knobs

__all__ = ["ArithEpisode", "GuessEpisode", "GuessNumberTask", "RetryArithTask", "last_number"]

_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty"
).split()
# a whole number in digits, or written out from zero to twenty ("Seven."): the last one is the answer
# ("twenty-one" is no number it can read: neither word counts next to a hyphen)
_NUMBER = re.compile(r"-?\d+|(?<![\w-])(?:" + "|".join(_WORDS) + r")(?![\w-])", re.IGNORECASE)
_FORMAT = "Give your final answer as a single number."
_GUESS_FORMAT = "Reply with a single number."


def last_number(text: str) -> str | None:
    """The last whole number in ``text`` (``"-3"``, ``"12"``, ``"seven"`` as ``"7"``), without leading zeros; None when
    there is none."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    last = found[-1].lower()
    return str(_WORDS.index(last)) if last in _WORDS else str(int(last))


@dataclass
class ArithEpisode(Episode):
    a: int = 0
    b: int = 0

    @property
    def prompt(self) -> str:
        return f"What is {self.a} + {self.b}? {_FORMAT}"

    def read(self, response: str) -> str | None:
        return last_number(response)

    def correct(self, guess: str) -> bool:
        return int(guess) == self.a + self.b

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

    @property
    def prompt(self) -> str:
        # short and plain: SmolLM2-135M-Instruct gives a readable guess more often to this than to a longer rule
        return f"Guess my secret number. It is between 1 and {self.high}. Answer with just the number."

    def read(self, response: str) -> str | None:
        return last_number(response)

    def correct(self, guess: str) -> bool:
        return int(guess) == self.secret

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
        return "Higher" if int(guess) < self.secret else "Lower"


@dataclass(frozen=True)
class _NumberTask:
    size: int
    max_turns: int
    rewrite_prob: float
    seed: int
    turn_cost: float = 0.0
    _items_per_size = 1  # how many items a size gives: size (guess_number), size² (retry_arith)

    def __post_init__(self) -> None:
        check_task_knobs(self.size, max_turns=self.max_turns, rewrite_prob=self.rewrite_prob,
                         turn_cost=self.turn_cost, what=self._what)  # fmt: skip

    def words(self) -> list[str]:
        return []  # questions in English: the tiny word-level policy cannot play them (module docstring)

    def sample_items(self, *, step: int, batch_size: int) -> list[int]:
        """The items of one training step (``data.train_batch_size`` of them; distinct while there are enough)."""
        items = self.size**self._items_per_size
        rng = np.random.default_rng([self.seed, 1, step])
        return rng.choice(items, size=batch_size, replace=batch_size > items).tolist()

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
