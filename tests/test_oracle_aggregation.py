"""agl_lab's trace aggregation against the released Agent Lightning 1.0.2's ``RolloutAdapter``, at both levels.

Each random step (rollouts out of (step, sample index) order, with and without calls or rewards; calls that
continue their context with an observation or start over; log-probs present, missing or of the wrong length;
empty responses; prompts and responses over the limits) goes two ways, half the time:

* through Agent Lightning's own ``_rollout`` on a bare trainer (a fake rollout manager hands it the rollouts), which
  reads the limits from a random config — the level, the trajectory limits, ``trajectory_max_total_length``, each
  present or absent (then ``data.max_*`` or none) — versus ``agl_lab.core.aggregation.aggregation_limits`` on the
  same config and ``aggregate``;
* straight into ``RolloutAdapter.get_train_data_batch`` with explicit limits (a total limit at the transition
  level too) versus ``aggregate`` with the same.

Rows, padding, dtypes, ids and every adapter metric must be equal; where Agent Lightning raises, agl_lab raises
the same. Fresh inputs each time: Agent Lightning extends a triplet's log-prob list in place.
"""

from __future__ import annotations

import collections
import types
import warnings

import numpy as np
import pytest
import torch
from agl_oracle import (
    N_EXAMPLES,
    ORACLE_SETTINGS,
    agl,
    assert_same_batch,
    assert_same_error,
    assert_same_metrics,
    count,
    examples,
    outcome,
)
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_response_mask

from agl_lab.core.aggregation import LLMCall, Rollout, aggregate, aggregation_limits

PATHS: collections.Counter = collections.Counter()


@st.composite
def steps(draw):
    """A random step: rollouts as plain data (built into each side's types fresh), plus how to aggregate them."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vocab = draw(st.sampled_from([3, 6, 50]))  # few token ids: random prompts sometimes continue a context anyway
    rollouts = []
    for index in range(draw(st.integers(1, 6))):
        calls, context = [], []
        for turn in range(int(rng.choice([0, 1, 1, 2, 3, 5]))):
            if turn and rng.random() < 0.6:  # continue the context, with an observation of 0..3 tokens
                prompt = context + rng.integers(1, vocab, int(rng.integers(0, 4))).tolist()
            else:
                prompt = rng.integers(1, vocab, int(rng.integers(0, 7))).tolist()
            response = rng.integers(1, vocab, int(rng.choice([0, 1, 2, 3, 5]))).tolist()
            n_log_probs = {"none": None, "right": len(response), "wrong": abs(len(response) - int(rng.choice([1, 2])))}[
                rng.choice(["none", "right", "right", "wrong"])
            ]  # "wrong": one or two too many or too few (never the right count)
            log_probs = None if n_log_probs is None else (-rng.random(n_log_probs)).tolist()
            calls.append((prompt, response, log_probs))
            context = prompt + response
        reward = rng.choice([None, 0.0, 1.0, float(rng.normal()), 0.3])
        rollouts.append(
            {
                "rollout_id": f"r{index}",
                "data_id": f"d{int(rng.integers(0, 3))}",
                "step": int(rng.integers(0, 2)),
                "sample_idx_in_step": int(rng.integers(0, 3)),
                "reward": None if reward is None else float(reward),
                "calls": calls if calls or rng.random() < 0.5 else None,  # no triplets: [] or None
            }
        )
    via_trainer = draw(st.booleans())
    if via_trainer:
        aggregator = {}
        for key, value in (
            ("level", draw(st.sampled_from(["transition", "trajectory"]))),
            ("trajectory_max_prompt_length", draw(st.integers(1, 10))),
            ("trajectory_max_response_length", draw(st.integers(1, 16))),
            ("trajectory_max_total_length", draw(st.integers(0, 24))),
        ):
            if draw(st.integers(0, 3)):  # each key present 3 times in 4
                aggregator[key] = value
        how = {
            "trace_aggregator": aggregator,
            "data": {"max_prompt_length": draw(st.integers(1, 10)), "max_response_length": draw(st.integers(1, 16))},
            "fillna": draw(st.sampled_from([0.0, -1.0, 0.5])),
            "pad": draw(st.sampled_from([None, 0, 7])),
        }
    else:
        how = {
            "level": draw(st.sampled_from(["transition", "trajectory"])),
            "max_prompt_length": draw(st.integers(1, 10)),
            "max_response_length": draw(st.integers(1, 16)),
            "max_total_length": draw(st.one_of(st.none(), st.integers(0, 24))),
            "fillna": draw(st.sampled_from([0.0, -1.0, 0.5])),
            "pad": draw(st.sampled_from([0, 7])),
        }
    return rollouts, via_trainer, how


def agl_rollouts(rollouts):
    manager = agl().manager

    def triplet(prompt, response, log_probs):
        response_dict = {"token_ids": list(response), "log_probs": None if log_probs is None else list(log_probs)}
        return manager.Triplet(prompt={"token_ids": list(prompt)}, response=response_dict)

    return [
        manager.CompletedRollout(
            rollout_id=r["rollout_id"],
            data_id=r["data_id"],
            step=r["step"],
            sample_idx_in_step=r["sample_idx_in_step"],
            enqueue_time=0.0,
            final_reward=r["reward"],
            triplets=None if r["calls"] is None else [triplet(*call) for call in r["calls"]],
        )
        for r in rollouts
    ]


def lab_rollouts(rollouts):
    return [
        Rollout(
            rollout_id=r["rollout_id"],
            data_id=r["data_id"],
            calls=[LLMCall(p, q, None if lp is None else list(lp)) for p, q, lp in r["calls"] or []],
            reward=r["reward"],
            step=r["step"],
            sample_idx_in_step=r["sample_idx_in_step"],
        )
        for r in rollouts
    ]


def config_of(how):
    return OmegaConf.create(
        {
            "agentlightning": {"trace_aggregator": how["trace_aggregator"], "reward_fillna_value": how["fillna"]},
            "data": how["data"],
            "actor_rollout_ref": {},
        }
    )


class _Manager:
    def __init__(self, rollouts):
        self.rollouts = rollouts

    def delete_model(self):
        return {}

    def register_model(self, addresses):
        return []

    def enqueue_and_wait_until_completed(self, data, *, is_train):
        return self.rollouts


def agl_via_trainer(rollouts, how):
    """Agent Lightning's ``_rollout``: config → RolloutAdapter → rows, on a bare trainer with a fake manager."""
    trainer = object.__new__(agl().trainer.AgentLightningRayPPOTrainer)
    trainer.config = config_of(how)
    trainer.is_async, trainer.global_steps = False, 3
    trainer.llm_server_manager = types.SimpleNamespace(get_addresses=lambda: ["localhost:1"])
    trainer._resume_all_rollout_generation = lambda: None
    trainer._abort_all_rollout_requests = lambda: None
    trainer._make_rollout_manager = lambda cls: _Manager(agl_rollouts(rollouts))
    trainer.tokenizer = types.SimpleNamespace(pad_token_id=how["pad"])
    batch, metrics = trainer._rollout(DataProto(batch=None), is_train=True)
    return batch, {k: v for k, v in metrics.items() if not k.startswith("timing/")}  # lifecycle timings: wall clock


