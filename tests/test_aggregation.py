import re

import pytest
import torch

from agl_lab import compose_config
from agl_lab.core.aggregation import LLMCall, Rollout, aggregate, aggregation_limits


def agg(rollouts, level="trajectory", max_prompt=100, max_response=100, **kwargs):
    return aggregate(rollouts, level=level, max_prompt_length=max_prompt, max_response_length=max_response, **kwargs)


def rows_of(batch):
    """(prompt, response, mask) token lists of each row, padding removed."""
    out = []
    for i in range(len(batch)):
        attn = batch.batch["attention_mask"][i]
        width = batch.batch["prompts"].shape[1]
        prompt = batch.batch["prompts"][i][attn[:width].bool()].tolist()
        valid = attn[width:].bool()
        out.append(
            (prompt, batch.batch["responses"][i][valid].tolist(), batch.batch["response_mask"][i][valid].tolist())
        )
    return out


# A three-call agent: call 2 continues call 1 with a tool observation [9, 9]; call 3 has a rewritten context.
CALLS = [
    LLMCall([1, 2], [3, 4]),
    LLMCall([1, 2, 3, 4, 9, 9], [5]),
    LLMCall([1, 7], [8, 8, 8]),
]


def test_trajectory_merges_continuations_and_splits_on_mismatch():
    batch, metrics = agg([Rollout("r0", "q0", CALLS, reward=1.0)])
    assert rows_of(batch) == [
        # call 1 + observation [9, 9] (mask 0) + call 2's response
        ([1, 2], [3, 4, 9, 9, 5], [1, 1, 0, 0, 1]),
        # call 3 does not start with [1, 2, 3, 4, 9, 9, 5]: a new row from its full prompt
        ([1, 7], [8, 8, 8], [1, 1, 1]),
    ]
    assert batch.non_tensor_batch["rollout_id_list"].tolist() == ["r0", "r0"]
    assert batch.non_tensor_batch["data_id_list"].tolist() == ["q0", "q0"]
    assert "turn_index_list" not in batch.non_tensor_batch
    assert metrics["training/n_trace_merge_mismatch_rows"] == 1
    assert metrics["training/n_unmerged_rollouts"] == 1
    assert metrics["training/n_sample"] == 2 and metrics["training/n_turns"] == 3
    # the reward sits on each row's last response token (row 0: index 4, row 1: index 2)
    assert batch.batch["token_level_scores"][0].tolist()[:5] == [0, 0, 0, 0, 1.0]
    assert batch.batch["token_level_scores"][1].tolist()[:3] == [0, 0, 1.0]


def test_a_continuation_without_observation_and_the_mismatch_after_a_merge():
    calls = [LLMCall([1], [2]), LLMCall([1, 2], [3]), LLMCall([1, 2, 3, 4], [5]), LLMCall([6], [7])]
    batch, metrics = agg([Rollout("r", "q", calls, reward=0.0)])
    assert rows_of(batch) == [([1], [2, 3, 4, 5], [1, 1, 0, 1]), ([6], [7], [1])]
    assert metrics["training/n_trace_merge_mismatch_rows"] == 1


def test_transition_level_one_row_per_call():
    batch, metrics = agg([Rollout("r0", "q0", CALLS, reward=0.5)], level="transition")
    assert rows_of(batch) == [([1, 2], [3, 4], [1, 1]), ([1, 2, 3, 4, 9, 9], [5], [1]), ([1, 7], [8, 8, 8], [1, 1, 1])]
    assert batch.non_tensor_batch["turn_index_list"].tolist() == [0, 1, 2]
    assert "training/n_unmerged_rollouts" not in metrics
    assert batch.batch["token_level_scores"].sum(-1).tolist() == [0.5, 0.5, 0.5]


def test_limits_truncate_responses_mark_long_prompts_and_skip_empty_rows():
    rollouts = [
        Rollout("long-response", "q", [LLMCall([1], [2, 3, 4, 5])], reward=1.0),
        Rollout("long-prompt", "q", [LLMCall([1, 2, 3, 4], [5])], reward=1.0),
        Rollout("empty", "q", [LLMCall([1], [])], reward=1.0),
    ]
    batch, metrics = agg(rollouts, level="transition", max_prompt=3, max_response=2)
    assert rows_of(batch) == [([1], [2, 3], [1, 1]), ([1, 2, 3], [5], [1])]  # first tokens of each are kept
    assert batch.batch["is_drop_mask"].tolist() == [False, True]
    assert metrics["training/n_truncated_sample"] == 1
    assert metrics["training/n_skipped_empty_rows"] == 1


