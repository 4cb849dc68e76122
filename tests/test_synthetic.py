import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_lab.core.groups import group_rows
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_history, synthetic_rollouts, synthetic_rows


def rows_per_rollout(rows):
    """{rollout_id: number of rows} for a batch."""
    groups = group_rows(rows.non_tensor_batch["rollout_id_list"], field="rollout_id_list")
    return dict(zip(groups.ids.tolist(), groups.sizes.tolist(), strict=True))


def rewards_of(rollouts):
    return {r.rollout_id: r.reward for r in rollouts}


def small(**kwargs):
    return SyntheticKnobs(**{"n_prompts": 6, "rollouts_per_prompt": 4, **kwargs})


def test_default_batch_has_every_rollout_and_the_adapter_fields():
    knobs = small()
    rows, metrics = synthetic_rows(knobs)
    sizes = rows_per_rollout(rows)
    assert len(sizes) == 6 * 4 == metrics["training/n_rollouts"]
    assert set(rows.non_tensor_batch["data_id_list"]) == {f"p{i}" for i in range(6)}
    ids = zip(rows.non_tensor_batch["rollout_id_list"], rows.non_tensor_batch["data_id_list"], strict=True)
    assert all(rollout_id.startswith(data_id + "/") for rollout_id, data_id in ids)
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert key in rows.batch.keys()
    # binary rewards (partial_credit 0): every row carries 0 or 1 on its last token
    assert set(rows.batch["token_level_scores"].sum(-1).tolist()) <= {0.0, 1.0}
    assert metrics["training/n_sample"] == len(rows)


def test_same_seed_same_batch_other_seed_other_batch():
    a, _ = synthetic_rows(small(seed=3))
    b, _ = synthetic_rows(small(seed=3))
    c, _ = synthetic_rows(small(seed=4))
    for key in a.batch.keys():
        assert a.batch[key].equal(b.batch[key]), key
    assert a.batch["responses"].shape != c.batch["responses"].shape or not a.batch["responses"].equal(
        c.batch["responses"]
    )


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        # fixed: every rollout makes max_calls = 3 calls, one row per call at the transition level
        (dict(calls="fixed", min_calls=1, max_calls=3), lambda ok: 3),
        # geometric with no continuation: always min_calls; with certain continuation: always max_calls
        (dict(calls="geometric", min_calls=2, max_calls=5, continue_prob=0.0), lambda ok: 2),
        (dict(calls="geometric", min_calls=2, max_calls=5, continue_prob=1.0), lambda ok: 5),
        # success: 2 calls, and fail_extra_calls = 3 more for a failing rollout
        (dict(calls="success", min_calls=2, max_calls=2, fail_extra_calls=3), lambda ok: 2 if ok else 5),
    ],
)
def test_call_patterns_give_the_documented_call_counts(knobs, expected):
    knobs = small(level="transition", **knobs)
    rollouts = synthetic_rollouts(knobs)
    rows, _ = synthetic_rows(knobs)
    sizes = rows_per_rollout(rows)
    for rollout in rollouts:
        assert len(rollout.calls) == expected(rollout.reward == 1.0) == sizes[rollout.rollout_id]


def test_uniform_and_geometric_counts_stay_in_range():
    for calls in ("uniform", "geometric"):
        counts = [len(r.calls) for r in synthetic_rollouts(small(n_prompts=40, calls=calls, min_calls=2, max_calls=4))]
        assert min(counts) >= 2 and max(counts) <= 4
        assert len(set(counts)) > 1  # 160 rollouts: more than one count drawn


def test_failing_rollouts_split_into_more_rows():
    rows, _ = synthetic_rows(small(n_prompts=60, calls="success", fail_extra_calls=2, break_prob=0.5))
    sizes = rows_per_rollout(rows)
    rewards = rewards_of(synthetic_rollouts(small(n_prompts=60, calls="success", fail_extra_calls=2, break_prob=0.5)))
    failed = [sizes[r] for r, reward in rewards.items() if reward == 0.0]
    succeeded = [sizes[r] for r, reward in rewards.items() if reward == 1.0]
    assert np.mean(failed) > np.mean(succeeded) + 0.5


def test_break_prob_decides_whether_calls_merge():
    calls = dict(calls="fixed", max_calls=3, observation_tokens=2)
    merged, metrics = synthetic_rows(small(break_prob=0.0, **calls))
    assert set(rows_per_rollout(merged).values()) == {1}
    assert metrics["training/n_trace_merge_mismatch_rows"] == 0
    # 3 calls merged into one row: 2 observations of 2 tokens each, masked out of the loss
    mask = merged.batch["response_mask"]
    attention = merged.batch["attention_mask"][:, merged.batch["prompts"].shape[1] :]
    assert ((attention - mask).sum(-1) == 4).all()
    split, metrics = synthetic_rows(small(break_prob=1.0, **calls))
    assert set(rows_per_rollout(split).values()) == {3}
    assert metrics["training/n_trace_merge_mismatch_rows"] == 2 * 24


