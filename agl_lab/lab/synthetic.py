"""Synthetic rollouts: seeded agent episodes with chosen call counts, lengths and rewards, as verl rows.

A batch that looks like yours without running an agent: ``n_prompts`` dataset items (GRPO uid groups) ×
``rollouts_per_prompt`` rollouts, each a sequence of LLM calls made of token ids
(:class:`~agl_lab.core.aggregation.LLMCall`) and fed through :func:`~agl_lab.core.aggregation.aggregate`, the trace
aggregation the trainer uses. The rows, masks and adapter metrics are therefore what Agent Lightning
would produce for such episodes.

Every call after the first sees the previous context (prompt + response) plus a tool observation, so at
the ``trajectory`` level the calls merge into one row. With probability ``break_prob`` a call instead
sees a rewritten context (the task prompt and a summary): its prompt no longer continues the row, and
trace aggregation starts a new row there. Rollouts therefore become 1..calls rows, and with
``calls="success"`` failing rollouts take more calls and so split into more rows: the case the
per-rollout settings exist for.

Per-turn rewards (a lab extension, off by default): with ``turn_rewards`` ``per_turn`` or ``summed`` every call
another call follows earns an intermediate reward drawn uniform in ``turn_reward_mean ± turn_reward_spread`` (its
own seeded stream, so the episodes stay those of the same knobs without them), placed as
:mod:`agl_lab.core.turn_rewards` says. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from verl import DataProto

from agl_lab.core.advantage import rollout_level_metrics
from agl_lab.core.aggregation import TRACE_LEVELS, LLMCall, Rollout, aggregate
from agl_lab.core.rows import group_rows
from agl_lab.core.turn_rewards import PLACEMENTS

__all__ = [
    "CALL_PATTERNS",
    "TURN_REWARDS",
    "SyntheticDraws",
    "SyntheticKnobs",
    "knob_range",
    "synthetic_draws",
    "synthetic_history",
    "synthetic_rollouts",
    "synthetic_rows",
]

CALL_PATTERNS = ("fixed", "uniform", "geometric", "success")
TURN_REWARDS = ("off", *PLACEMENTS)  # off: one reward per rollout (Agent Lightning's); else where they are placed

# Token-id ranges kept apart so that a rewritten context can never continue the old one by accident.
_SUMMARY_TOKEN = 2
_TASK_IDS = (100, 500)
_OBSERVATION_IDS = (500, 1000)
_RESPONSE_IDS = (1000, 30000)


def _knob(default: Any, low: float | None = None, high: float | None = None, *, choices: Sequence[str] = ()) -> Any:
    return field(default=default, metadata={"range": (low, high), "choices": tuple(choices)})


@dataclass(frozen=True)
class SyntheticKnobs:
    """The generator's knobs; every one is checked on construction (ValueError naming it and its range).

    Calls per rollout, by ``calls``:
      ``fixed``: ``max_calls``; ``uniform``: uniform in [``min_calls``, ``max_calls``]; ``geometric``:
      ``min_calls``, then one more with probability ``continue_prob`` each time, up to ``max_calls``;
      ``success``: uniform in [``min_calls``, ``max_calls``], and ``fail_extra_calls`` more when the rollout
      fails (the agent keeps trying).
    """

    n_prompts: int = _knob(16, 1, 100_000)  # dataset items = GRPO uid groups
    rollouts_per_prompt: int = _knob(8, 1, 1024)  # verl's rollout.n
    calls: str = _knob("success", choices=CALL_PATTERNS)
    min_calls: int = _knob(1, 1, 64)
    max_calls: int = _knob(3, 1, 64)
    continue_prob: float = _knob(0.5, 0.0, 1.0)  # geometric only
    fail_extra_calls: int = _knob(2, 0, 64)  # success only
    min_tokens: int = _knob(4, 1, 4096)  # response tokens per call, uniform in [min_tokens, max_tokens]
    max_tokens: int = _knob(32, 1, 4096)
    prompt_tokens: int = _knob(16, 1, 4096)  # the task prompt of the first call
    observation_tokens: int = _knob(8, 0, 4096)  # tool output before each later call (not trainable)
    success_prob: float = _knob(0.5, 0.0, 1.0)  # a success earns reward 1
    partial_credit: float = _knob(0.0, 0.0, 1.0)  # a failure earns uniform [0, partial_credit]; 0 = binary
    break_prob: float = _knob(0.2, 0.0, 1.0)  # chance a later call rewrites its context (new row, trajectory level)
    level: str = _knob("trajectory", choices=TRACE_LEVELS)  # agentlightning.trace_aggregator.level
    turn_rewards: str = _knob("off", choices=TURN_REWARDS)  # per-turn rewards: off, per_turn or summed
    turn_reward_mean: float = _knob(0.0, -1.0, 1.0)  # an intermediate reward is uniform in mean ± spread
    turn_reward_spread: float = _knob(0.0, 0.0, 1.0)
    max_prompt_length: int = _knob(2048, 1, 1_000_000)  # longer prompts are cut and the row marked is_drop_mask
    max_response_length: int = _knob(8192, 1, 1_000_000)  # longer responses keep their first tokens
    seed: int = _knob(0, 0, 2**32 - 1)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_knob(f, getattr(self, f.name))
        for low, high in (("min_calls", "max_calls"), ("min_tokens", "max_tokens")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(
                    f"SyntheticKnobs.{low} ({getattr(self, low)}) must be <= {high} ({getattr(self, high)})"
                )
        if self.turn_rewards == "per_turn" and self.level == "trajectory" and self.observation_tokens == 0:
            raise ValueError(
                "SyntheticKnobs.observation_tokens must be >= 1 for per-turn rewards at the trajectory level: a turn "
                "is a run of trainable tokens, and calls with nothing between them merge into one"
            )


def knob_range(name: str) -> tuple[float | None, float | None]:
    """The (low, high) bounds of a numeric knob, as validated (widgets use the same)."""
    return _FIELDS[name].metadata["range"]


def synthetic_rows(knobs: SyntheticKnobs | None = None) -> tuple[DataProto, dict[str, Any]]:
    """Generate the rollouts of ``knobs`` and aggregate them into verl rows; returns ``(rows, adapter metrics)``."""
    knobs = knobs or SyntheticKnobs()
    return aggregate(
        synthetic_rollouts(knobs),
        level=knobs.level,
        max_prompt_length=knobs.max_prompt_length,
        max_response_length=knobs.max_response_length,
        # The limits (2048 + 8192 by default) only cut rows here: padding 10k rows to them would take gigabytes.
        pad_to="longest",
        turn_reward_placement="summed" if knobs.turn_rewards == "summed" else "per_turn",
    )


def synthetic_rollouts(knobs: SyntheticKnobs | None = None) -> list[Rollout]:
    """The agent episodes of ``knobs``: ``n_prompts × rollouts_per_prompt`` rollouts, reproducible from ``seed``.

    Rollout ids are ``"p{prompt}/r{k}"`` and data ids ``"p{prompt}"``. A success has reward 1.0.
    """
    knobs = knobs or SyntheticKnobs()
    draws = synthetic_draws(knobs)
    n_rollouts, rewards, n_calls = len(draws.rewards), draws.rewards, draws.n_calls
    response_lens, breaks = draws.response_lens, draws.breaks
    call_rewards = None if draws.turn_rewards is None else draws.turn_rewards.tolist()
    response_ids, observation_ids = draws.response_ids.tolist(), draws.observation_ids.tolist()
    task_prompts = draws.task_prompts.tolist()

    rollouts = []
    call = token = 0
    width = knobs.observation_tokens
    for index in range(n_rollouts):
        prompt_index, k = divmod(index, knobs.rollouts_per_prompt)
        task = task_prompts[prompt_index]
        calls = []
        context: list[int] = []
        for turn in range(int(n_calls[index])):
            response = response_ids[token : token + response_lens[call]]
            observation = observation_ids[call * width : (call + 1) * width]
            if turn == 0:
                prompt = task
            elif breaks[call]:  # the agent rewrote its context: this call does not continue the row
                prompt = [*task, _SUMMARY_TOKEN, *observation]
            else:
                prompt = context + observation
            calls.append(LLMCall(prompt, response))
            context = prompt + response
            token += response_lens[call]
            call += 1
        rollouts.append(
            Rollout(
                rollout_id=f"p{prompt_index}/r{k}",
                data_id=f"p{prompt_index}",
                calls=calls,
                reward=rewards[index],
                sample_idx_in_step=prompt_index,
                # the calls but the last earn their intermediate reward (None: off)
                turn_rewards=None if call_rewards is None else tuple(call_rewards[call - len(calls) : call - 1]),
            )
        )
    return rollouts


@dataclass(frozen=True)
class SyntheticDraws:
    """The generator's random draws for ``knobs``, in the order it draws them (token ids only when asked)."""

    rewards: np.ndarray  # (rollouts,) 1.0 on success, else partial credit
    n_calls: np.ndarray  # (rollouts,) LLM calls of each rollout
    response_lens: np.ndarray  # (calls,) response tokens of each call
    breaks: np.ndarray  # (calls,) bool: the call rewrites its context (ignored on a rollout's first call)
    response_ids: np.ndarray | None = None  # (Σ response_lens,)
    observation_ids: np.ndarray | None = None  # (calls × observation_tokens,)
    task_prompts: np.ndarray | None = None  # (prompts, prompt_tokens)
    turn_rewards: np.ndarray | None = None  # (calls,) each call's intermediate reward (a rollout's last: unused)