def test_row_left_with_only_observation_tokens_after_truncation_is_skipped():
    # call 1 answers nothing; call 2 continues with observation [9] then answers [3]: response [9, 3], mask [0, 1].
    # Truncated to 1 token the row keeps only the observation, nothing trainable, so it is skipped.
    calls = [LLMCall([1], []), LLMCall([1, 9], [3])]
    with pytest.raises(RuntimeError, match="zero training rows"):
        agg([Rollout("r", "q", calls, 1.0)], max_response=1)
    batch, metrics = agg([Rollout("r", "q", calls, 1.0), Rollout("s", "q", [LLMCall([1], [2])], 1.0)], max_response=1)
    assert len(batch) == 1 and metrics["training/n_skipped_empty_rows"] == 1
    assert metrics["training/n_truncated_sample"] == 1


def test_missing_reward_is_filled_and_counted():
    rollouts = [Rollout("a", "q", [LLMCall([1], [2])], reward=None), Rollout("b", "q", [LLMCall([1], [2])], 1.0)]
    batch, metrics = agg(rollouts, reward_fillna_value=-0.5)
    assert batch.batch["token_level_scores"].sum(-1).tolist() == [-0.5, 1.0]
    assert metrics["training/n_rollouts_w_reward"] == 1
    assert metrics["training/reward"] == pytest.approx(0.25)


def test_rollout_without_calls_is_skipped_with_a_warning():
    with pytest.warns(UserWarning, match="No triplets found for training rollout r-empty"):
        batch, metrics = agg([Rollout("r-empty", "q", [], 1.0), Rollout("r", "q", [LLMCall([1], [2])], 0.0)])
    assert len(batch) == 1
    assert metrics["training/n_rollouts"] == 2 and metrics["training/n_rollouts_w_trace"] == 1


def test_log_probs_kept_when_every_row_has_them_with_zeros_for_observations():
    calls = [LLMCall([1], [2], log_probs=[-0.5]), LLMCall([1, 2, 9], [3], log_probs=[-0.25])]
    batch, _ = agg([Rollout("r", "q", calls, 1.0)])
    assert batch.batch["rollout_log_probs"][0, :3].tolist() == [-0.5, 0.0, -0.25]
    with pytest.warns(UserWarning, match="Mixed rollout log_probs availability"):
        batch, _ = agg([Rollout("r", "q", calls, 1.0), Rollout("s", "q", [LLMCall([1], [2])], 1.0)])
    assert "rollout_log_probs" not in batch.batch.keys()


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"level": "trajectory-strict"}, ValueError, "Unknown trace_aggregator_level: trajectory-strict"),
        ({"max_response": 0}, ValueError, "max_response_length must be a positive number of tokens, got 0"),
    ],
)
def test_bad_settings(kwargs, error, text):
    with pytest.raises(error, match=re.escape(text)):
        agg([Rollout("r", "q", [LLMCall([1], [2])], 1.0)], **kwargs)


def test_bad_rollouts():
    with pytest.raises(RuntimeError, match=re.escape("get_train_data_batch emitted zero training rows.")):
        agg([Rollout("r", "q", [LLMCall([1], [])], 1.0)])
    with pytest.raises(ValueError, match="rollout 'r' call 0: prompt_ids must be a list of integer token ids"):
        agg([Rollout("r", "q", [LLMCall([1.5], [2])], 1.0)])
    with pytest.raises(ValueError, match="use None for a missing reward"):
        agg([Rollout("r", "q", [LLMCall([1], [2])], float("nan"))])


def test_limits_from_the_config_follow_the_level():
    trajectory = aggregation_limits(compose_config())
    assert trajectory == {
        "level": "trajectory",
        "max_prompt_length": 2048,
        "max_response_length": 8192,
        "max_total_length": None,
        "reward_fillna_value": 0.0,
    }
    total = compose_config(dotlist=["agentlightning.trace_aggregator.trajectory_max_total_length=3000"])
    assert aggregation_limits(total)["max_total_length"] == 3000
    transition = aggregation_limits(
        compose_config(
            dotlist=[
                "agentlightning.trace_aggregator.level=transition",
                "data.max_response_length=64",
                "agentlightning.trace_aggregator.trajectory_max_total_length=3000",  # trajectory only
            ]
        )
    )
    assert transition["max_prompt_length"] == 512 and transition["max_response_length"] == 64
    assert transition["max_total_length"] is None


def test_limits_fall_back_to_data_and_the_level_to_transition():
    # Agent Lightning reads the trajectory limits with .get(key, data.max_*) and the level with .get(key, transition):
    # a config written without them (composed elsewhere; agl_lab's composer refuses deleting a key it reads)
    cfg = compose_config(dotlist=["data.max_prompt_length=100", "data.max_response_length=200"])
    del cfg.agentlightning.trace_aggregator["trajectory_max_prompt_length"]
    del cfg.agentlightning.trace_aggregator["trajectory_max_response_length"]
    assert aggregation_limits(cfg)["max_prompt_length"] == 100
    assert aggregation_limits(cfg)["max_response_length"] == 200
    del cfg.agentlightning.trace_aggregator["level"]
    assert aggregation_limits(cfg)["level"] == "transition"


