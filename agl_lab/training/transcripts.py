"""A step's transcript: each rollout's conversation as text, the rows trace aggregation made of it, and their fate.

What a run's ``transcripts.jsonl`` holds, one line per step (``{"step": N, "rollouts": [...]}``); each rollout:

* ``rollout_id``, ``data_id`` (its GRPO group), ``reward``;
* ``messages``: the conversation as text — ``user`` for what the environment said (the question, its feedback, a
  context it rewrote: ``"rewrite": true``), ``assistant`` for the policy's answers (one per LLM call);
* ``calls``: for each LLM call, the index of the row it went into (``null`` where that cannot be told: a row the
  aggregator skipped for having no trainable token);
* ``rows``: per row, the ``calls`` it holds, its trainable ``response_tokens``, its ``fate`` (``kept`` or why it was
  dropped: :data:`agl_lab.core.selection.FATES`) and its ``advantage`` (the estimator's, before the loss's
  normalization: the mean over the row's trainable tokens; ``null`` for a dropped row or a skipped step).

A rollout with more rows than calls-per-row suggests is where the aggregator split it: each row after the first starts
at a merge mismatch (a rewritten context, or a chat template whose re-rendered prompt does not begin with the ids the
model sampled). Notebook 03's transcript view (:class:`agl_lab.ui.transcript_view.TranscriptView`) shows them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from verl import DataProto

from agl_lab.core.aggregation import Rollout, row_calls
from agl_lab.core.selection import Selection

__all__ = ["step_transcript"]


def step_transcript(
    rollouts: Sequence[Rollout],
    dialogues: Sequence[list[dict[str, Any]]],
    rows: DataProto,
    selection: Selection,
    batch: DataProto | None,
    *,
    level: str,
) -> list[dict[str, Any]]:
    """The transcript of one step (module docstring): ``rollouts`` and their ``dialogues`` as played, ``rows`` as
    aggregated, ``selection`` of them, and ``batch`` the kept rows with the estimator's advantages (None when the
    step trained nothing)."""
    by_rollout: dict[Any, list[int]] = defaultdict(list)  # rollout id -> its rows' indices in ``rows``
    for index, rollout_id in enumerate(rows.non_tensor_batch["rollout_id_list"]):
        by_rollout[rollout_id].append(index)
    tokens = rows.batch["response_mask"].sum(dim=-1).tolist()  # (rows,): trainable tokens
    advantage: dict[int, float] = {}
    if batch is not None:
        mask = batch.batch["response_mask"].to(batch.batch["advantages"].dtype)  # (kept, R)
        means = (batch.batch["advantages"] * mask).sum(-1) / mask.sum(-1).clamp_min(1)  # (kept,)
        advantage = dict(zip(selection.kept.tolist(), means.tolist(), strict=True))
    level = "trajectory" if str(level).startswith("trajectory") else "transition"
    out = []
    for rollout, messages in zip(rollouts, dialogues, strict=True):
        indices = by_rollout.get(rollout.rollout_id, [])
        groups = row_calls(rollout, level=level)
        if len(groups) != len(indices):  # a row skipped for lack of trainable tokens: calls cannot be placed
            groups = [[] for _ in indices]
        calls: list[int | None] = [None] * len(rollout.calls)
        for row, group in enumerate(groups):
            for call in group:
                calls[call] = row
        out.append(
            {
                "rollout_id": str(rollout.rollout_id),
                "data_id": str(rollout.data_id),
                "reward": None if rollout.reward is None else float(rollout.reward),
                "messages": messages,
                "calls": calls,
                "rows": [
                    {
                        "calls": group,
                        "response_tokens": int(tokens[index]),
                        "fate": str(selection.fate[index]),
                        "advantage": advantage.get(index),
                    }
                    for group, index in zip(groups, indices, strict=True)
                ],
            }
        )
    return out