def synthetic_draws(knobs: SyntheticKnobs, *, token_ids: bool = True) -> SyntheticDraws:
    """The random draws behind :func:`synthetic_rollouts` (and the vectorized path, which needs no token ids)."""
    rng = np.random.default_rng(knobs.seed)
    n_rollouts = knobs.n_prompts * knobs.rollouts_per_prompt
    success = rng.random(n_rollouts) < knobs.success_prob  # (rollouts,)
    rewards = np.where(success, 1.0, knobs.partial_credit * rng.random(n_rollouts))  # (rollouts,)
    n_calls = _call_counts(knobs, success, rng)  # (rollouts,)
    total_calls = int(n_calls.sum())
    response_lens = rng.integers(knobs.min_tokens, knobs.max_tokens + 1, total_calls)  # (calls,)
    breaks = rng.random(total_calls) < knobs.break_prob  # (calls,)
    turn_rewards = None  # drawn from their own stream: the episodes do not depend on whether they are on
    if knobs.turn_rewards != "off":
        uniform = np.random.default_rng([knobs.seed, 1]).uniform(-1.0, 1.0, total_calls)  # (calls,)
        turn_rewards = knobs.turn_reward_mean + knobs.turn_reward_spread * uniform
    if not token_ids:
        return SyntheticDraws(rewards, n_calls, response_lens, breaks, turn_rewards=turn_rewards)
    response_ids = rng.integers(*_RESPONSE_IDS, int(response_lens.sum()))
    observation_ids = rng.integers(*_OBSERVATION_IDS, total_calls * knobs.observation_tokens)
    task_prompts = rng.integers(*_TASK_IDS, (knobs.n_prompts, knobs.prompt_tokens))
    return SyntheticDraws(
        rewards, n_calls, response_lens, breaks, response_ids, observation_ids, task_prompts, turn_rewards
    )


