"""Per-turn advantage on Agent Lightning's rows: a rollout's rows stitched into one trajectory give every turn the
advantage the estimator gives it on the rollout as one row, at either level, whatever the row order; GRPO on the
stitched rows is rollout-level GRPO on the returns; errors leave the batch as it was; the pipeline's step 4."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab import compose_config, compute_advantages, compute_rollout_level_advantage
from agl_lab.core.aggregation import LLMCall, Rollout, aggregate
from agl_lab.core.turn_advantage import compute_turn_level_advantage
from agl_lab.core.turn_estimators import TURN_ESTIMATORS
from agl_lab.core.turns import turn_values
from conftest import assert_unchanged, shuffled, snapshot

ALGO = compose_config(dotlist=["algorithm.norm_adv_by_std_in_grpo=false"]).algorithm


def episode(rollout_id, data_id, rewards, outcome, *, breaks=(), lengths=None):
    """A rollout of len(rewards) + 1 calls; call k rewrites its context (a new trajectory row) when k is in breaks."""
    lengths = lengths or [2] * (len(rewards) + 1)
    calls, context, token = [], [], 1000
    for k, length in enumerate(lengths):
        response = list(range(token, token + length))
        token += length
        prompt = [1, 2] if k == 0 else [1, 2, 3, 500 + k] if k in breaks else [*context, 500 + k]
        calls.append(LLMCall(prompt, response))
        context = prompt + response
    return Rollout(rollout_id, data_id, calls, reward=outcome, turn_rewards=tuple(rewards))


def rows_of(rollouts, level, placement="per_turn"):
    rows, _ = aggregate(rollouts, level=level, max_prompt_length=64, max_response_length=64, pad_to="longest",
                        turn_reward_placement=placement)  # fmt: skip
    rows.batch["token_level_rewards"] = rows.batch["token_level_scores"]
    return rows


def turn_level(rows, estimator):
    return compute_turn_level_advantage(rows, adv_estimator=estimator, gamma=1.0, lam=1.0, num_repeat=1, config=ALGO)


def advantages_by_turn(batch):
    """{rollout id: [advantage of each turn, in call order]}: turns read from each row's runs, rows in batch order
    (transition rows sorted by turn_index_list)."""
    per_turn, counts = turn_values(
        batch.batch["advantages"] * batch.batch["response_mask"], batch.batch["response_mask"]
    )
    tokens, _ = turn_values(batch.batch["response_mask"].double(), batch.batch["response_mask"])
    means = per_turn / tokens.clamp_min(1)  # (rows, K): each turn's tokens share one advantage
    turn = batch.non_tensor_batch.get("turn_index_list", np.zeros(len(batch), dtype=np.int64))
    out = {}
    for i in np.lexsort((np.arange(len(batch)), turn)):
        out.setdefault(batch.non_tensor_batch["rollout_id_list"][i], []).extend(means[i, : counts[i]].tolist())
    return out


ROLLOUTS = [
    episode("A", "q", [-0.25, -0.25], 1.0, breaks=(2,)),  # 3 calls; the third rewrites its context: 2 rows
    episode("B", "q", [], 0.0),  # 1 call
    episode("C", "q", [-0.25], 0.0, lengths=[1, 3]),  # 2 calls of 1 and 3 tokens
]


def test_the_trajectory_rows_by_hand_under_mt_grpo_fix():
    # Returns to go at turn 0: A 1 - 0.5 = 0.5, B 0, C -0.25: mean 1/12 -> A 5/12, B -1/12, C -1/3;
    # turn 1: A 0.75, C 0: mean 0.375 -> ±0.375; turn 2: A alone -> 0.
    batch, metrics = turn_level(rows_of(ROLLOUTS, "trajectory"), "mt_grpo_fix")
    by_turn = advantages_by_turn(batch)
    assert by_turn["A"] == pytest.approx([5 / 12, 0.375, 0.0], abs=1e-6)
    assert by_turn["B"] == pytest.approx([-1 / 12], abs=1e-6)
    assert by_turn["C"] == pytest.approx([-1 / 3, -0.375], abs=1e-6)
    assert len(batch) == 4 and list(batch.non_tensor_batch["rollout_id_list"]) == ["A", "A", "B", "C"]
    assert metrics == {"training/turn_level_advantage/n_rollouts": 3, "training/turn_level_advantage/n_turns": 6,
                       "training/turn_level_advantage/max_turns": 3}  # fmt: skip
    assert (batch.non_tensor_batch["uid"] == "q").all()
    # every trainable token of a turn carries its advantage, every other token 0
    mask = batch.batch["response_mask"].bool()
    assert torch.equal(batch.batch["advantages"][~mask], torch.zeros(int((~mask).sum())))
    torch.testing.assert_close(batch.batch["returns"], batch.batch["advantages"])


@st.composite
def random_rollouts(draw):
    rollouts = []
    for p in range(draw(st.integers(1, 3))):
        for r in range(draw(st.integers(1, 4))):
            calls = draw(st.integers(1, 4))
            rewards = [draw(st.sampled_from([-0.5, -0.25, 0.0, 0.25])) for _ in range(calls - 1)]
            breaks = tuple(k for k in range(1, calls) if draw(st.booleans()))
            lengths = [draw(st.integers(1, 3)) for _ in range(calls)]
            outcome = draw(st.sampled_from([0.0, 1.0]))
            rollouts.append(episode(f"p{p}/r{r}", f"p{p}", rewards, outcome, breaks=breaks, lengths=lengths))
    return rollouts


@settings(max_examples=40, deadline=None)
@given(rollouts=random_rollouts(), estimator=st.sampled_from(sorted(TURN_ESTIMATORS)), seed=st.integers(0, 99))
def test_every_layout_gives_each_turn_the_advantage_of_the_rollout_as_one_row(rollouts, estimator, seed):
    # the reference: each rollout as one row (no rewrites, trajectory level), verl's compute_advantage directly
    whole = rows_of([Rollout(r.rollout_id, r.data_id, _unbroken(r.calls), r.reward, turn_rewards=r.turn_rewards)
                     for r in rollouts], "trajectory")  # fmt: skip
    whole.non_tensor_batch["uid"] = whole.non_tensor_batch["data_id_list"]
    expected = advantages_by_turn(compute_advantage(whole, adv_estimator=estimator, config=ALGO))
    for level in ("transition", "trajectory"):
        rows = shuffled(rows_of(rollouts, level), seed) if level == "transition" else rows_of(rollouts, level)
        got = advantages_by_turn(turn_level(rows, estimator)[0])
        assert got.keys() == expected.keys()
        for rollout_id, values in expected.items():
            assert got[rollout_id] == pytest.approx(values, abs=1e-5), (level, rollout_id)


def _unbroken(calls):
    """The same responses, each call continuing the last (one trajectory row per rollout)."""
    out, context = [], []
    for k, call in enumerate(calls):
        prompt = list(call.prompt_ids) if k == 0 else [*context, 500 + k]
        out.append(LLMCall(prompt, call.response_ids))
        context = prompt + list(call.response_ids)
    return out


def test_grpo_on_the_stitched_rollouts_is_rollout_level_grpo_on_the_returns():
    per_turn = rows_of(ROLLOUTS, "transition")
    summed = rows_of(ROLLOUTS, "transition", placement="summed")  # every row: its rollout's return
    stitched, _ = turn_level(per_turn, "grpo")
    reference, _ = compute_rollout_level_advantage(
        summed, adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=1, config=ALGO
    )
    torch.testing.assert_close(stitched.batch["advantages"].float(), reference.batch["advantages"].float())


def test_refusals_name_the_field_and_leave_the_batch_as_it_was():
    rows = rows_of(ROLLOUTS, "transition")
    del rows.non_tensor_batch["rollout_id_list"]
    with pytest.raises(RuntimeError, match="per-turn advantage requires rollout_id_list in non_tensor_batch"):
        turn_level(rows, "mt_grpo")
    rows = rows_of(ROLLOUTS, "transition")
    rows.non_tensor_batch["data_id_list"] = np.array(["q", "q", "other", "q", "q", "q"], dtype=object)
    before = snapshot(rows)
    with pytest.raises(
        RuntimeError, match=re.escape("per-turn advantage found multiple uid values for rollout_id=np.str_('A')")
    ):
        turn_level(rows, "mt_grpo")
    assert_unchanged(rows, before)
    with pytest.raises(KeyError):  # an estimator that needs what the stitched rows lack (GAE: a critic's values)
        turn_level(rows_of(ROLLOUTS, "transition"), "gae")


def test_the_pipeline_runs_per_turn_credit_and_refuses_it_with_rollout_level_advantage():
    on = compose_config(dotlist=["algorithm.adv_estimator=mt_grpo"])
    rows = rows_of(ROLLOUTS, "transition")
    rows.non_tensor_batch["uid"] = rows.non_tensor_batch["data_id_list"]
    rows.batch["token_level_scores"] = rows.batch["token_level_rewards"]
    with pytest.raises(ValueError, match=r"set algorithm.enable_rollout_level_advantage=false$"):
        compute_advantages(rows, on)
    off = compose_config(dotlist=["algorithm.adv_estimator=mt_grpo", "algorithm.enable_rollout_level_advantage=false"])
    batch, metrics = compute_advantages(rows, off, normalize=False)
    assert metrics["training/turn_level_advantage/n_turns"] == 6 and "advantages" in batch.batch.keys()
