"""The vectorized synthetic path gives the rows trace aggregation gives: compared through aggregate() on random
knobs, row by row (ids, trainable tokens, reward, drop flag, prompt and response lengths) and metric by metric.

The comparison does not depend on padding width, on the order aggregate() puts rollouts in, or on the scores'
dtype: rows are matched per rollout, in their order within it, and rewards compared in aggregate()'s dtype."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_lab.core.aggregation import aggregate
from agl_lab.lab.compact_rows import compact_rows
from agl_lab.lab.synthetic import CALL_PATTERNS, SyntheticKnobs, synthetic_rollouts, synthetic_rows
from agl_lab.lab.synthetic_fast import fast_synthetic_rows


def by_rollout(compact):
    """{rollout id: [(tokens, drop, prompt length, response length), ...] in row order}, and {id: reward}."""
    rows, rewards = {}, {}
    for i, rollout_id in enumerate(compact.rollout_id):
        line = (int(compact.tokens[i]), bool(compact.is_drop[i]), int(compact.prompt_length[i]),
                int(compact.response_length[i]), compact.data_id[i])  # fmt: skip
        rows.setdefault(rollout_id, []).append(line)
        rewards[rollout_id] = compact.reward[i]
    return rows, rewards


@st.composite
def knobs(draw):
    low_calls, low_tokens = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    return SyntheticKnobs(
        n_prompts=draw(st.integers(1, 4)),
        rollouts_per_prompt=draw(st.integers(1, 4)),
        calls=draw(st.sampled_from(CALL_PATTERNS)),
        min_calls=low_calls,
        max_calls=low_calls + draw(st.integers(0, 3)),
        continue_prob=draw(st.sampled_from([0.0, 0.5, 1.0])),
        fail_extra_calls=draw(st.integers(0, 2)),
        min_tokens=low_tokens,
        max_tokens=low_tokens + draw(st.integers(0, 8)),
        prompt_tokens=draw(st.integers(1, 6)),
        observation_tokens=draw(st.integers(0, 3)),
        success_prob=draw(st.sampled_from([0.0, 0.5, 1.0])),
        partial_credit=draw(st.sampled_from([0.0, 0.7])),
        break_prob=draw(st.sampled_from([0.0, 0.3, 1.0])),
        level=draw(st.sampled_from(["trajectory", "transition"])),
        max_prompt_length=draw(st.integers(4, 40)),  # small limits: prompts get cut and marked, responses truncated
        max_response_length=draw(st.integers(2, 40)),
        seed=draw(st.integers(0, 1000)),
    )


@settings(max_examples=60, deadline=None)
@given(k=knobs())
def test_fast_rows_are_the_rows_trace_aggregation_makes(k):
    slow_rows, slow_metrics = aggregate(
        synthetic_rollouts(k), level=k.level, max_prompt_length=k.max_prompt_length,
        max_response_length=k.max_response_length,
    )  # fmt: skip
    slow = compact_rows(slow_rows)
    fast, fast_metrics = fast_synthetic_rows(k)
    slow_lines, slow_rewards = by_rollout(slow)
    fast_lines, fast_rewards = by_rollout(fast)
    assert fast_lines == slow_lines
    dtype = slow_rows.batch["token_level_scores"].dtype
    for rollout_id, reward in fast_rewards.items():  # in aggregate()'s score dtype (the analysis computes in it)
        assert torch.tensor(reward).to(dtype) == torch.tensor(slow_rewards[rollout_id]).to(dtype)
    assert fast_metrics.keys() == slow_metrics.keys()
    for key, value in slow_metrics.items():
        assert np.isclose(fast_metrics[key], value, rtol=1e-12), key
    assert len(fast) == len(slow) and fast.tokens.sum() == slow.tokens.sum()


def test_the_default_batch_in_detail():
    # the panel's default: 16 prompts × 8 rollouts, failures make 2 more calls, 20% of later calls rewrite context
    k = SyntheticKnobs()
    slow_rows, _ = synthetic_rows(k)  # trace aggregation, padded to the longest row as the lab's synthetic rows are
    fast, _ = fast_synthetic_rows(k)
    assert by_rollout(fast) == by_rollout(compact_rows(slow_rows))
    assert fast.response_width == slow_rows.batch["responses"].shape[-1] < k.max_response_length