def test_tokens_per_call_and_rewards_follow_the_knobs():
    rows, _ = synthetic_rows(small(level="transition", min_tokens=5, max_tokens=7))
    lengths = rows.batch["response_mask"].sum(-1)
    assert lengths.min() >= 5 and lengths.max() <= 7
    rewards = list(rewards_of(synthetic_rollouts(small(partial_credit=0.4, n_prompts=20))).values())
    partial = [r for r in rewards if r != 1.0]
    assert partial and all(0.0 <= r <= 0.4 for r in partial) and len(set(partial)) > 1
    assert set(rewards_of(synthetic_rollouts(small(success_prob=0.0))).values()) == {0.0}
    assert set(rewards_of(synthetic_rollouts(small(success_prob=1.0))).values()) == {1.0}


def test_the_aggregator_limits_apply():
    rows, metrics = synthetic_rows(small(level="transition", max_tokens=8, min_tokens=8, max_response_length=5))
    assert metrics["training/n_truncated_sample"] == len(rows)
    assert rows.batch["response_mask"].sum(-1).max() == 5
    # at the transition level later calls see the whole context: long prompts are cut and marked
    rows, _ = synthetic_rows(small(level="transition", calls="fixed", max_calls=3, max_prompt_length=20))
    assert rows.batch["is_drop_mask"].any() and not rows.batch["is_drop_mask"].all()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_prompts": -1}, "SyntheticKnobs.n_prompts must be an integer in [1, 100000], got -1"),
        ({"rollouts_per_prompt": 0}, "SyntheticKnobs.rollouts_per_prompt must be an integer in [1, 1024], got 0"),
        ({"success_prob": 1.5}, "SyntheticKnobs.success_prob must be a number in [0.0, 1.0], got 1.5"),
        ({"break_prob": -0.1}, "SyntheticKnobs.break_prob must be a number in [0.0, 1.0], got -0.1"),
        ({"max_tokens": 0}, "SyntheticKnobs.max_tokens must be an integer in [1, 4096], got 0"),
        ({"n_prompts": 2.5}, "SyntheticKnobs.n_prompts must be an integer in [1, 100000], got 2.5"),
        ({"n_prompts": True}, "SyntheticKnobs.n_prompts must be an integer in [1, 100000], got True"),
        ({"partial_credit": float("nan")}, "SyntheticKnobs.partial_credit must be a number in [0.0, 1.0], got nan"),
        ({"calls": "geometrc"}, "SyntheticKnobs.calls must be one of ['fixed', 'uniform', 'geometric', 'success'], "),
        ({"level": "turn"}, "SyntheticKnobs.level must be one of ['transition', 'trajectory'], got 'turn'"),
        ({"min_tokens": 9, "max_tokens": 8}, "SyntheticKnobs.min_tokens (9) must be <= max_tokens (8)"),
        ({"min_calls": 4, "max_calls": 3}, "SyntheticKnobs.min_calls (4) must be <= max_calls (3)"),
    ],
)
def test_out_of_range_knobs_name_the_knob_and_its_range(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        SyntheticKnobs(**change)


def test_misspelt_pattern_suggests_the_nearest():
    with pytest.raises(ValueError, match=r"got 'geometrc' \(did you mean 'geometric'\?\)"):
        SyntheticKnobs(calls="geometrc")


@settings(max_examples=25, deadline=None)
@given(
    n_prompts=st.integers(1, 3),
    n=st.integers(1, 3),
    calls=st.sampled_from(["fixed", "uniform", "geometric", "success"]),
    max_calls=st.integers(1, 4),
    break_prob=st.floats(0, 1),
    seed=st.integers(0, 1000),
)
def test_trajectory_rows_never_outnumber_calls(n_prompts, n, calls, max_calls, break_prob, seed):
    knobs = SyntheticKnobs(
        n_prompts=n_prompts, rollouts_per_prompt=n, calls=calls, max_calls=max_calls, break_prob=break_prob, seed=seed
    )
    transition, _ = synthetic_rows(SyntheticKnobs(**{**knobs.__dict__, "level": "transition"}))
    trajectory, _ = synthetic_rows(knobs)
    per_call = rows_per_rollout(transition)
    per_row = rows_per_rollout(trajectory)
    assert per_call.keys() == per_row.keys()  # same draws: same rollouts
    # a trajectory row is one call or a merge of several, so a rollout has between 1 and its calls in rows
    assert all(1 <= per_row[r] <= per_call[r] for r in per_call)
    # trainable tokens do not depend on the level: merging only adds masked observation tokens
    assert transition.batch["response_mask"].sum() == trajectory.batch["response_mask"].sum()


def test_history_drifts_as_the_policy_learns():
    history = synthetic_history(small(n_prompts=20, break_prob=0.5), success_probs=[0.0, 0.5, 1.0])
    assert history["step"].tolist() == [0, 1, 2]
    assert history["success_prob"].tolist() == [0.0, 0.5, 1.0]
    n_rows = history["training/rollout_level_advantage/n_rows"]
    n_rollouts = history["training/rollout_level_advantage/n_rollouts"]
    assert n_rollouts.tolist() == [80, 80, 80]
    # failing rollouts take 2 more calls, so fewer failures mean fewer rows
    assert n_rows.iloc[0] > n_rows.iloc[1] > n_rows.iloc[2] >= 80
    assert history["training/reward"].tolist() == [0.0, pytest.approx(0.5, abs=0.15), 1.0]
