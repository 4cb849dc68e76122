"""Trace aggregation: rollouts (sequences of LLM calls) → training rows, as Agent Lightning's adapter does it.

``transition`` level: every call is one row, its whole response trainable.

``trajectory`` level: a call joins the current row only if its prompt token ids begin exactly with the
current context (the row's prompt + everything appended so far). The extra prompt tokens (tool
observations, chat-template text) are appended to the response with loss mask 0, then the new
response with mask 1. A call whose prompt does not continue the context closes the row (a *merge
mismatch*) and starts a new one from its full prompt. So one rollout becomes one row when every turn
continues the last, and several rows when the agent's context is rewritten — the multi-row rollouts
the three per-rollout settings exist for.

Rollouts are taken in ``(step, sample_idx_in_step)`` order (a stable sort: the rollouts of one dataset item keep
their order), rows in call order within a rollout. Limits: a prompt over ``max_prompt_length`` keeps its first
tokens and the row is flagged ``is_drop_mask`` (removed by the trainer, ``training/n_sample_dropped/marked``); a
response over ``max_response_length`` — or over ``max_total_length`` minus the (cut) prompt, Agent Lightning
1.0.2's ``trajectory_max_total_length`` — keeps its first tokens (``training/n_truncated_sample``); a row with no
trainable token is skipped (``training/n_skipped_empty_rows``). Every row carries its rollout's reward (bf16) on
its last response token (a rollout's per-turn rewards, a lab extension, go where ``turn_reward_placement`` says:
:mod:`agl_lab.core.turn_rewards`), and is padded to exactly ``max_prompt_length`` + ``max_response_length`` tokens, as
Agent Lightning pads (so verl's ``*/clip_ratio`` metrics agree; the short-run preset keeps the limits small).
``pad_to="longest"`` pads to the longest row instead, for study batches whose limits are far above their rows
(the synthetic generator: 10k rows × 10,240 columns would not fit in memory); masks and weights are the same.
Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from omegaconf import DictConfig
from verl import DataProto

from agl_lab.core import keys
from agl_lab.core.rows import build_rows
from agl_lab.core.turn_rewards import add_extra_rewards, check_turn_rewards, place_rewards

__all__ = ["MISMATCH_LIMIT", "TRACE_LEVELS", "LLMCall", "Rollout", "aggregate", "aggregation_limits", "row_calls"]

TRACE_LEVELS = ("transition", "trajectory")
Level = Literal["transition", "trajectory"]
# Agent Lightning records (and counts in training/n_trace_merge_mismatch_rows) at most this many merge mismatches.
MISMATCH_LIMIT = 100


@dataclass(frozen=True)
class LLMCall:
    """One LLM call of an agent: the prompt it saw and the response it gave (token ids), optionally log-probs."""

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    log_probs: Sequence[float] | None = None


@dataclass(frozen=True)
class Rollout:
    """One agent episode on one dataset item: its calls in order and its final reward (None: none was given).

    ``step`` and ``sample_idx_in_step`` (the dataset item's index in its step) order the rollouts as Agent
    Lightning's store does; rollouts with equal keys keep their input order. ``turn_rewards`` (agl_lab only, None:
    Agent Lightning's one reward): the intermediate reward after each call another follows (:mod:`~.turn_rewards`).
    """

    rollout_id: Any
    data_id: Any
    calls: Sequence[LLMCall] = field(default_factory=tuple)
    reward: float | None = None
    step: int = 0
    sample_idx_in_step: int = 0
    turn_rewards: Sequence[float] | None = None


@dataclass
class _Row:
    rollout: Rollout
    turn: int
    prompt: list[int]
    response: list[int]
    mask: list[int]
    log_probs: list[float] | None
    turn_ends: list[tuple[int, int]] = field(default_factory=list)  # (call, its last response position) per call


def aggregation_limits(cfg: DictConfig) -> dict[str, Any]:
    """The aggregator's settings from a composed config, read as Agent Lightning's trainer reads them.

    ``agentlightning.trace_aggregator.level`` defaults to ``transition`` when absent. At a level starting with
    ``trajectory``: ``trajectory_max_{prompt,response}_length`` (each falling back to ``data.max_*`` when the key
    is absent) and ``trajectory_max_total_length`` (none when absent); otherwise ``data.max_*`` and no total limit.
    """
    aggregator = cfg.agentlightning.trace_aggregator
    level = aggregator.get("level", "transition")
    trajectory = str(level).startswith("trajectory")
    data = cfg.data
    if not trajectory:
        prompt, response, total = data.max_prompt_length, data.max_response_length, None
    else:
        prompt = aggregator.get("trajectory_max_prompt_length", data.max_prompt_length)
        response = aggregator.get("trajectory_max_response_length", data.max_response_length)
        total = aggregator.get("trajectory_max_total_length")
    return {
        "level": level,
        "max_prompt_length": prompt,
        "max_response_length": response,
        "max_total_length": total,
        "reward_fillna_value": cfg.agentlightning.reward_fillna_value,
    }


def aggregate(
    rollouts: Sequence[Rollout],
    *,
    level: Level,
    max_prompt_length: int,
    max_response_length: int,
    max_total_length: int | None = None,
    reward_fillna_value: float = 0.0,
    pad_token_id: int = 0,
    pad_to: Literal["limits", "longest"] = "limits",
    turn_reward_placement: str = "per_turn",
) -> tuple[DataProto, dict[str, Any]]:
    """Turn rollouts into verl rows and Agent Lightning's adapter metrics.

    Rows hold ``prompts`` (rows, P), ``responses`` (rows, R), ``input_ids``, ``attention_mask``, ``position_ids``
    (rows, P + R), ``response_mask``, ``is_drop_mask``, ``token_level_scores`` (bf16; and ``rollout_log_probs``
    when every row has them), with P = ``max_prompt_length`` and R = ``max_response_length`` (the longest row's
    with ``pad_to="longest"``), and the non-tensor ``data_id_list``, ``rollout_id_list`` (and ``turn_index_list``
    at the transition level). ``turn_reward_placement``: ``per_turn`` or ``summed``, for rollouts with
    ``turn_rewards`` (:mod:`agl_lab.core.turn_rewards`).
    """
    if level not in TRACE_LEVELS:
        raise ValueError(f"Unknown trace_aggregator_level: {level}")
    if pad_to not in ("limits", "longest"):
        raise ValueError(f"pad_to must be 'limits' (Agent Lightning's) or 'longest', got {pad_to!r}")
    for name, value in (("max_prompt_length", max_prompt_length), ("max_response_length", max_response_length)):
        if not _is_count(value) or value < 1:
            raise ValueError(f"{name} must be a positive number of tokens, got {value!r}")
    if max_total_length is not None and (not _is_count(max_total_length) or max_total_length < 0):
        raise ValueError(
            f"max_total_length must be null (no limit) or a number of tokens >= 0, got {max_total_length!r}"
        )

    rollouts = sorted(rollouts, key=lambda r: (r.step, r.sample_idx_in_step))  # stable: ties keep their order
    candidates: list[_Row] = []
    turn_lengths: list[int] = []
    n_mismatch = n_unmerged = n_with_reward = n_with_trace = 0
    for rollout in rollouts:
        n_with_reward += rollout.reward is not None
        check_turn_rewards(rollout)
        if not rollout.calls:
            warnings.warn(f"No triplets found for training rollout {rollout.rollout_id}, skipping.", stacklevel=2)
            continue
        n_with_trace += 1
        turn_lengths.extend(len(call.response_ids) for call in rollout.calls)
        if level == "transition":
            rows = [_row(rollout, turn, call) for turn, call in enumerate(rollout.calls)]
        else:
            rows, mismatches = _merge(rollout)
            n_mismatch += mismatches
            n_unmerged += len(rows) > 1
        candidates.extend(rows)

    limits = (max_prompt_length, max_response_length, max_total_length)
    kept, n_truncated, n_empty = _apply_limits(candidates, *limits)
    if not kept:
        raise RuntimeError("get_train_data_batch emitted zero training rows.")
    with_log_probs = [row.log_probs is not None for row, _ in kept]
    if any(with_log_probs) and not all(with_log_probs):
        warnings.warn("Mixed rollout log_probs availability, omitting rollout_log_probs from batch.", stacklevel=2)
    rewards = [_reward(r, reward_fillna_value) for r in rollouts]
    outcomes = [_reward(row.rollout, reward_fillna_value) for row, _ in kept]
    row_rewards, extra = place_rewards([row for row, _ in kept], outcomes, placement=turn_reward_placement)
    batch = build_rows(
        prompts=[row.prompt for row, _ in kept],
        responses=[row.response for row, _ in kept],
        response_masks=[row.mask for row, _ in kept],
        rewards=row_rewards,
        rollout_ids=[row.rollout.rollout_id for row, _ in kept],
        data_ids=[row.rollout.data_id for row, _ in kept],
        is_drop=[drop for _, drop in kept],
        turn_indices=[row.turn for row, _ in kept] if level == "transition" else None,
        rollout_log_probs=[row.log_probs for row, _ in kept] if all(with_log_probs) else None,
        pad_token_id=pad_token_id,
        prompt_width=int(max_prompt_length) if pad_to == "limits" else None,
        response_width=int(max_response_length) if pad_to == "limits" else None,
    )
    add_extra_rewards(batch.batch["token_level_scores"], extra)
    metrics: dict[str, Any] = {
        keys.REWARD: float(np.mean(rewards)) if rewards else 0.0,
        keys.N_SAMPLE: len(kept),
        keys.N_ROLLOUTS: len(rollouts),
        keys.N_ROLLOUTS_W_TRACE: n_with_trace,
        keys.N_ROLLOUTS_W_REWARD: n_with_reward,
        keys.N_TRUNCATED_SAMPLE: n_truncated,
        keys.N_SKIPPED_EMPTY_ROWS: n_empty,
        keys.N_TURNS: len(turn_lengths),
        "response_length/training/avg_by_turn": float(np.mean(turn_lengths)),
        "response_length/training/max_by_turn": int(np.max(turn_lengths)),
        "response_length/training/min_by_turn": int(np.min(turn_lengths)),
    }
    if level == "trajectory":
        metrics[keys.N_UNMERGED_ROLLOUTS] = n_unmerged
        metrics[keys.N_TRACE_MERGE_MISMATCH_ROWS] = min(n_mismatch, MISMATCH_LIMIT)
    return batch, metrics


def row_calls(rollout: Rollout, *, level: Level) -> list[list[int]]:
    """The calls of each of a rollout's candidate rows (before the limits, which skip a row with no trainable token):
    one a row at the transition level; at the trajectory level a new row at each merge mismatch."""
    if level == "transition" or not rollout.calls:
        return [[turn] for turn in range(len(rollout.calls))]
    rows, _ = _merge(rollout)
    return [[turn for turn, _ in row.turn_ends] for row in rows]


def _row(rollout: Rollout, turn: int, call: LLMCall) -> _Row:
    response = _ids(call.response_ids, rollout, turn, "response_ids")
    return _Row(
        rollout=rollout,
        turn=turn,
        prompt=_ids(call.prompt_ids, rollout, turn, "prompt_ids"),
        response=response,
        mask=[1] * len(response),
        log_probs=None if call.log_probs is None else [float(x) for x in call.log_probs],
        turn_ends=[(turn, len(response) - 1)],
    )


def _merge(rollout: Rollout) -> tuple[list[_Row], int]:
    """Trajectory level: merge calls that continue the current context; a call that does not starts a new row."""
    rows = [_row(rollout, 0, rollout.calls[0])]
    context = rows[0].prompt + rows[0].response
    mismatches = 0
    for turn, call in enumerate(rollout.calls[1:], start=1):
        nxt = _row(rollout, turn, call)
        current = rows[-1]
        if nxt.prompt[: len(context)] == context:
            observation = nxt.prompt[len(context) :]  # tool output / template text: context, not trainable
            current.response += observation + nxt.response
            current.mask += [0] * len(observation) + nxt.mask
            current.turn_ends.append((turn, len(current.response) - 1))
            if current.log_probs is not None:
                # a call without log-probs (or with the wrong count) leaves the whole row without them
                usable = nxt.log_probs is not None and len(nxt.log_probs) == len(nxt.response)
                current.log_probs = current.log_probs + [0.0] * len(observation) + nxt.log_probs if usable else None
        else:
            mismatches += 1
            rows.append(nxt)
        context = nxt.prompt + nxt.response
    return rows, mismatches


def _apply_limits(
    rows: list[_Row], max_prompt: int, max_response: int, max_total: int | None
) -> tuple[list[tuple[_Row, bool]], int, int]:
    kept: list[tuple[_Row, bool]] = []
    n_truncated = n_empty = 0
    for row in rows:
        drop = len(row.prompt) > max_prompt
        if drop:
            row.prompt = row.prompt[:max_prompt]
        limit = max_response if max_total is None else min(max_response, max(max_total - len(row.prompt), 0))
        if len(row.response) > limit:
            row.response, row.mask = row.response[:limit], row.mask[:limit]
            if row.log_probs is not None:
                row.log_probs = row.log_probs[:limit]
            n_truncated += 1
        if row.log_probs is not None and len(row.log_probs) != len(row.response):
            row.log_probs = None  # the wrong count of log-probs makes them unusable, as in Agent Lightning
        if sum(row.mask) == 0:
            n_empty += 1
            continue
        kept.append((row, drop))
    return kept, n_truncated, n_empty


def _ids(values: Sequence[int], rollout: Rollout, turn: int, name: str) -> list[int]:
    # One C-level dtype check instead of an isinstance per token (it was most of aggregation's time).
    ids = np.asarray(values)
    if ids.size and (ids.ndim != 1 or ids.dtype.kind not in "iu"):  # floats, bools, strings, nested lists
        raise ValueError(f"rollout {rollout.rollout_id!r} call {turn}: {name} must be a list of integer token ids")
    return ids.tolist()


def _reward(rollout: Rollout, fillna: float) -> float:
    if rollout.reward is None:
        return float(fillna)
    reward = float(rollout.reward)
    if not np.isfinite(reward):
        raise ValueError(f"rollout {rollout.rollout_id!r} has reward {reward}: use None for a missing reward")
    return reward


def _is_count(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
