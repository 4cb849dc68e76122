"""Synthetic rows in milliseconds: trace aggregation of the generator's episodes, vectorized, as compact rows.

:func:`agl_lab.lab.synthetic.synthetic_rows` builds every episode's LLM calls as token-id lists and runs them
through :func:`agl_lab.core.aggregation.aggregate`: about a second at 10,000 rows. The generator's episodes
have a structure that makes trace aggregation computable in closed form, so this module computes its outcome
from the same random draws (:func:`agl_lab.lab.synthetic.synthetic_draws`) with numpy alone:

* ``trajectory``: a call starts a new row on a rollout's first turn and where it rewrites its context (its prompt
  is the task, a summary token and the observation, which never continues the previous context); every other call
  continues the row, appending its observation (mask 0) and its response (mask 1). A row's prompt is its first
  call's: the task, or the task + 1 + the observation after a rewrite.
* ``transition``: every call is a row, all of its response trainable; its prompt is its context: the last reset's
  prompt plus every response and observation since.

Then Agent Lightning's limits: a response over the limit keeps its first tokens, a prompt over the limit is cut
and its row marked ``is_drop_mask``, a row left without a trainable token is skipped. The result is
:class:`agl_lab.lab.compact_rows.CompactRows` (what the weighting reads, with each row's prompt and response
lengths) and the adapter's metrics; tests hold both equal to aggregating :func:`synthetic_rollouts` on random
knobs. The live panel uses it for every generator change. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from agl_lab.core import keys
from agl_lab.core.rows import SCORE_DTYPE
from agl_lab.lab.compact_rows import CompactRows
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_draws

__all__ = ["fast_synthetic_rows"]


def fast_synthetic_rows(knobs: SyntheticKnobs | None = None) -> tuple[CompactRows, dict[str, Any]]:
    """The rows :func:`agl_lab.lab.synthetic.synthetic_rows` makes for ``knobs``, as compact rows, and its metrics."""
    knobs = knobs or SyntheticKnobs()
    if knobs.turn_rewards != "off":  # rewards placed per call: the rows' own sums, as aggregate() rounds them
        raise ValueError(
            "fast_synthetic_rows has no per-turn rewards (SyntheticKnobs.turn_rewards): use synthetic_rows"
        )
    draws = synthetic_draws(knobs, token_ids=False)
    n_rollouts = len(draws.rewards)
    total_calls = len(draws.response_lens)
    rollout = np.repeat(np.arange(n_rollouts), draws.n_calls)  # (calls,)
    first_call = np.concatenate([[0], np.cumsum(draws.n_calls)[:-1]]).astype(np.int64)  # (rollouts,)
    turn = np.arange(total_calls) - first_call[rollout]  # (calls,)
    resets = (turn == 0) | draws.breaks  # (calls,): the call's prompt does not continue the context
    segment = np.cumsum(resets) - 1  # (calls,): the trajectory row of each call
    response = draws.response_lens.astype(np.int64)  # (calls,)
    obs = knobs.observation_tokens
    base_prompt = np.where(turn == 0, knobs.prompt_tokens, knobs.prompt_tokens + 1 + obs)  # (calls,) at a reset

    if knobs.level == "trajectory":
        row_call = np.flatnonzero(resets)  # (rows,) the first call of each row
        appended = np.where(resets, 0, obs)  # (calls,) observation tokens appended before the call's response
        prompt_length = base_prompt[row_call]
        response_length = np.bincount(segment, weights=appended + response).astype(np.int64)  # (rows,)
        # trainable tokens within the first max_response_length: each call's response starts after what precedes it
        end = _segment_cumsum(appended + response, segment)  # (calls,) end of the call's part in its row
        begin = end - response
        kept = np.clip(np.minimum(end, knobs.max_response_length) - begin, 0, None)
        trainable = np.bincount(segment, weights=kept).astype(np.int64)
        row_rollout = rollout[row_call]
    else:
        # the context grows by each response and the next call's observation, from the last reset on
        grown = _segment_cumsum(response + obs, segment) - (response + obs)  # (calls,) growth before this call
        prompt_length = base_prompt[np.flatnonzero(resets)][segment] + grown
        response_length = response
        trainable = np.minimum(response, knobs.max_response_length)
        row_rollout = rollout

    truncated = response_length > knobs.max_response_length
    keep = trainable > 0
    rows = np.flatnonzero(keep)
    rollout_ids, data_ids = _ids(knobs.n_prompts, knobs.rollouts_per_prompt)
    response_kept = np.minimum(response_length[rows], knobs.max_response_length)
    compact = CompactRows(
        rollout_id=rollout_ids[row_rollout[rows]],
        data_id=data_ids[row_rollout[rows]],
        tokens=trainable[rows],
        # the reward as aggregate() stores it: rounded to the scores' dtype (bf16, as Agent Lightning)
        reward=torch.from_numpy(draws.rewards[row_rollout[rows]]).to(SCORE_DTYPE).double().numpy(),
        is_drop=prompt_length[rows] > knobs.max_prompt_length,
        response_width=int(response_kept.max(initial=0)),  # as synthetic_rows pads: to the longest row
        score_dtype=SCORE_DTYPE,
        prompt_length=np.minimum(prompt_length[rows], knobs.max_prompt_length),
        response_length=response_kept,
    )
    return compact, _metrics(knobs, draws, turn=turn, segment=segment, rows=len(rows), truncated=truncated, keep=keep)


@functools.lru_cache(maxsize=8)
def _ids(n_prompts: int, per_prompt: int) -> tuple[np.ndarray, np.ndarray]:
    """Every rollout's id and data id, as :func:`agl_lab.lab.synthetic.synthetic_rollouts` names them."""
    prompt, sample = np.divmod(np.arange(n_prompts * per_prompt), per_prompt)
    rollout_ids = np.array([f"p{p}/r{k}" for p, k in zip(prompt.tolist(), sample.tolist(), strict=True)], object)
    return rollout_ids, np.array([f"p{p}" for p in prompt.tolist()], dtype=object)


