"""Per-turn rewards on Agent Lightning's rows: where a rollout's intermediate rewards land (a lab extension).

Agent Lightning gives a rollout one reward, and every one of its rows carries it on its last response token. A
:class:`~agl_lab.core.aggregation.Rollout` may also carry ``turn_rewards``: the intermediate reward after each call
that another call follows (one fewer than its calls; the lab's task gives ``−lab.turn_cost`` per wrong guess, the
synthetic generator draws them). Trace aggregation places them one of two ways:

=============  ======================================================================================================
``per_turn``   each call's intermediate reward on the last token of that call's response, the rollout's reward (its
               outcome) on the last token of its last call. A trajectory-level row holding several calls holds each
               of their rewards at its own call's end; a transition-level row holds its call's. A rollout's rows then
               carry different rewards, summing to its return ``R + Σ r``: what the per-turn estimators read
               (:mod:`agl_lab.core.turn_estimators`), and what rollout-level advantage refuses.
``summed``     every row carries the return ``R + Σ r`` on its last token, one reward per rollout as Agent Lightning
               carries it: outcome estimators and rollout-level advantage train on the return.
=============  ======================================================================================================

A short run places them ``per_turn`` when ``algorithm.adv_estimator`` is a per-turn estimator and ``summed``
otherwise (:func:`placement_for`). A call whose response the row limit cut away puts its reward on the row's last
kept token, so a rollout's rewards still add up to its return; a row trace aggregation skips (no trainable token) or
the trainer drops (``is_drop_mask``) takes its calls' rewards with it. Rollouts without ``turn_rewards`` get Agent
Lightning's placement whatever the setting. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from agl_lab.core.keys import ESTIMATOR
from agl_lab.core.turn_estimators import is_turn_estimator

__all__ = ["PLACEMENTS", "add_extra_rewards", "check_turn_rewards", "place_rewards", "placement_for"]

PLACEMENTS = ("per_turn", "summed")


def placement_for(cfg: DictConfig) -> str:
    """``per_turn`` when the config's estimator is a per-turn one, else ``summed`` (module docstring)."""
    return "per_turn" if is_turn_estimator(OmegaConf.select(cfg, ESTIMATOR)) else "summed"


def check_turn_rewards(rollout: Any) -> None:
    """Refuse a rollout whose ``turn_rewards`` are not one finite number per call but the last."""
    rewards = rollout.turn_rewards
    if rewards is None:
        return
    calls = len(rollout.calls)
    if len(rewards) != max(calls - 1, 0):
        raise ValueError(
            f"rollout {rollout.rollout_id!r} has {len(rewards)} turn_rewards for {calls} calls: give one per call that "
            "another call follows (the last call's reward is the rollout's reward)"
        )
    if not all(isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) for r in rewards):
        raise ValueError(f"rollout {rollout.rollout_id!r} has turn_rewards that are not finite numbers: {rewards!r}")


def place_rewards(
    rows: Sequence[Any], outcomes: Sequence[float], *, placement: str
) -> tuple[list[float], list[tuple[int, int, float]]]:
    """Each row's reward on its last token, and the other ``(row, position, reward)`` entries of ``per_turn``.

    ``rows``: the kept rows (each with its ``rollout``, its ``response`` and ``turn_ends``: ``(call, last position)``
    of every call it holds); ``outcomes``: each row's rollout reward (missing ones already filled).
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"turn reward placement must be one of {list(PLACEMENTS)}, got {placement!r}")
    last_rewards: list[float] = []
    extra: list[tuple[int, int, float]] = []
    for index, (row, outcome) in enumerate(zip(rows, outcomes, strict=True)):
        turn_rewards = row.rollout.turn_rewards
        if turn_rewards is None:
            last_rewards.append(outcome)  # Agent Lightning's placement
            continue
        if placement == "summed":
            last_rewards.append(outcome + math.fsum(turn_rewards))
            continue
        last_call, last_position = len(row.rollout.calls) - 1, len(row.response) - 1
        by_position: dict[int, float] = {}
        for call, end in row.turn_ends:
            position = min(end, last_position)
            value = outcome if call == last_call else float(turn_rewards[call])
            by_position[position] = by_position.get(position, 0.0) + value
        last_rewards.append(by_position.pop(last_position, 0.0))
        extra.extend((index, position, value) for position, value in by_position.items())
    return last_rewards, extra


def add_extra_rewards(scores: torch.Tensor, extra: Sequence[tuple[int, int, float]]) -> None:
    """Write the ``per_turn`` entries that are not a row's last token into ``scores`` (rows, R), in its dtype."""
    if extra:
        rows, positions, values = zip(*extra, strict=True)
        scores[torch.tensor(rows), torch.tensor(positions)] = torch.tensor(values, dtype=scores.dtype)