def test_total_length_cuts_the_response_after_the_prompt():
    # prompt 3 tokens, total 5: the response keeps 5 - 3 = 2 of its 4 tokens (and is counted as truncated)
    calls = [LLMCall([1, 2, 3], [4, 5, 6, 7])]
    batch, metrics = agg([Rollout("r", "q", calls, 1.0)], max_total_length=5)
    assert rows_of(batch) == [([1, 2, 3], [4, 5], [1, 1])]
    assert metrics["training/n_truncated_sample"] == 1
    # a prompt cut to max_prompt (2) leaves 5 - 2 = 3 response tokens, and the row is marked
    batch, _ = agg([Rollout("r", "q", calls, 1.0)], max_prompt=2, max_total_length=5)
    assert rows_of(batch) == [([1, 2], [4, 5, 6], [1, 1, 1])] and batch.batch["is_drop_mask"].tolist() == [True]
    # a total at or below the prompt leaves nothing trainable: the row is skipped, not kept
    with pytest.raises(RuntimeError, match="zero training rows"):
        agg([Rollout("r", "q", calls, 1.0)], max_total_length=3)


def test_rows_are_padded_to_the_limits_with_bf16_scores_and_string_id_arrays():
    batch, _ = agg([Rollout("r0", "q0", CALLS, reward=0.3)], max_prompt=7, max_response=9)
    assert batch.batch["prompts"].shape == (2, 7) and batch.batch["responses"].shape == (2, 9)
    assert batch.batch["input_ids"].shape == (2, 16)
    assert batch.batch["token_level_scores"].dtype == torch.bfloat16
    assert batch.batch["token_level_scores"].sum().item() == 2 * 0.30078125  # 0.3 rounded to bf16, on 2 rows
    assert batch.non_tensor_batch["rollout_id_list"].dtype.kind == "U"  # np.array(list_of_str), as Agent Lightning
    longest, _ = agg([Rollout("r0", "q0", CALLS, reward=0.3)], max_prompt=7, max_response=9, pad_to="longest")
    assert longest.batch["prompts"].shape == (2, 2) and longest.batch["responses"].shape == (2, 5)
    assert rows_of(longest) == rows_of(batch)


def test_rollouts_are_ordered_by_step_and_sample_index_stably():
    one = [LLMCall([1], [2])]
    rollouts = [
        Rollout("late", "q1", one, 1.0, step=2, sample_idx_in_step=0),
        Rollout("b1", "q1", one, 1.0, step=1, sample_idx_in_step=1),
        Rollout("a", "q0", one, 1.0, step=1, sample_idx_in_step=0),
        Rollout("b2", "q1", one, 1.0, step=1, sample_idx_in_step=1),  # ties keep their input order
    ]
    batch, _ = agg(rollouts)
    assert batch.non_tensor_batch["rollout_id_list"].tolist() == ["a", "b1", "b2", "late"]


def test_the_mismatch_counter_stops_at_one_hundred():
    # 151 calls, none continuing the previous one: 150 mismatches, counted up to 100 as Agent Lightning records them
    calls = [LLMCall([100 + i], [1]) for i in range(151)]
    batch, metrics = agg([Rollout("r", "q", calls, 1.0)])
    assert len(batch) == 151 and metrics["training/n_trace_merge_mismatch_rows"] == 100


def test_log_probs_of_the_wrong_length_are_checked_after_truncation():
    # 3 log-probs for a 4-token response: unusable, unless the response is cut to 3 or fewer tokens (both cut alike)
    calls = [LLMCall([1], [2, 3, 4, 5], log_probs=[-0.1, -0.2, -0.3])]
    batch, _ = agg([Rollout("r", "q", calls, 1.0)])
    assert "rollout_log_probs" not in batch.batch.keys()
    batch, _ = agg([Rollout("r", "q", calls, 1.0)], max_response=2)
    assert batch.batch["rollout_log_probs"].tolist() == [pytest.approx([-0.1, -0.2])]


def test_rows_feed_the_pipeline():
    from agl_lab import prepare_batch

    rollouts = [Rollout(f"r{i}", "q", CALLS if i % 2 else CALLS[:2], reward=float(i % 2)) for i in range(4)]
    rows, _ = agg(rollouts)
    cfg = compose_config(
        overrides={"algorithm": {"adv_estimator": "grpo"}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 1}}}
    )
    batch, metrics = prepare_batch(rows, cfg)
    assert metrics["training/rollout_level_advantage/n_rows"] == 6
    assert metrics["training/rollout_level_advantage/n_rollouts"] == 4
    assert torch.isfinite(batch.batch["advantages"]).all()


@pytest.mark.parametrize("bad", [[1.0, 2.0], [True, False], ["a"], [[1, 2]], [1, None]])
def test_token_ids_must_be_integers(bad):
    with pytest.raises(ValueError, match="prompt_ids must be a list of integer token ids"):
        agg([Rollout("r", "q", [LLMCall(bad, [2])], 1.0)])
