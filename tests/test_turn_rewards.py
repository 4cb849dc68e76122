"""Per-turn rewards through trace aggregation: where they land on the rows at both levels, under both placements, after
truncation; Agent Lightning's placement untouched without them; bad ones refused; the synthetic generator's knobs."""

import dataclasses
import re

import numpy as np
import pytest
import torch

from agl_lab import compose_config
from agl_lab.core.aggregation import LLMCall, Rollout, aggregate
from agl_lab.core.turn_rewards import placement_for
from agl_lab.core.turns import last_turn_values, turn_ids, turn_values
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rollouts, synthetic_rows
from agl_lab.lab.synthetic_fast import fast_synthetic_rows

# Three calls: the second continues the first (observation [9]), the third rewrites the context (a new row).
CALLS = [LLMCall([1, 2], [10, 11]), LLMCall([1, 2, 10, 11, 9], [12]), LLMCall([1, 3], [13, 14, 15])]


def agg(rollouts, level="trajectory", placement="per_turn", max_response=16):
    return aggregate(rollouts, level=level, max_prompt_length=8, max_response_length=max_response,
                     turn_reward_placement=placement)[0]  # fmt: skip


def scores(batch):
    return batch.batch["token_level_scores"].float()


def test_per_turn_at_the_trajectory_level_each_call_on_its_own_last_token():
    batch = agg([Rollout("r", "q", CALLS, reward=1.0, turn_rewards=(-0.25, -0.5))])
    # row 0 = [10 11 | 9 | 12]: call 0's -0.25 on 11 (position 1), call 1's -0.5 on 12 (position 3)
    # row 1 = [13 14 15]: the outcome 1 on 15
    assert scores(batch)[0, :4].tolist() == [0.0, -0.25, 0.0, -0.5]
    assert scores(batch)[1, :3].tolist() == [0.0, 0.0, 1.0]
    assert batch.batch["response_mask"][0, :4].tolist() == [1, 1, 0, 1]
    # read back by turn: row 0 holds turns -0.25, -0.5; row 1 the outcome
    per_turn, counts = turn_values(batch.batch["token_level_scores"], batch.batch["response_mask"])
    assert counts.tolist() == [2, 1] and per_turn.tolist() == [[-0.25, -0.5], [1.0, 0.0]]
    assert last_turn_values(batch.batch["token_level_scores"], batch.batch["response_mask"]).tolist() == [-0.5, 1.0]


def test_per_turn_at_the_transition_level_one_call_per_row():
    batch = agg([Rollout("r", "q", CALLS, reward=0.0, turn_rewards=(-0.25, 0.5))], level="transition")
    assert batch.non_tensor_batch["turn_index_list"].tolist() == [0, 1, 2]
    assert scores(batch).sum(dim=-1).tolist() == [-0.25, 0.5, 0.0]


def test_summed_every_row_carries_the_return_as_agent_lightning_carries_a_reward():
    batch = agg([Rollout("r", "q", CALLS, reward=1.0, turn_rewards=(-0.25, -0.5))], placement="summed")
    assert scores(batch).sum(dim=-1).tolist() == [0.25, 0.25]  # 1 - 0.25 - 0.5 on each row's last token
    assert scores(batch)[0, 3].item() == 0.25


def test_without_turn_rewards_the_rows_are_agent_lightnings_under_either_placement():
    plain = [Rollout("r", "q", CALLS, reward=0.5), Rollout("s", "q", CALLS[:1], reward=None)]
    reference = agg(plain)
    for placement in ("per_turn", "summed"):
        for level in ("transition", "trajectory"):
            a, b = agg(plain, level=level), agg(plain, level=level, placement=placement)
            assert torch.equal(a.batch["token_level_scores"], b.batch["token_level_scores"])
    assert scores(reference).sum(dim=-1).tolist() == [0.5, 0.5, 0.0]  # every row its rollout's reward (fillna 0)


