"""The lock task (``lab.task=lock``, the default): a combination-lock game the tiny policy learns from scratch.

Each dataset item is a lock ``L<i>``; its code ``c<j>`` is a fixed permutation of the lock numbers drawn from
``lab.seed``. The agent sees ``lock L3 try`` and answers; its answer's first word, if a code, is its guess. A right
guess opens the lock; a wrong or missing one gets ``no try`` and another turn (:class:`agl_lab.training.tasks.Episode`
has the rules every task shares). A rewritten context sums up the tries: ``lock L3 tried c1 c5 try``. Its words are
few and fixed (:meth:`LockTask.words`), so the tiny policy's word-level tokenizer covers it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from agl_lab.training.tasks import NO_GUESS, Episode, HeldOut, check_task_knobs, split_items

__all__ = ["LockEpisode", "LockTask"]
_TEMPLATE_WORDS = ("lock", "try", "no", "tried", NO_GUESS)


@dataclass
class LockEpisode(Episode):
    lock: int = 0
    code: int = 0

    @property
    def prompt(self) -> str:
        return f"lock L{self.lock} try"

    def read(self, response: str) -> str | None:
        """The first word, if it is a code ``c<j>`` (else no guess)."""
        words = response.split()
        return words[0] if words and _is_code(words[0]) else None

    def correct(self, guess: str) -> bool:
        return guess == f"c{self.code}"

    def feedback(self, guess: str | None) -> str:
        return "no try"

    def summary(self) -> str:
        return f"lock L{self.lock} tried {' '.join(self.guesses)} try"


@dataclass(frozen=True)
class LockTask:
    """The combination-lock task: ``n_locks`` locks, ``max_turns`` tries, context rewrites with ``rewrite_prob``, a
    cost of ``turn_cost`` per wrong guess that earns another try (0: no per-turn rewards).

    Its defaults are the ``lab:`` section's (``agl_lab.LabConfig``); :func:`agl_lab.training.tasks.make_task` passes
    them.
    """

    n_locks: int
    max_turns: int
    rewrite_prob: float
    seed: int
    turn_cost: float = 0.0
    heldout_size: int = 0  # lab.heldout_size: how many locks a held-out evaluation plays (heldout_items)

    def __post_init__(self) -> None:
        check_task_knobs(self.n_locks, max_turns=self.max_turns, rewrite_prob=self.rewrite_prob,
                         turn_cost=self.turn_cost, what="number of locks")  # fmt: skip

    @functools.cached_property
    def codes(self) -> np.ndarray:
        """``codes[i]`` opens lock ``L<i>``: a permutation fixed by the seed, for the policy to learn."""
        return np.random.default_rng([self.seed, 0]).permutation(self.n_locks)

    def words(self) -> list[str]:
        """Every word the environment says or accepts, for building a tokenizer."""
        numbers = range(self.n_locks)
        return [*_TEMPLATE_WORDS, *(f"L{i}" for i in numbers), *(f"c{i}" for i in numbers)]

    def sample_items(self, *, step: int, batch_size: int) -> list[int]:
        """The locks of one training step (``data.train_batch_size`` of them; distinct while there are enough)."""
        rng = np.random.default_rng([self.seed, 1, step])
        return rng.choice(self.n_locks, size=batch_size, replace=batch_size > self.n_locks).tolist()

    def heldout_items(self) -> HeldOut:
        """The locks a held-out evaluation plays: ``min(heldout_size, n_locks)`` of them, fixed by the seed, and never
        disjoint from training's. A lock's code is an arbitrary draw, so a lock training never plays cannot be learned
        (nothing carries over from one lock to another): the evaluation measures the greedy policy on the code table
        it learns, on training locks (``lab/val_items_held_out`` = 0), and training draws from every lock as before."""
        return HeldOut(split_items(self.n_locks, self.heldout_size, seed=self.seed)[0].items, disjoint=False)

    def start(self, lock: int, *, step: int, index: int) -> LockEpisode:
        """A fresh episode on ``lock``; ``(step, index)`` seeds its context rewrites."""
        return LockEpisode(
            lock=int(lock),
            code=int(self.codes[lock]),
            max_turns=self.max_turns,
            rewrite_prob=float(self.rewrite_prob),
            rng=np.random.default_rng([self.seed, 2, step, index]),
            turn_cost=float(self.turn_cost),
        )


def _is_code(word: str) -> bool:
    return len(word) > 1 and word[0] == "c" and word[1:].isdigit()
