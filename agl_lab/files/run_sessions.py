"""A run's sessions, one step at a time: each checked to lie in one GRPO group, and given one outcome.

A session is the rows of one step that share a ``trajectory`` id (Agent Lightning's rollout, verl's ``request_id``
or v1 ``{uid}_{session}`` key; :mod:`agl_lab.files.verl_dump` says how a dump names them). Ids are scoped to their
step: verl and Agent Lightning train a session's rows in one step (verl v1 puts a session's outputs in TransferQueue
together and samples whole prompt groups; Agent Lightning turns finished rollouts into rows), so the same id in two
step files is two sessions, as ids that repeat by design give them (a v1 key starts with the prompt's ``uid``, which
comes back every epoch; ``rollout.full_determinism`` request ids are ``det-{priority}``).

* **one group**: a session whose rows carry different groups (``uid``) is refused naming the file, the session and
  the fix: Agent Lightning's rollout-level advantage refuses it too ("found multiple uid values"), and no rule
  says which group the session's outcome is compared in;
* **one outcome**: where a session's rows carry different scores, each row's ``reward`` becomes the session's
  outcome by the rule (:data:`agl_lab.files.outcome_rules.OUTCOMES`: the last row's, by ``row`` and then the order
  the source holds them, or the highest); a step whose sessions all agree is returned as it was read.

``attrs["sessions"]`` counts what was read (:func:`total_sessions` sums steps, :func:`describe_sessions` says it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from agl_lab.core.groups import RolloutGroups, as_ids, group_rows
from agl_lab.files.batch_io import BatchFileError
from agl_lab.files.outcome_rules import OUTCOMES, check_outcome

__all__ = ["describe_sessions", "session_outcomes", "total_sessions"]

_COUNTS = ("sessions", "disagreeing", "unnamed_rows")


def session_outcomes(frame: pd.DataFrame, *, outcome: str, where: str) -> pd.DataFrame:
    """One step's rows (:data:`agl_lab.files.run_rows.RUN_COLUMNS`) with each session's rows in one group and
    carrying one outcome (module docstring); ``where`` names the step's file in a refusal. ``attrs["sessions"]``:
    the rule, the sessions, those whose rows disagreed, and the rows the source named no session for
    (``attrs["unnamed_rows"]``, each read as a session of its own)."""
    check_outcome(outcome)
    known = np.flatnonzero(frame["trajectory"].notna().to_numpy())  # rows of no session keep their own reward
    counts = {"outcome": outcome, "sessions": 0, "disagreeing": 0, "unnamed_rows": frame.attrs.get("unnamed_rows", 0)}
    if len(known):
        sessions = group_rows(frame["trajectory"].to_numpy()[known], field="trajectory")
        _check_one_group(frame["group"].to_numpy()[known], sessions, where)
        reward = frame["reward"].to_numpy(dtype=np.float64)[known]  # (rows,)
        first = reward[sessions.first_rows[sessions.codes]]  # (rows,)
        differs = ~((reward == first) | (np.isnan(reward) & np.isnan(first)))
        disagreeing = np.bincount(sessions.codes, weights=differs, minlength=sessions.n_groups) > 0  # (sessions,)
        counts.update(sessions=sessions.n_groups, disagreeing=int(disagreeing.sum()))
        if disagreeing.any():
            order = frame["row"].to_numpy(dtype=np.float64, na_value=np.nan)[known]
            values = frame["reward"].to_numpy(dtype=np.float64, copy=True)  # (all rows,)
            values[known] = _outcomes(reward, order, sessions, outcome)[sessions.codes]
            frame = frame.assign(reward=values)
    frame.attrs = {**frame.attrs, "sessions": counts}
    return frame


def total_sessions(counts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The counts of several steps' ``attrs["sessions"]`` summed (the rule is the steps' own); {} for none."""
    counts = [c for c in counts if c]
    if not counts:
        return {}
    return {"outcome": counts[0]["outcome"], **{key: int(sum(c[key] for c in counts)) for key in _COUNTS}}


def describe_sessions(counts: dict[str, Any]) -> str:
    """What :func:`total_sessions` counted, in a sentence: the rule, how many sessions' rows disagreed, and how many
    rows were sessions of their own because the source named none."""
    said = f"{OUTCOMES[counts['outcome']]}; "
    if counts["disagreeing"]:
        said += (
            f"the rows of {counts['disagreeing']} of {counts['sessions']} sessions carried different scores, "
            "and each row was given its session's outcome"
        )
    else:
        said += f"the rows of each of the {counts['sessions']} sessions carried one score"
    if counts["unnamed_rows"]:
        said += f"; {counts['unnamed_rows']} rows named no session and were read as one session each"
    return said


def _outcomes(reward: np.ndarray, order: np.ndarray, sessions: RolloutGroups, outcome: str) -> np.ndarray:
    """(sessions,) each session's outcome by the rule ``outcome``; ``order``: (rows,) each row's ``row`` (NaN:
    unknown, before the known ones), ties in the order the rows are held."""
    if outcome == "max":
        best = np.full(sessions.n_groups, -np.inf)
        with np.errstate(invalid="ignore"):  # NaN propagates: a session with a NaN score has no maximum
            np.maximum.at(best, sessions.codes, reward)
        return best
    rank = np.lexsort((np.arange(len(reward)), np.nan_to_num(order, nan=-1.0), sessions.codes))  # by session, row
    codes = sessions.codes[rank]
    return reward[rank[np.r_[codes[1:] != codes[:-1], True]]]  # each session's last row, in session order


def _check_one_group(groups: np.ndarray, sessions: RolloutGroups, where: str) -> None:
    """Refuse a session whose rows carry different groups (missing groups count as one more value)."""
    if pd.isna(groups).all():
        return
    codes, _ = pd.factorize(as_ids(groups, field="group"), use_na_sentinel=False)  # (rows,)
    mixed = np.flatnonzero(
        np.bincount(sessions.codes, weights=codes != codes[sessions.first_rows[sessions.codes]]) > 0
    )  # (mixed sessions,)
    if not len(mixed):
        return
    members = groups[sessions.codes == mixed[0]]
    seen = list(dict.fromkeys(members.tolist()))
    more = f" (and {len(mixed) - 1} more sessions mix groups)" if len(mixed) > 1 else ""
    raise BatchFileError(
        f"{where}: session {sessions.ids[mixed[0]]!r} has rows in {len(seen)} GRPO groups "
        f"({', '.join(map(repr, seen[:3]))}{', ...' if len(seen) > 3 else ''}){more}; a session's rows share one group "
        "(Agent Lightning's uid is the rollout's data_id, verl v1's key starts with its prompt's uid): give each "
        "session's rows its group, or for a verl dump name the field that holds it (--group-column, group_column=)"
    )
