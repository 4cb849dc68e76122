"""How a session's outcome is read from its rows' scores: the rules and the default, spelled once.

One source for ``agl_lab.read_run(..., outcome=)``, ``agl_lab.weighting_diagnostics(..., outcome=)`` and
``agl-lab weighting --outcome`` (whose parser must not load numpy to list them); :mod:`agl_lab.files.run_sessions`
applies them. Every row of a session then carries the session's outcome, as Agent Lightning's rows carry their
rollout's reward.

The default is ``last`` because that is where the producers put the outcome. verl scores a multi-output session on
its final output (``AgentLoopWorker._compute_score``: "assigns result to outputs[-1]") and copies that score to the
earlier outputs when the final output has one by then (``AgentLoopWorkerTQ._agent_loop_postprocess``); a reward run
after the rollout (``_compute_reward_colocate``) scores each output on its own, so a rule-based reward gives the
earlier outputs, which hold no final answer, 0: the outcome on the last row, zeros before it. verl's own validation
metrics count "only the final output per session" (``trainer_base``). Agent Lightning gives every row of a rollout
its final reward (``rollout_adapter``: ``reward=final_reward`` for each triplet), so there every rule reads the same
value. ``max`` is for a source that puts the outcome on some row but not always the last; it misreads a session whose
failure is negative (``-1`` after zeros reads as 0) or whose intermediate rewards exceed the outcome.
"""

from __future__ import annotations

import difflib

__all__ = ["DEFAULT_OUTCOME", "OUTCOMES", "check_outcome"]

OUTCOMES = {
    "last": "the score of the session's last row",
    "max": "the highest score among the session's rows (NaN if any row's is NaN)",
}
DEFAULT_OUTCOME = "last"


def check_outcome(outcome: str) -> str:
    """``outcome`` if it is a rule of :data:`OUTCOMES`; else a ValueError listing them (and the nearest)."""
    if outcome in OUTCOMES:
        return outcome
    near = difflib.get_close_matches(str(outcome), list(OUTCOMES), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ValueError(f"outcome={outcome!r} is not a rule{hint}: choose from {list(OUTCOMES)}")
