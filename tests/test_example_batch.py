"""The example batch ``agl-lab check`` runs: one step of the config's size, under its own limits, sampled when
large with the mini-batch in proportion."""

import math

import numpy as np
import pytest

from agl_lab.config.compose import compose_from
from agl_lab.core.pipeline import mini_batch_rows, prepare_batch
from agl_lab.lab.example_batch import ASSUMED, MAX_ROLLOUTS, MAX_ROW_TOKENS, example_batch
from agl_lab.lab.examples import example_rows

GRPO = ("algorithm.adv_estimator=grpo",)


def sizes(batch_size, n, mini, *extra):
    return compose_from(
        "agl",
        dotlist=[
            *GRPO,
            f"data.train_batch_size={batch_size}",
            f"actor_rollout_ref.rollout.n={n}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
            *extra,
        ],
    )


def rollouts(rows):
    return len(set(rows.non_tensor_batch["rollout_id_list"].tolist()))


def test_at_the_example_bases_size_it_is_the_hand_built_batch():
    cfg = compose_from("example")
    example = example_batch(cfg)
    assert example.sample == 1 and example.cfg is cfg and example.metrics == {}
    assert example.rows.batch["responses"].equal(example_rows().batch["responses"])
    assert example.lines[0].startswith("Example batch: the built-in one, 12 rows from 6 rollouts of 2 prompts")


def test_a_step_of_the_configs_size_under_its_own_limits_with_the_assumptions_printed():
    cfg = sizes(8, 4, 4)  # Agent Lightning's defaults otherwise: trajectory level, limits 2048 + 8192
    example = example_batch(cfg)
    assert example.sample == 1 and rollouts(example.rows) == 8 * 4
    assert example.metrics["training/n_rollouts"] == 32 and example.metrics["training/n_sample"] == len(example.rows)
    # padded to the config's own trajectory limits, scaled: t = ceil((2048 + 8192) / 2048) = 5
    assert tuple(example.rows.batch["prompts"].shape[1:]) == (2048 // 5,)
    assert tuple(example.rows.batch["responses"].shape[1:]) == (8192 // 5,)
    assert (
        "aggregated at the trajectory level under the config's limits (prompt 2048, response 8192 tokens)"
        in (example.lines[0])
    )
    assert [line.removeprefix("  assumed: ") for line in example.lines[1:5]] == list(ASSUMED.values())
    assert "tokens scaled by 1/5" in example.lines[5]
    # split rollouts: more rows than rollouts, some rollouts with several
    assert len(example.rows) > 32 and example.metrics["training/n_unmerged_rollouts"] > 0


def test_the_transition_level_takes_datas_limits_and_each_call_is_a_row():
    cfg = sizes(4, 4, 4, "agentlightning.trace_aggregator.level=transition", "data.max_prompt_length=256")
    example = example_batch(cfg)
    assert cfg.data.max_response_length == 512  # verl's default; t = ceil((256 + 512) / 2048) = 1
    assert example.rows.batch["prompts"].shape[1] == 256  # data.max_prompt_length
    assert example.rows.batch["responses"].shape[1] == 512  # data.max_response_length
    assert len(example.rows) == example.metrics["training/n_turns"]  # one row per LLM call
    # the context grows with every call: answers of 32-128 tokens soon pass a 256-token prompt limit
    assert example.rows.batch["is_drop_mask"].sum() > 0


def test_short_limits_cut_responses_as_agent_lightning_would():
    aggregator = "agentlightning.trace_aggregator.trajectory_max_"
    cfg = sizes(4, 4, 4, f"{aggregator}response_length=64", f"{aggregator}prompt_length=256")
    example = example_batch(cfg)  # answers of 4-16 tokens (1/16-1/4 of 64), merged: up to 5 calls and 4 tool outputs
    assert example.metrics["training/n_truncated_sample"] > 0
    assert example.rows.batch["responses"].shape[1] == 64  # t = 1: (256 + 64) tokens fit


@pytest.mark.parametrize(
    ("batch_size", "n", "mini", "k"),
    [(512, 4, 256, 8), (64, 8, 16, 2), (1000, 4, 7, 16)],  # the last: no common divisor fits, sizes rounded
)
def test_a_large_step_is_sampled_keeping_the_mini_batch_in_proportion(batch_size, n, mini, k):
    cfg = sizes(batch_size, n, mini)
    example = example_batch(cfg)
    assert example.sample == k
    prompts = round(batch_size / k)
    assert rollouts(example.rows) == prompts * n <= MAX_ROLLOUTS
    assert example.cfg.data.train_batch_size == prompts
    assert mini_batch_rows(example.cfg) == max(1, round(mini / k)) * n
    assert cfg.data.train_batch_size == batch_size  # the given config is left as it was
    (line,) = [line for line in example.lines if line.startswith("  sampled:")]
    assert line.startswith(f"  sampled: 1/{k} of the step ({prompts} of {batch_size} prompts")
    assert line.endswith(f"multiply counts by {k}") and ("roughly" in line) == (math.gcd(batch_size, mini) == 1)


def test_a_row_stays_within_the_width_budget_whatever_the_limits():
    cfg = sizes(4, 2, 4, "data.max_prompt_length=65536", "data.max_response_length=65536",
                "agentlightning.trace_aggregator.trajectory_max_prompt_length=65536",
                "agentlightning.trace_aggregator.trajectory_max_response_length=65536")  # fmt: skip
    example = example_batch(cfg)
    width = example.rows.batch["input_ids"].shape[1]
    assert width <= MAX_ROW_TOKENS and "tokens scaled by 1/64" in " ".join(example.lines)


def test_steps_1_to_5_train_whole_mini_batches_of_it():
    cfg = sizes(32, 4, 8, "agentlightning.max_ppo_update_times=2")
    example = example_batch(cfg)
    batch, metrics = prepare_batch(example.rows, example.cfg)
    mini = mini_batch_rows(example.cfg)
    assert metrics["training/n_sample_trained"] == len(batch) == 2 * mini  # the cap: 2 mini-batches of 32 rows
    dropped = metrics["training/n_sample_dropped/same_reward"] + metrics["training/n_sample_dropped/random"]
    assert metrics["training/n_sample_collected"] == len(example.rows) == len(batch) + dropped
    assert np.isin(batch.non_tensor_batch["rollout_id_list"], example.rows.non_tensor_batch["rollout_id_list"]).all()