def _segment_cumsum(values: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sums of ``values`` restarting at each new ``segment`` (segments are contiguous)."""
    total = np.cumsum(values)
    starts = np.flatnonzero(np.diff(segment, prepend=-1))  # (segments,) first index of each
    before = np.concatenate([[0], total[starts[1:] - 1]]) if len(starts) else np.zeros(0)
    return total - before[segment]


def _metrics(knobs, draws, *, turn, segment, rows, truncated, keep) -> dict[str, Any]:
    """Agent Lightning's adapter metrics, as :func:`agl_lab.core.aggregation.aggregate` reports them."""
    lengths = draws.response_lens
    metrics: dict[str, Any] = {
        keys.REWARD: float(np.mean(draws.rewards)) if len(draws.rewards) else 0.0,
        keys.N_SAMPLE: rows,
        keys.N_ROLLOUTS: len(draws.rewards),
        keys.N_ROLLOUTS_W_TRACE: int((draws.n_calls > 0).sum()),
        keys.N_ROLLOUTS_W_REWARD: len(draws.rewards),
        keys.N_TRUNCATED_SAMPLE: int(truncated.sum()),
        keys.N_SKIPPED_EMPTY_ROWS: int((~keep).sum()),
        keys.N_TURNS: len(lengths),
        "response_length/training/avg_by_turn": float(np.mean(lengths)),
        "response_length/training/max_by_turn": int(np.max(lengths)),
        "response_length/training/min_by_turn": int(np.min(lengths)),
    }
    if knobs.level == "trajectory":
        rows_per_rollout = np.bincount(np.repeat(np.arange(len(draws.n_calls)), draws.n_calls)[_first(segment)])
        metrics[keys.N_UNMERGED_ROLLOUTS] = int((rows_per_rollout > 1).sum())
        metrics[keys.N_TRACE_MERGE_MISMATCH_ROWS] = int(((turn > 0) & draws.breaks).sum())
    return metrics


def _first(segment: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.diff(segment, prepend=-1))
