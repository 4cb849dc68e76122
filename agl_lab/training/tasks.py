"""Agent tasks for short training runs: small multi-turn episodes whose turns, and so rows, depend on the outcome.

Four tasks (``lab.task``), each a set of dataset items (``lab.task_size`` of them) played for ``rollout.n`` rollouts:

* ``lock`` (:mod:`agl_lab.training.lock_task`): a combination-lock game for the tiny policy, which learns its code
  table from scratch;
* ``retry_arith`` and ``guess_number`` (:mod:`agl_lab.training.number_tasks`): questions in English for a pretrained
  chat model (``lab.model``), answered with a number, with the exact answer format in the prompt and a verifiable
  reward: an addition whose wrong or unreadable answer gets "Incorrect, try again" (the shape of verl's
  ``Gsm8kInteraction``), and a secret number the environment answers higher or lower to (GEM's GuessTheNumber);
* ``arith_workflow`` (:mod:`agl_lab.training.workflow_task`): an addition solved, checked and revised in separate LLM
  calls, each with a fresh prompt of its own (:attr:`Turn.next_prompt`; the shape of Agent Lightning's Spider
  example), so every call is a row at either aggregation level.

Every task plays by the same rules (:class:`Episode`): a right answer ends the episode with reward 1; a wrong or
unreadable one gets the environment's feedback and another turn, up to ``lab.max_turns`` turns (reward 0 after the
last). So failing rollouts make the most LLM calls, the case the per-rollout settings exist for. (``arith_workflow``
plays its own rules on the same API: a check after each answer, the final answer rewarded.)

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
from typing import ClassVar, Protocol

import numpy as np
from omegaconf import DictConfig

from agl_lab.config.compose import ConfigError
from agl_lab.config.lab_config import TASKS
from agl_lab.core.keys import MAX_TURNS, REWRITE_PROB, TASK, TASK_SIZE, TURN_COST

__all__ = ["NO_GUESS", "Episode", "HeldOut", "Task", "Turn", "check_task_knobs", "make_task", "split_items"]
__all__ += ["task_from_config"]

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
    # A workflow's next call: a fresh prompt of its own (another step of the agent, not a rewrite of this context), so
    # it never continues the last call either; counted apart from the rewrites (lab/context_rewrites).
    next_prompt: str | None = None


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
    # Whether an answer cut off at the call's token limit is read like a finished one (the lock game's first word); the
    # tasks in English count it unreadable (agl_lab.training.number_tasks).
    reads_unfinished: ClassVar[bool] = True

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

    def respond(self, response: str, *, cut_off: bool = False) -> Turn:
        """Read the agent's answer and answer it (module docstring). ``cut_off``: the response hit the call's token
        limit without the end-of-turn token; a task whose :attr:`reads_unfinished` is False counts it unreadable."""
        if self.done:
            raise RuntimeError("the episode is over: start a new one for another rollout")
        guess = None if cut_off and not self.reads_unfinished else self.read(response)
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
    def heldout_items(self) -> HeldOut: ...  # the held-out evaluation's items (HeldOut, split_items)
    def start(self, item: int, *, step: int, index: int) -> Episode: ...


@dataclass(frozen=True)
class HeldOut:
    """The items a held-out evaluation plays (``trainer.test_freq``; :mod:`agl_lab.training.validation`), fixed by
    ``lab.seed``. ``disjoint``: True when training never draws them; False when the task is too small to set
    ``lab.heldout_size`` items aside (or, like the lock task, has nothing to generalise to): the evaluation then replays
    training items greedily, and says so (``lab/val_items_held_out`` = 0)."""

    items: tuple[int, ...]
    disjoint: bool


def split_items(n_items: int, heldout_size: int, *, seed: int) -> tuple[HeldOut, np.ndarray]:
    """``(held-out items, the items training draws from)`` of a task with ``n_items`` items.

    ``heldout_size`` items, drawn once from ``(seed, 3)``, are set aside when the task has at least twice as many
    (training keeps at least as many as are held out); otherwise ``min(heldout_size, n_items)`` of them are evaluated
    and training draws from every item, as without a split. ``heldout_size`` 0: nothing set aside (a task built
    without the ``lab:`` section's value).
    """
    # the tasks' streams: 0 the lock codes, 1 a step's items, 2 an episode's draws, 3 this split
    order = np.random.default_rng([seed, 3]).permutation(n_items)  # (n_items,)
    if 0 < heldout_size and 2 * heldout_size <= n_items:
        return HeldOut(tuple(sorted(order[:heldout_size].tolist())), True), np.sort(order[heldout_size:])
    return HeldOut(tuple(sorted(order[: min(heldout_size, n_items)].tolist())), False), np.arange(n_items)


def make_task(
    name: str,
    *,
    size: int,
    max_turns: int,
    rewrite_prob: float,
    seed: int,
    turn_cost: float = 0.0,
    heldout_size: int = 0,
) -> Task:
    """The task called ``name`` (``lab.task``), with the ``lab:`` knobs; an unknown name lists the known ones.
    ``heldout_size`` (``lab.heldout_size``): the items set aside for held-out evaluation (:func:`split_items`)."""
    from agl_lab.training.lock_task import LockTask
    from agl_lab.training.number_tasks import GuessNumberTask, RetryArithTask
    from agl_lab.training.workflow_task import ArithWorkflowTask

    classes = {"lock": LockTask, "retry_arith": RetryArithTask, "guess_number": GuessNumberTask,
               "arith_workflow": ArithWorkflowTask}  # fmt: skip
    if name not in TASKS or name not in classes:
        near = difflib.get_close_matches(str(name), TASKS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(f"{TASK}: unknown task {name!r}{hint}; use one of: {', '.join(TASKS)}")
    return classes[name](size, max_turns=max_turns, rewrite_prob=rewrite_prob, seed=seed, turn_cost=turn_cost,
                         heldout_size=heldout_size)  # fmt: skip


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
        heldout_size=int(lab.heldout_size),
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