def synthetic_history(knobs: SyntheticKnobs | None = None, *, success_probs: Sequence[float]) -> pd.DataFrame:
    """One synthetic batch per step as the success rate moves through ``success_probs`` (a policy learning).

    Returns one line per step: ``step``, ``success_prob`` and the adapter and rollout-level metrics under
    Agent Lightning's names (``training/rollout_level_advantage/n_rows``, ``.../n_rollouts``, ...). With
    ``calls="success"`` fewer failures mean fewer rows, so ``n_rows / n_rollouts`` drifts from step to step.
    """
    knobs = knobs or SyntheticKnobs()
    lines = []
    for step, success_prob in enumerate(success_probs):
        step_knobs = dataclasses.replace(knobs, success_prob=float(success_prob), seed=knobs.seed + step)
        rows, metrics = synthetic_rows(step_knobs)
        rollouts = group_rows(rows.non_tensor_batch["rollout_id_list"], field="rollout_id_list")
        lines.append({"step": step, "success_prob": float(success_prob), **metrics, **rollout_level_metrics(rollouts)})
    return pd.DataFrame(lines)


def _call_counts(knobs: SyntheticKnobs, success: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n = len(success)
    if knobs.calls == "fixed":
        return np.full(n, knobs.max_calls, dtype=np.int64)
    if knobs.calls == "geometric":
        # failures before the first "stop" of a coin with stop chance 1 - continue_prob, capped at max_calls
        stop = 1.0 - knobs.continue_prob
        extra = rng.geometric(stop, n) - 1 if stop > 0 else np.full(n, knobs.max_calls)
        return np.minimum(knobs.min_calls + extra, knobs.max_calls).astype(np.int64)
    counts = rng.integers(knobs.min_calls, knobs.max_calls + 1, n)
    if knobs.calls == "success":
        counts = counts + np.where(success, 0, knobs.fail_extra_calls)
    return counts.astype(np.int64)


def _check_knob(f: dataclasses.Field, value: Any) -> None:
    name = f"SyntheticKnobs.{f.name}"
    choices = f.metadata["choices"]
    if choices:
        if value not in choices:
            nearest = difflib.get_close_matches(str(value), choices, n=1)
            hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
            raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}{hint}")
        return
    low, high = f.metadata["range"]
    if isinstance(f.default, int):
        ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        kind = "an integer"
    else:
        ok = isinstance(value, int | float | np.number) and not isinstance(value, bool) and np.isfinite(value)
        kind = "a number"
    if not ok or not low <= value <= high:
        raise ValueError(f"{name} must be {kind} in [{low}, {high}], got {value!r}")


_FIELDS = {f.name: f for f in dataclasses.fields(SyntheticKnobs)}
