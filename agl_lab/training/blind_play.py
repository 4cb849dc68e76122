"""What a task pays a policy that never reads it: blind sweeps and echoes, played through the real Episode API.

A task measures what it claims only if no strategy that ignores the question (or the feedback) wins often. Before
these players, ``guess_number`` at 1-5 with 5 guesses was won every time by answering 1, 2, 3, 4, 5, and
``retry_arith`` with operands 0-9 and 3 tries 28% of the time by answering 9, 8, 10; echoing the prompt scored too
("between 1 and 5" read 5, "What is 0 + b?" read b). Each player here answers every call of an episode
(:meth:`agl_lab.training.tasks.Episode.respond`, the environment's own reading and rules) and is scored over **every
item of the task once**, so the success is exact for the uniform draw of items (the episodes' rewrite draws are those
of ``step``; only the echoes read them):

=================  =========================================================================================
player             what it answers at call ``i`` (0-based)
=================  =========================================================================================
``sweep``          the ``i``-th likeliest answer, feedback unread: the sums from the middle out (operands 0 to
                   n − 1: n − 1, n − 2, n, n − 3, ...), or 1, 2, 3, ... for ``guess_number``. The best blind
                   sweep: no blind order does better (for ``guess_number`` any k distinct guesses win k / N)
``repeat``         the likeliest answer at every call (for ``arith_workflow``, whose reward reads only the final
                   proposal, this is the best blind play: the likeliest sum's share)
``echo_prompt``    the first prompt, word for word, at every call
``echo_feedback``  the last thing the environment said (the prompt, then each feedback, rewrite or next prompt)
=================  =========================================================================================

``benchmarks/real_model_tasks.py`` prints them beside the model's success at step 0; docs/real-model.md has the
figures that chose the presets' knobs. Turn costs (``lab.turn_cost``) price the guesses: :attr:`BlindResult.mean_return`
is what each player earns under them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agl_lab.training.number_tasks import GuessNumberTask, RetryArithTask
from agl_lab.training.tasks import Episode, Task
from agl_lab.training.workflow_task import ArithWorkflowTask

__all__ = ["PLAYERS", "BlindResult", "Player", "blind_players", "blind_results", "likeliest_answers", "play"]

# (first prompt, what the environment said last, call index) -> the response text
Player = Callable[[str, str, int], str]
PLAYERS = ("sweep", "repeat", "echo_prompt", "echo_feedback")


@dataclass(frozen=True)
class BlindResult:
    """One player's score over every item of a task once."""

    player: str
    success: float  # share of items won
    mean_turns: float  # LLM calls per episode
    mean_return: float  # reward + the turn costs (lab.turn_cost; = success when it is 0)


def likeliest_answers(task: Task) -> list[int]:
    """The right answers of ``task``'s items, the likeliest first (ties: the smaller first), for a uniform item."""
    if isinstance(task, GuessNumberTask):
        return list(range(1, task.size + 1))
    if isinstance(task, RetryArithTask | ArithWorkflowTask):
        sums = np.add.outer(np.arange(task.size), np.arange(task.size)).ravel()  # (size²,) the answer of each item
        counts = np.bincount(sums)
        return [int(s) for s in sorted(range(len(counts)), key=lambda s: (-counts[s], s))]
    raise ValueError(f"no blind players for {type(task).__name__}: use retry_arith, guess_number or arith_workflow")


def blind_players(task: Task) -> dict[str, Player]:
    """The players of the module docstring for ``task``, by name (:data:`PLAYERS`)."""
    answers = likeliest_answers(task)
    return {
        "sweep": lambda prompt, latest, i: str(answers[min(i, len(answers) - 1)]),
        "repeat": lambda prompt, latest, i: str(answers[0]),
        "echo_prompt": lambda prompt, latest, i: prompt,
        "echo_feedback": lambda prompt, latest, i: latest,
    }


def play(episode: Episode, player: Player) -> Episode:
    """Let ``player`` answer every call of ``episode`` (finished responses, never cut off); return it, done."""
    latest = episode.prompt
    while not episode.done:
        turn = episode.respond(player(episode.prompt, latest, episode.turns))
        latest = next((t for t in (turn.rewrite, turn.next_prompt, turn.observation) if t is not None), latest)
    return episode


def blind_results(task: Task, *, step: int = 0) -> dict[str, BlindResult]:
    """Each player of :func:`blind_players` over every item of ``task`` once (exact for a uniform item)."""
    results = {}
    for name, player in blind_players(task).items():
        episodes = [play(task.start(item, step=step, index=item), player) for item in range(task.n_items)]
        success = np.array([e.success for e in episodes], dtype=float)  # (items,)
        returns = success + np.array([sum(e.turn_rewards) for e in episodes])  # (items,)
        results[name] = BlindResult(player=name, success=float(success.mean()),
                                    mean_turns=float(np.mean([e.turns for e in episodes])),
                                    mean_return=float(returns.mean()))  # fmt: skip
    return results
