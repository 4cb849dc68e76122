"""Agent tasks for short training runs: small multi-turn episodes whose turns, and so rows, depend on the outcome.

Three tasks (``lab.task``), each a set of dataset items (``lab.task_size`` of them) played for ``rollout.n`` rollouts:

* ``lock`` (:mod:`agl_lab.training.lock_task`): a combination-lock game for the tiny policy, which learns its code
  table from scratch;
* ``retry_arith`` and ``guess_number`` (:mod:`agl_lab.training.number_tasks`): questions in English for a pretrained
  chat model (``lab.model``), answered with a number, with the exact answer format in the prompt and a verifiable
  reward: an addition whose wrong or unreadable answer gets "Incorrect, try again" (the shape of verl's
  ``Gsm8kInteraction``), and a secret number the environment answers higher or lower to (GEM's GuessTheNumber).

Every task plays by the same rules (:class:`Episode`): a right answer ends the episode with reward 1; a wrong or
unreadable one gets the environment's feedback and another turn, up to ``lab.max_turns`` turns (reward 0 after the
last). So failing rollouts make the most LLM calls, the case the per-rollout settings exist for.

Prefix continuity: the feedback is usually appended to the context, so the next prompt begins with the previous
prompt + response and the trajectory-level aggregator can merge the turns into one row. With probability
``lab.rewrite_prob`` the environment instead rewrites the context into a fresh prompt that sums up the tries so far
(an agent that compacts its memory): the aggregator closes the row and starts a new one. With a real tokenizer and chat
template a turn can also fail to continue the last by itself: the chat template re-renders the decoded response, whose
tokens need not be the ids the model sampled (:mod:`agl_lab.training.conversation`). At the transition level every
call is a row anyway.

Per-turn rewards (``lab.turn_cost``, off by default; a lab extension): a wrong answer that earns another try costs
``turn_cost``, an intermediate reward of ``−turn_cost`` on that call (:attr:`Episode.turn_rewards`); the rollout's
reward stays its outcome, so a success after k tries returns ``1 − (k − 1)·turn_cost``. The last call of a failure
earns no try and costs nothing: the outcome 0 is its reward.

Everything random here (items, codes, secrets, rewrites) comes from ``numpy.random.default_rng`` seeded with
``(seed, ...)``, so a seed fixes every episode the environment can produce. Notebook:
``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from omegaconf import DictConfig

from agl_lab.config.compose import ConfigError
from agl_lab.config.lab_config import TASKS
from agl_lab.core.keys import MAX_TURNS, REWRITE_PROB, TASK, TASK_SIZE, TURN_COST

__all__ = ["NO_GUESS", "Episode", "Task", "Turn", "check_task_knobs", "make_task", "task_from_config"]

NO_GUESS = "none"  # what Episode.guesses holds for an answer the task could not read


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
    """One agent episode on one item; :meth:`respond` advances it by one LLM call. A task's episode says what its
    first prompt is, how it reads an answer and what it answers (:meth:`read`, :meth:`correct`, :meth:`feedback`,
    :meth:`summary`)."""

    max_turns: int
    rewrite_prob: float
    rng: np.random.Generator
    turn_cost: float = 0.0
    guesses: list[str] = field(default_factory=list)  # what each call answered, NO_GUESS where unreadable
    turn_rewards: list[float] = field(default_factory=list)  # -turn_cost per call another one follows
    done: bool = False
    success: bool = False
    rewrites: int = 0

    @property
    def prompt(self) -> str:
        """The first prompt of the episode."""
        raise NotImplementedError

    @property
    def turns(self) -> int:
        return len(self.guesses)

    def read(self, response: str) -> str | None:
        """The answer in a response, or None when the task cannot read one."""
        raise NotImplementedError

    def correct(self, guess: str) -> bool:
        raise NotImplementedError

    def feedback(self, guess: str | None) -> str:
        """What the environment says to a wrong or unreadable answer, appended to the context."""
        raise NotImplementedError

    def summary(self) -> str:
        """A fresh context that sums up the tries so far (the rewrite)."""
        raise NotImplementedError

    def respond(self, response: str) -> Turn:
        """Read the agent's answer and answer it (module docstring)."""
        if self.done:
            raise RuntimeError("the episode is over: start a new one for another rollout")
        guess = self.read(response)
        self.guesses.append(guess if guess is not None else NO_GUESS)
        self.success = guess is not None and self.correct(guess)
        self.done = self.success or self.turns >= self.max_turns
        if self.done:
            return Turn(done=True, success=self.success)
        self.turn_rewards.append(-float(self.turn_cost))
        # Draw the rewrite for every continuing turn, so one episode's draws do not depend on the others'.
        if self.rng.random() < self.rewrite_prob:
            self.rewrites += 1
            return Turn(done=False, success=False, rewrite=self.summary())
        return Turn(done=False, success=False, observation=self.feedback(guess))


class Task(Protocol):
    """What a short run needs of a task (its knobs are the ``lab:`` section's: :func:`make_task`)."""

    max_turns: int
    turn_cost: float

    def words(self) -> list[str]: ...  # every word it says or accepts, for the tiny policy's tokenizer
    def sample_items(self, *, step: int, batch_size: int) -> list[int]: ...
    def start(self, item: int, *, step: int, index: int) -> Episode: ...


def make_task(name: str, *, size: int, max_turns: int, rewrite_prob: float, seed: int, turn_cost: float = 0.0) -> Task:
    """The task called ``name`` (``lab.task``), with the ``lab:`` knobs; an unknown name lists the known ones."""
    from agl_lab.training.lock_task import LockTask
    from agl_lab.training.number_tasks import GuessNumberTask, RetryArithTask

    classes = {"lock": LockTask, "retry_arith": RetryArithTask, "guess_number": GuessNumberTask}
    if name not in TASKS or name not in classes:
        near = difflib.get_close_matches(str(name), TASKS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(f"{TASK}: unknown task {name!r}{hint}; use one of: {', '.join(TASKS)}")
    return classes[name](size, max_turns=max_turns, rewrite_prob=rewrite_prob, seed=seed, turn_cost=turn_cost)


def task_from_config(cfg: DictConfig, *, seed: int | None = None) -> Task:
    """``make_task`` with the config's ``lab:`` knobs (``seed``: another seed than ``lab.seed``)."""
    lab = cfg.lab
    return make_task(
        lab.task,
        size=lab.task_size,
        max_turns=lab.max_turns,
        rewrite_prob=lab.rewrite_prob,
        seed=int(lab.seed if seed is None else seed),
        turn_cost=lab.turn_cost,
    )


def check_task_knobs(size: int, *, max_turns: int, rewrite_prob: float, turn_cost: float, what: str) -> None:
    """The knobs every task shares, refused naming the key when out of range (``what``: what ``size`` counts)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 2:
        raise ConfigError(f"{TASK_SIZE} must be an integer >= 2 ({what}), got {size!r}")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ConfigError(f"{MAX_TURNS} must be an integer >= 1, got {max_turns!r}")
    if not 0.0 <= float(rewrite_prob) <= 1.0:
        raise ConfigError(f"{REWRITE_PROB} must be a probability in [0, 1], got {rewrite_prob!r}")
    if not 0.0 <= float(turn_cost) <= 1.0:
        raise ConfigError(f"{TURN_COST} must be a number in [0, 1] (0: off), got {turn_cost!r}")