def agl_direct(rollouts, how):
    adapter = agl().adapter.RolloutAdapter(
        max_prompt_length=how["max_prompt_length"],
        max_response_length=how["max_response_length"],
        max_total_length=how["max_total_length"],
        device=torch.device("cpu"),
        pad_token_id=how["pad"],
        reward_fillna_value=how["fillna"],
        trace_aggregator_level=how["level"],
    )
    return adapter.get_train_data_batch(agl_rollouts(rollouts), global_steps=3)


def _small_trajectory_adapter():
    """Agent Lightning's adapter at the trajectory level with 4-token limits, for the hand-made differences."""
    return agl().adapter.RolloutAdapter(
        max_prompt_length=4,
        max_response_length=4,
        device=torch.device("cpu"),
        pad_token_id=0,
        trace_aggregator_level="trajectory",
    )


def lab_aggregate(rollouts, via_trainer, how):
    if via_trainer:
        limits = aggregation_limits(config_of(how))
        pad = 0 if how["pad"] is None else how["pad"]
    else:
        limits = {k: how[k] for k in ("level", "max_prompt_length", "max_response_length", "max_total_length")}
        limits["reward_fillna_value"], pad = how["fillna"], how["pad"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Agent Lightning prints what agl_lab warns
        return aggregate(lab_rollouts(rollouts), **limits, pad_token_id=pad)


def _compare(ours, theirs):
    our_batch, our_metrics = ours
    their_batch, their_metrics = theirs
    if "response_mask" not in their_batch.batch.keys():
        # transition level: Agent Lightning's trainer derives response_mask at step 1; agl_lab's rows carry it already
        assert_same_batch(our_batch, their_batch, skip=("response_mask",))
        assert torch.equal(our_batch.batch["response_mask"], compute_response_mask(their_batch))
    else:
        assert_same_batch(our_batch, their_batch)
    assert_same_metrics(our_metrics, their_metrics)


@ORACLE_SETTINGS
@given(step=steps())
def _aggregation_cases(step):
    rollouts, via_trainer, how = step
    theirs, their_error = outcome(lambda: (agl_via_trainer if via_trainer else agl_direct)(rollouts, how))
    ours, our_error = outcome(lambda: lab_aggregate(rollouts, via_trainer, how))
    if their_error is not None:
        assert_same_error(their_error, our_error)
        PATHS["raised"] += 1
    else:
        assert our_error is None, our_error
        _compare(ours, theirs)
        level = "transition" if "turn_index_list" in theirs[0].non_tensor_batch else "trajectory"
        PATHS[("trainer" if via_trainer else "adapter", level)] += 1
    count()


def test_trace_aggregation_equals_agent_lightnings_at_both_levels():
    PATHS.clear()
    examples(_aggregation_cases, N_EXAMPLES)
    for path in ("trainer", "adapter"):
        for level in ("transition", "trajectory"):
            assert PATHS[path, level] > N_EXAMPLES // 20, PATHS  # both routes, both levels, well covered (100 of 2,000)
    assert PATHS["raised"] > 0, PATHS  # zero rows: the same RuntimeError


def test_the_mismatch_counter_stops_at_one_hundred_in_both():
    calls = [([100 + i], [1], None) for i in range(151)]  # 150 calls that start over: 150 mismatches
    rollouts = [{"rollout_id": "r", "data_id": "d", "step": 0, "sample_idx_in_step": 0, "reward": 1.0, "calls": calls}]
    how = {"level": "trajectory", "max_prompt_length": 4, "max_response_length": 4, "max_total_length": None}
    how |= {"fillna": 0.0, "pad": 0}
    theirs, ours = agl_direct(rollouts, how), lab_aggregate(rollouts, False, how)
    assert theirs[1]["training/n_trace_merge_mismatch_rows"] == 100
    _compare(ours, theirs)


# --- intended differences (docs/differences.md), each shown on both sides -------------------------------------------


def _one(reward=1.0, calls=(([1, 2], [3], [-0.5]),)):
    return [
        {"rollout_id": "r", "data_id": "d", "step": 0, "sample_idx_in_step": 0, "reward": reward, "calls": list(calls)}
    ]


HOW = {"level": "trajectory", "max_prompt_length": 4, "max_response_length": 4, "max_total_length": None, "fillna": 0.0}
HOW |= {"pad": 0}


def test_difference_transition_rows_carry_the_response_mask_the_trainer_derives():
    how = HOW | {"level": "transition"}
    theirs, _ = agl_direct(_one(), how)
    ours, _ = lab_aggregate(_one(), False, how)
    assert "response_mask" not in theirs.batch.keys()
    assert torch.equal(ours.batch["response_mask"], compute_response_mask(theirs))


def test_difference_nan_rewards_are_refused():
    theirs, _ = agl_direct(_one(reward=float("nan")), HOW)
    assert theirs.batch["token_level_scores"].isnan().any()  # Agent Lightning stores it and trains on it
    with pytest.raises(ValueError, match="rollout 'r' has reward nan: use None for a missing reward"):
        lab_aggregate(_one(reward=float("nan")), False, HOW)


def test_difference_token_ids_must_be_integers():
    calls = [([1.5, 2.0], [3], None)]
    theirs, _ = agl_direct(_one(calls=calls), HOW)  # torch.LongTensor truncates 1.5 to 1
    assert theirs.batch["prompts"][0, -2:].tolist() == [1, 2]
    with pytest.raises(ValueError, match="prompt_ids must be a list of integer token ids"):
        lab_aggregate(_one(calls=calls), False, HOW)


def test_difference_inputs_are_never_modified():
    # Agent Lightning extends the first call's log-prob list in place while merging a trajectory
    calls = [([1], [2], [-0.1]), ([1, 2, 9], [3], [-0.2])]
    theirs = agl_rollouts(_one(calls=calls))
    adapter = _small_trajectory_adapter()
    outcome(lambda: adapter.get_train_data_batch(theirs))
    assert theirs[0].triplets[0].response["log_probs"] == [-0.1, 0.0, -0.2]
    ours = lab_rollouts(_one(calls=calls))
    aggregate(ours, level="trajectory", max_prompt_length=4, max_response_length=4)
    assert list(ours[0].calls[0].log_probs) == [-0.1]


def test_difference_negative_or_zero_limits_are_refused():
    with pytest.raises(ValueError, match="max_prompt_length must be a positive number of tokens, got 0"):
        lab_aggregate(_one(), False, HOW | {"max_prompt_length": 0})
    with pytest.raises(ValueError, match="max_total_length must be null"):
        lab_aggregate(_one(), False, HOW | {"max_total_length": -1})
    theirs, _ = agl_direct(_one(), HOW | {"max_prompt_length": 0})  # every prompt is cut to nothing and marked
    assert theirs.batch["is_drop_mask"].tolist() == [True]


def test_difference_token_ids_may_be_tuples():
    # Agent Lightning concatenates a call's prompt and response lists: tuple ids fail there
    manager = agl().manager
    triplets = [
        manager.Triplet(prompt={"token_ids": (1, 2)}, response={"token_ids": [3], "log_probs": None}),
        manager.Triplet(prompt={"token_ids": (1, 2, 3, 9)}, response={"token_ids": [4], "log_probs": None}),
    ]
    rollout = manager.CompletedRollout(
        rollout_id="r", data_id="d", step=0, sample_idx_in_step=0, enqueue_time=0.0, final_reward=1.0, triplets=triplets
    )
    adapter = _small_trajectory_adapter()
    with pytest.raises(TypeError, match="can only concatenate tuple"):
        adapter.get_train_data_batch([rollout])
    # agl_lab takes them as the lists they stand for (the lab trainer's calls hold tuples)
    tuples = [Rollout("r", "d", [LLMCall((1, 2), (3,)), LLMCall((1, 2, 3, 9), (4,))], 1.0)]
    ours = aggregate(tuples, level="trajectory", max_prompt_length=4, max_response_length=4)
    _compare(ours, agl_direct(_one(calls=[([1, 2], [3], None), ([1, 2, 3, 9], [4], None)]), HOW))


def test_difference_nothing_is_logged_to_the_active_wandb_run(monkeypatch):
    # Agent Lightning's adapter logs merge-mismatch and trajectory tables into whatever W&B run is active
    import wandb

    logged = []
    run = types.SimpleNamespace(id="run", log_artifact=lambda artifact: logged.append("artifact"))
    monkeypatch.setattr(wandb, "run", run)
    monkeypatch.setattr(wandb, "log", lambda data, **kwargs: logged.extend(sorted(data)))
    agl_direct(_one(), HOW)
    assert "training/trace_merge_mismatches" in logged  # tables went into the user's run
    logged.clear()
    lab_aggregate(_one(), False, HOW)
    assert logged == []


def test_difference_multimodal_and_routed_expert_fields_are_out_of_scope():
    # Agent Lightning 1.0.2's adapter also carries image_urls (Qwen-VL) and routed experts (MoE replay)
    assert [f for f in LLMCall.__dataclass_fields__] == ["prompt_ids", "response_ids", "log_probs"]
    assert "image_urls" in agl().manager.Triplet.model_fields


def test_difference_ids_need_not_be_strings():
    # Agent Lightning's CompletedRollout takes string ids only; agl_lab groups any hashable id (ints, tuples)
    with pytest.raises(ValueError, match="rollout_id"):  # pydantic's ValidationError is a ValueError
        agl().manager.CompletedRollout(rollout_id=3, data_id="d", step=0, sample_idx_in_step=0, enqueue_time=0.0)
    rows, _ = aggregate(
        [Rollout(3, ("d", 0), [LLMCall([1], [2])], 1.0), Rollout(4, ("d", 0), [LLMCall([1], [5])], 0.0)],
        level="transition",
        max_prompt_length=2,
        max_response_length=2,
    )
    assert rows.non_tensor_batch["rollout_id_list"].tolist() == [3, 4]
    assert rows.non_tensor_batch["data_id_list"].tolist() == [("d", 0), ("d", 0)]


def test_difference_per_turn_rewards_are_agl_labs_own():
    # Three calls: the second continues the first (observation 9), the third starts over: two trajectory rows
    calls = [([1], [2], None), ([1, 2, 9], [3], None), ([5], [6], None)]
    how = HOW | {"max_prompt_length": 8, "max_response_length": 8}
    theirs, _ = agl_direct(_one(reward=1.0, calls=calls), how)
    # Agent Lightning gives every row the rollout's final reward, on its last response token
    assert theirs.batch["token_level_scores"].float().sum(dim=-1).tolist() == [1.0, 1.0]
    # agl_lab without turn rewards: the same rows (per_turn is the default placement)
    _compare(lab_aggregate(_one(reward=1.0, calls=calls), False, how), (theirs, _))
    # with them (lab-only): each call's intermediate reward on its own last token, the outcome on the last call's ...
    rollout = [Rollout("r", "d", [LLMCall(p, r) for p, r, _ in calls], 1.0, turn_rewards=(-0.25, -0.5))]
    per_turn, _ = aggregate(rollout, level="trajectory", max_prompt_length=8, max_response_length=8)
    assert per_turn.batch["token_level_scores"].float()[:, :3].tolist() == [[-0.25, 0.0, -0.5], [1.0, 0.0, 0.0]]
    # ... or summed into the return on every row, one reward per rollout as Agent Lightning carries it
    summed, _ = aggregate(rollout, level="trajectory", max_prompt_length=8, max_response_length=8,
                          turn_reward_placement="summed")  # fmt: skip
    assert summed.batch["token_level_scores"].float().sum(dim=-1).tolist() == [0.25, 0.25]