def test_a_truncated_call_puts_its_reward_on_the_rows_last_kept_token():
    # max_response_length 3: row 0 keeps [10 11 | 9]; call 1's response 12 is cut, its -0.5 lands on 9 with nothing
    # else; the rollout's rewards still add up to its return
    batch = agg([Rollout("r", "q", CALLS, reward=1.0, turn_rewards=(-0.25, -0.5))], max_response=3)
    assert scores(batch)[0].tolist() == [0.0, -0.25, -0.5]
    assert scores(batch).sum().item() == 0.25
    # the reward on the untrainable token 9 still reads as turn 0's (the turn runs up to the next trainable token)
    assert turn_ids(batch.batch["response_mask"])[0][0].tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("turn_rewards", "text"),
    [
        ((-0.25,), "rollout 'r' has 1 turn_rewards for 3 calls: give one per call that another call follows"),
        ((-0.25, float("nan")), "rollout 'r' has turn_rewards that are not finite numbers"),
        ((-0.25, True), "rollout 'r' has turn_rewards that are not finite numbers"),
    ],
)
def test_bad_turn_rewards_are_refused_naming_the_rollout(turn_rewards, text):
    with pytest.raises(ValueError, match=re.escape(text)):
        agg([Rollout("r", "q", CALLS, reward=1.0, turn_rewards=turn_rewards)])
    with pytest.raises(ValueError, match="turn reward placement must be one of"):
        agg([Rollout("r", "q", CALLS, reward=1.0, turn_rewards=(0.0, 0.0))], placement="per_call")


def test_the_placement_follows_the_estimator():
    assert placement_for(compose_config(dotlist=["algorithm.adv_estimator=mt_grpo_fix"])) == "per_turn"
    assert placement_for(compose_config(dotlist=["algorithm.adv_estimator=grpo"])) == "summed"


def test_the_synthetic_generator_draws_turn_rewards_without_changing_its_episodes():
    knobs = SyntheticKnobs(n_prompts=3, rollouts_per_prompt=4, calls="uniform", min_calls=1, max_calls=4, seed=5)
    on = dataclasses.replace(knobs, turn_rewards="per_turn", turn_reward_mean=-0.2, turn_reward_spread=0.1)
    off_rollouts, on_rollouts = synthetic_rollouts(knobs), synthetic_rollouts(on)
    for off, with_rewards in zip(off_rollouts, on_rollouts, strict=True):
        assert off.calls == with_rewards.calls and off.reward == with_rewards.reward and off.turn_rewards is None
        assert len(with_rewards.turn_rewards) == len(with_rewards.calls) - 1
        assert all(-0.3 <= r <= -0.1 for r in with_rewards.turn_rewards)
    # per_turn: a rollout's rows add up to its return; summed: each row carries it
    rows, _ = synthetic_rows(on)
    summed, _ = synthetic_rows(dataclasses.replace(on, turn_rewards="summed"))
    ids = rows.non_tensor_batch["rollout_id_list"]
    for rollout in on_rollouts:
        total = rollout.reward + sum(rollout.turn_rewards)
        assert rows.batch["token_level_scores"][ids == rollout.rollout_id].double().sum() == pytest.approx(
            total, abs=0.02
        )
        row_sums = summed.batch["token_level_scores"][ids == rollout.rollout_id].double().sum(dim=-1)
        assert np.allclose(row_sums, total, atol=0.01)


def test_the_synthetic_knobs_refuse_what_per_turn_rewards_cannot_read():
    with pytest.raises(
        ValueError, match="observation_tokens must be >= 1 for per-turn rewards at the trajectory level"
    ):
        SyntheticKnobs(turn_rewards="per_turn", observation_tokens=0)
    SyntheticKnobs(turn_rewards="per_turn", observation_tokens=0, level="transition")  # one call per row: fine
    with pytest.raises(ValueError, match=r"SyntheticKnobs.turn_rewards must be one of \['off', 'per_turn', 'summed'\]"):
        SyntheticKnobs(turn_rewards="per_call")
    with pytest.raises(ValueError, match="fast_synthetic_rows has no per-turn rewards"):
        fast_synthetic_rows(SyntheticKnobs(turn_rewards="summed"))
