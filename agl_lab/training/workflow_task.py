"""``arith_workflow``: an agent whose LLM calls use different prompts (solve, check, revise), so every call is a row.

The shape of Agent Lightning's earlier Spider example (write a SQL query, check it, rewrite it: each step its own LLM
call with its own prompt), on an addition for a pretrained chat model. Item ``q`` of ``task_size²`` is ``a + b`` with
``a = q // task_size``, ``b = q % task_size`` (as ``retry_arith``). The calls, up to ``lab.max_turns`` of them (>= 2):

1. **solve**: "What is a + b? Give your final answer as a single number." The answer is read as ``retry_arith`` reads
   it (:func:`agl_lab.training.number_tasks.read_answer`: the last number, echoes of ``a + b`` taken out, a cut-off
   answer unreadable); it becomes the proposal.
2. **check**, in a fresh prompt: "A student says that a + b = x. Is this true? Answer yes or no." The verdict is the
   first of yes / no / correct / incorrect / wrong / "not correct" in the reply (an echo of "yes or no" taken out);
   an unreadable or cut-off verdict counts as no.
3. **revise** (after a no), in a fresh prompt showing the question and the rejected answer: "What is a + b? The answer
   x was checked and found wrong. Give your final answer as a single number." Its answer is the new proposal, checked
   again; an unreadable proposal is not checked but revised at once ("could not be read").

The episode ends at a yes or when the calls run out; the reward is 1 when the **final proposal** is right, whatever
the checker said. Each call's prompt is a fresh conversation (:attr:`agl_lab.training.tasks.Turn.next_prompt`), which
never begins with the last call's prompt and response: at the trajectory level each call is its own row, so a rollout
of k calls is k rows, multi-row by construction, and ``lab/context_rewrites`` stays 0 (no context was rewritten).
``lab.rewrite_prob`` has no effect here. ``Episode.guesses`` holds each call's reading: the proposals as numbers, the
verdicts as ``yes``/``no`` (``none`` where unreadable, counted in ``lab/no_guess_rate``).

Blind play (:mod:`agl_lab.training.blind_play`): only the final proposal counts, so a policy that answers without
reading wins at most the likeliest sum's share (0.10 with operands 0-9), whatever ``max_turns``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import ClassVar

from agl_lab.config.compose import ConfigError
from agl_lab.core.keys import MAX_TURNS
from agl_lab.training.number_tasks import CLIP_CHARS, _NumberTask, read_answer, strip_echoes
from agl_lab.training.tasks import NO_GUESS, Episode, Turn

__all__ = ["ArithWorkflowTask", "WorkflowEpisode", "read_verdict"]

_FORMAT = "Give your final answer as a single number."
_CHECK_FORMAT = "Answer yes or no."
# the verdict words, first one wins; "not correct" before "correct"
_VERDICT = re.compile(r"\b(yes|no|not\s+correct|incorrect|correct|wrong)\b", re.IGNORECASE)
_YES = ("yes", "correct")


def read_verdict(response: str, *, cut_off: bool = False) -> str | None:
    """``"yes"``, ``"no"`` or None (unreadable, or ``cut_off``) for a checker's reply (module docstring)."""
    if cut_off:
        return None
    found = _VERDICT.search(strip_echoes(response, ("yes or no",))[-CLIP_CHARS:])
    if found is None:
        return None
    return "yes" if found.group(1).lower() in _YES else "no"


@dataclass
class WorkflowEpisode(Episode):
    """One solve-check-revise episode (module docstring); :attr:`step` names the call the next response answers."""

    a: int = 0
    b: int = 0
    step: str = "solve"
    proposal: str | None = None  # the current answer, None while unreadable
    steps: list[str] = field(default_factory=list)  # which call each response answered: solve, check, revise
    reads_unfinished: ClassVar[bool] = False

    @property
    def prompt(self) -> str:
        return f"What is {self.a} + {self.b}? {_FORMAT}"

    def check_prompt(self) -> str:
        return f"A student says that {self.a} + {self.b} = {self.proposal}. Is this true? {_CHECK_FORMAT}"

    def revise_prompt(self) -> str:
        if self.proposal is None:
            return f"What is {self.a} + {self.b}? An earlier answer could not be read. {_FORMAT}"
        return f"What is {self.a} + {self.b}? The answer {self.proposal} was checked and found wrong. {_FORMAT}"

    def correct(self, guess: str) -> bool:
        return Decimal(guess) == self.a + self.b

    def respond(self, response: str, *, cut_off: bool = False) -> Turn:
        if self.done:
            raise RuntimeError("the episode is over: start a new one for another rollout")
        self.steps.append(self.step)
        if self.step == "check":
            verdict = read_verdict(response, cut_off=cut_off)
            self.guesses.append(verdict or NO_GUESS)
            accepted = verdict == "yes"
        else:
            echoes = (f"{self.a} + {self.b}", f"{self.a} plus {self.b}")
            if self.step == "revise" and self.proposal is not None:  # the rejected answer is no new answer
                echoes += (f"answer {self.proposal} was",)
            self.proposal = read_answer(response, echoes=echoes, cut_off=cut_off)
            self.guesses.append(self.proposal or NO_GUESS)
            accepted = False
        self.done = accepted or self.turns >= self.max_turns
        if self.done:  # the final proposal decides, whatever the checker said
            self.success = self.proposal is not None and self.correct(self.proposal)
            return Turn(done=True, success=self.success)
        self.turn_rewards.append(-float(self.turn_cost))
        self.step = "check" if self.step != "check" and self.proposal is not None else "revise"
        return Turn(done=False, success=False, next_prompt=self.check_prompt() if self.step == "check" else
                    self.revise_prompt())  # fmt: skip


@dataclass(frozen=True)
class ArithWorkflowTask(_NumberTask):
    """``arith_workflow``: solve ``a + b``, check, revise (module docstring); operands 0 to ``size`` − 1. Its items,
    and the ones set aside for held-out evaluation (:meth:`heldout_items`, ``lab.heldout_size``), are drawn as
    ``retry_arith``'s."""

    _items_per_size = 2
    _what = "operands from 0 to task_size - 1"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_turns < 2:
            raise ConfigError(f"{MAX_TURNS} must be >= 2 for arith_workflow (a solve call, then a check), "
                              f"got {self.max_turns!r}")  # fmt: skip

    def start(self, item: int, *, step: int, index: int) -> WorkflowEpisode:
        a, b = divmod(int(item), self.size)
        return WorkflowEpisode(a=a, b=b, max_turns=self.max_turns, rewrite_prob=float(self.rewrite_prob),
                               rng=self._episode_rng(step, index), turn_cost=float(self.turn_cost))  # fmt: skip
