"""Agent tasks for short training runs: small multi-turn episodes whose row counts depend on the outcome.

The default task, ``lock``, is a combination-lock game. Each dataset item is a lock ``L<i>``; its code
``c<j>`` is a fixed permutation of the lock numbers drawn from ``lab.seed``. The agent sees
``lock L3 try`` and answers; its answer's first word, if a code, is its guess. A right guess opens the
lock (reward 1, episode over); a wrong or missing one gets ``no try`` and another turn, up to
``lab.max_turns`` turns (reward 0 after the last). So failing rollouts make the most LLM calls, which
is exactly the case the per-rollout settings exist for.

Prefix continuity: after a wrong guess the environment usually appends its answer to the context, so
the next prompt begins with the previous prompt + response and the trajectory-level aggregator merges
the turns into one row. With probability ``lab.rewrite_prob`` it instead rewrites the context into a
summary (``lock L3 tried c1 c5 try``) that does not continue the old one: the aggregator closes the row
and starts a new one (a merge mismatch). At the transition level every call is a row anyway.

Per-turn rewards (``lab.turn_cost``, off by default; a lab extension): a wrong guess that earns another try costs
``turn_cost``, an intermediate reward of ``−turn_cost`` on that call (:attr:`Episode.turn_rewards`); the rollout's
reward stays its outcome, so a success after k tries returns ``1 − (k − 1)·turn_cost``. The last call of a
failure earns no try and costs nothing: the outcome 0 is its reward.

Everything random here (codes, items, rewrites) comes from ``numpy.random.default_rng`` seeded with
``(seed, step, ...)``, so a seed fixes every episode the environment can produce. The tiny default
policy learns the code table from scratch within the default run. Notebook:
``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field

import numpy as np

from agl_lab.config.compose import ConfigError
from agl_lab.config.lab_config import TASKS
from agl_lab.core.keys import MAX_TURNS, REWRITE_PROB, TASK, TASK_SIZE, TURN_COST

__all__ = ["Episode", "LockTask", "Turn", "make_task"]
_TEMPLATE_WORDS = ("lock", "try", "no", "tried", "none")


@dataclass(frozen=True)
class Turn:
    """What the environment answers to one agent response."""

    done: bool
    success: bool
    # Text that continues the context (prompt + response + observation); None when ``rewrite`` replaces it.
    observation: str | None = None
    # A whole new context that does not begin with the old one (the trajectory aggregator's merge mismatch).
    rewrite: str | None = None


@dataclass
class Episode:
    """One agent episode on one lock; :meth:`respond` advances it by one LLM call."""

    lock: int
    code: int
    max_turns: int
    rewrite_prob: float
    rng: np.random.Generator
    turn_cost: float = 0.0
    guesses: list[str] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)  # -turn_cost per call another one follows
    done: bool = False
    success: bool = False
    rewrites: int = 0

    @property
    def prompt(self) -> str:
        """The first prompt of the episode."""
        return f"lock L{self.lock} try"

    @property
    def turns(self) -> int:
        return len(self.guesses)

    def respond(self, response: str) -> Turn:
        """Read the agent's answer: its first word is the guess if it is a code ``c<j>`` (else no guess)."""
        if self.done:
            raise RuntimeError("the episode is over: start a new one for another rollout")
        words = response.split()
        guess = words[0] if words and _is_code(words[0]) else None
        self.guesses.append(guess or "none")
        self.success = guess == f"c{self.code}"
        self.done = self.success or self.turns >= self.max_turns
        if self.done:
            return Turn(done=True, success=self.success)
        self.turn_rewards.append(-float(self.turn_cost))
        # Draw the rewrite for every continuing turn, so one episode's draws do not depend on the others'.
        if self.rng.random() < self.rewrite_prob:
            self.rewrites += 1
            return Turn(done=False, success=False, rewrite=f"lock L{self.lock} tried {' '.join(self.guesses)} try")
        return Turn(done=False, success=False, observation="no try")


@dataclass(frozen=True)
class LockTask:
    """The combination-lock task: ``n_locks`` locks, ``max_turns`` tries, context rewrites with ``rewrite_prob``, a
    cost of ``turn_cost`` per wrong guess that earns another try (0: no per-turn rewards).

    Its defaults are the ``lab:`` section's (``agl_lab.LabConfig``); :func:`make_task` passes them.
    """

    n_locks: int
    max_turns: int
    rewrite_prob: float
    seed: int
    turn_cost: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.n_locks, bool) or not isinstance(self.n_locks, int) or self.n_locks < 2:
            raise ConfigError(f"{TASK_SIZE} must be an integer >= 2 (number of locks), got {self.n_locks!r}")
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ConfigError(f"{MAX_TURNS} must be an integer >= 1, got {self.max_turns!r}")
        if not 0.0 <= float(self.rewrite_prob) <= 1.0:
            raise ConfigError(f"{REWRITE_PROB} must be a probability in [0, 1], got {self.rewrite_prob!r}")
        if not 0.0 <= float(self.turn_cost) <= 1.0:
            raise ConfigError(f"{TURN_COST} must be a number in [0, 1] (0: off), got {self.turn_cost!r}")

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

    def start(self, lock: int, *, step: int, index: int) -> Episode:
        """A fresh episode on ``lock``; ``(step, index)`` seeds its context rewrites."""
        return Episode(
            lock=int(lock),
            code=int(self.codes[lock]),
            max_turns=self.max_turns,
            rewrite_prob=float(self.rewrite_prob),
            rng=np.random.default_rng([self.seed, 2, step, index]),
            turn_cost=float(self.turn_cost),
        )


def make_task(
    name: str, *, size: int, max_turns: int, rewrite_prob: float, seed: int, turn_cost: float = 0.0
) -> LockTask:
    """The task called ``name`` (``lab.task``), with the ``lab:`` knobs; an unknown name lists the known ones."""
    if name not in TASKS or name not in _TASK_CLASSES:
        near = difflib.get_close_matches(str(name), TASKS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(f"{TASK}: unknown task {name!r}{hint}; use one of: {', '.join(TASKS)}")
    return _TASK_CLASSES[name](
        n_locks=size, max_turns=max_turns, rewrite_prob=rewrite_prob, seed=seed, turn_cost=turn_cost
    )


# The class of each task name of ``agl_lab.config.lab_config.TASKS`` (a test checks that both list the same names).
_TASK_CLASSES = {"lock": LockTask}


def _is_code(word: str) -> bool:
    return len(word) > 1 and word[0] == "c" and word[1:].isdigit()
