import re
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab import (
    EmptyBatchWarning,
    compose_config,
    compute_rollout_level_advantage,
    example_rows,
    normalize_advantages_by_rollout,
    prepare_batch,
)
from agl_lab.core.pipeline import compute_advantages, plan_selection, rewards_and_advantages, select_rows
from agl_lab.core.rows import rows_frame
from agl_lab.core.update_cap import apply_update_cap, drop_marked_rows, partially_dropped, same_reward_rows
from agl_lab.lab.examples import EXAMPLE_OVERRIDES
from agl_lab.lab.weighting import analyze_weighting
from conftest import assert_unchanged, make_rows, plans, snapshot, with_rewards


def config(*dotlist):
    return compose_config(overrides=EXAMPLE_OVERRIDES, dotlist=dotlist)


def test_pipeline_equals_the_stages_composed_by_hand():
    cfg = config()
    rows = example_rows()
    batch, metrics = prepare_batch(rows, cfg)
    # By hand: uid = data_id_list, rewards = scores, rollout-level GRPO, v1.0 normalization over the 12 rows.
    manual = example_rows()
    manual.non_tensor_batch["uid"] = manual.non_tensor_batch["data_id_list"]
    manual.batch["token_level_rewards"] = manual.batch["token_level_scores"]
    manual, _ = compute_rollout_level_advantage(
        manual, adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=3, config=cfg.algorithm
    )
    expected = normalize_advantages_by_rollout(
        manual.batch["advantages"],
        manual.batch["response_mask"],
        manual.non_tensor_batch["rollout_id_list"],
        num_trained_rows=12,
    )
    torch.testing.assert_close(batch.batch["advantages"], expected)
    assert metrics["training/n_sample_collected"] == 12
    assert metrics["training/n_sample_trained"] == 12
    assert metrics["training/rollout_level_advantage/n_rows"] == 12
    assert metrics["training/rollout_level_advantage/n_rollouts"] == 6
    assert metrics["training/n_groups"] == 2
    assert "critic/advantages/mean" in metrics and "response_length/mean" in metrics  # verl's data metrics


def test_every_rollout_carries_the_same_mass_magnitude_per_group():
    batch, _ = prepare_batch(example_rows(), config())
    mass = (batch.batch["advantages"] * batch.batch["response_mask"]).sum(-1)
    ids = batch.non_tensor_batch["rollout_id_list"]
    per_rollout = {r: mass[torch.from_numpy(ids == r)].sum().item() for r in dict.fromkeys(ids)}
    # q0 rewards (1, 0, 0): GRPO advantages (1.1547, -0.57735, -0.57735), each divided by 12 rows. The example's
    # scores are bf16, as Agent Lightning's, so GRPO and the division run in bf16 (8 significant bits: rel 2^-7).
    assert batch.batch["advantages"].dtype == torch.bfloat16
    assert per_rollout["q0/r0"] == pytest.approx(1.1547 / 12, rel=2**-7)
    assert per_rollout["q0/r1"] == pytest.approx(per_rollout["q0/r2"]) == pytest.approx(-0.57735 / 12, rel=2**-7)


def test_rows_given_to_the_pipeline_are_left_as_they_were():
    rows = example_rows()
    snap = snapshot(rows)
    prepare_batch(rows, config("agentlightning.max_ppo_update_times=1"))
    assert_unchanged(rows, snap)


def test_both_off_is_verls_own_per_row_advantage():
    cfg = config(
        "algorithm.enable_rollout_level_advantage=false", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"
    )
    batch, metrics = prepare_batch(example_rows(), cfg)
    expected = example_rows()
    expected.non_tensor_batch["uid"] = expected.non_tensor_batch["data_id_list"]
    expected.batch["token_level_rewards"] = expected.batch["token_level_scores"]
    expected = compute_advantage(expected, adv_estimator="grpo")
    torch.testing.assert_close(batch.batch["advantages"], expected.batch["advantages"])
    assert not any(k.startswith("training/rollout_level_advantage/") for k in metrics)


def test_eq16_divisor_from_the_lab_section():
    batch, _ = prepare_batch(example_rows(), config("lab.per_rollout_divisor=rollouts"))
    mass = (batch.batch["advantages"] * batch.batch["response_mask"]).sum().item()
    plain, _ = prepare_batch(example_rows(), config())
    # Eq. 16 divides by 6 rollouts instead of 12 rows: twice the mass, same direction.
    assert mass == pytest.approx(2 * (plain.batch["advantages"] * plain.batch["response_mask"]).sum().item())


def test_cap_and_seed():
    cfg = config("agentlightning.max_ppo_update_times=2")
    first, metrics = prepare_batch(example_rows(), cfg, seed=7)
    again, _ = prepare_batch(example_rows(), cfg, seed=7)
    assert metrics["training/n_sample_trained"] == 6  # 2 updates × 3 rows
    assert metrics["training/n_sample_dropped/random"] + metrics["training/n_sample_dropped/same_reward"] == 6
    assert first.non_tensor_batch["rollout_id_list"].tolist() == again.non_tensor_batch["rollout_id_list"].tolist()


def test_marked_rows_are_dropped_before_alignment():
    rows = example_rows()
    rows.batch["is_drop_mask"][[0, 5, 9]] = True
    _, metrics = prepare_batch(rows, config())
    assert metrics["training/n_sample_dropped/marked"] == 3
    assert metrics["training/n_sample_trained"] == 9


def test_nothing_left_skips_with_a_warning():
    with pytest.warns(EmptyBatchWarning):
        batch, metrics = prepare_batch(
            example_rows(), config("actor_rollout_ref.actor.ppo_mini_batch_size=5", "data.train_batch_size=5")
        )
    assert len(batch) == 0 and metrics["training/n_sample_trained"] == 0
    assert "critic/advantages/mean" not in metrics


def test_rows_without_data_ids_get_one_seeded_group_each():
    rows = example_rows()
    del rows.non_tensor_batch["data_id_list"]
    batch, _ = select_rows(rows, config(), seed=3)
    again, _ = select_rows(rows, config(), seed=3)
    assert len(set(batch.non_tensor_batch["uid"])) == 12
    assert batch.non_tensor_batch["uid"].tolist() == again.non_tensor_batch["uid"].tolist()


def test_remax_is_refused_with_agent_lightnings_text():
    with pytest.raises(NotImplementedError, match="REMAX baseline not yet supported in AgentLightningRayPPOTrainer"):
        prepare_batch(example_rows(), config("algorithm.adv_estimator=remax"))


def test_per_rollout_mean_needs_rollout_ids():
    cfg = config("algorithm.enable_rollout_level_advantage=false")
    batch, _ = select_rows(example_rows(), cfg)
    del batch.non_tensor_batch["rollout_id_list"]
    with pytest.raises(RuntimeError, match="^per_rollout_mean loss requires rollout_id_list$"):
        compute_advantages(batch, cfg)


def test_kl_in_reward_needs_log_probs():
    cfg = config("algorithm.use_kl_in_reward=true", "algorithm.enable_rollout_level_advantage=false")
    batch, _ = select_rows(example_rows(), cfg)
    with pytest.raises(ValueError, match=re.escape("algorithm.use_kl_in_reward needs batch['old_log_probs']")):
        compute_advantages(batch, cfg)
    batch.batch["old_log_probs"] = torch.zeros_like(batch.batch["token_level_scores"])
    batch.batch["ref_log_prob"] = torch.full_like(batch.batch["token_level_scores"], -0.1)
    batch, metrics = compute_advantages(batch, cfg)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(cfg.algorithm.kl_ctrl.kl_coef)
    assert not torch.equal(batch.batch["token_level_rewards"], batch.batch["token_level_scores"])


def test_group_metrics_count_zero_advantage_groups():
    rows = example_rows()
    rows.batch["token_level_scores"][:] = 0.0
    rows.batch["token_level_scores"][np.arange(len(rows)), rows.batch["response_mask"].sum(-1) - 1] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, metrics = prepare_batch(rows, config())
    assert metrics["training/n_groups"] == 2 and metrics["training/n_zero_adv_groups"] == 2


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("rollout_level", ["true", "false"])
@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus"])
def test_nan_and_inf_rewards_are_refused_on_every_path(bad, rollout_level, estimator):
    # with rollout-level advantage off, verl's estimators used to turn one NaN reward into NaN advantages for its group
    cfg = config(f"algorithm.enable_rollout_level_advantage={rollout_level}", f"algorithm.adv_estimator={estimator}")
    batch, _ = select_rows(example_rows(), cfg)
    row = 4
    last = int(batch.batch["response_mask"][row].nonzero().max())
    batch.batch["token_level_scores"][row, last] = bad
    snap = snapshot(batch)
    with pytest.raises(ValueError, match=re.escape("batch['token_level_scores'] has NaN or inf values in rows [4]")):
        compute_advantages(batch, cfg)
    assert_unchanged(batch, snap)  # refused before token_level_rewards or advantages were written
    with pytest.raises(ValueError, match="NaN or inf"):
        prepare_batch(batch, cfg)


ID_KINDS = {
    "object array": lambda ids: np.array(ids, dtype=object),
    "str array": lambda ids: np.array(ids),
    "list": list,
    "tuple": tuple,
    "Series": lambda ids: pd.Series(ids, index=np.arange(len(ids)) + 100),
    "tuple ids": lambda ids: [tuple(i.split("/")) for i in ids],
}


@pytest.mark.parametrize("kind", list(ID_KINDS))
def test_every_entry_point_takes_ids_of_any_sequence_type(kind):
    def rows():
        batch = example_rows()
        batch.batch["is_drop_mask"][3] = True
        for key in ("rollout_id_list", "data_id_list"):
            batch.non_tensor_batch[key] = ID_KINDS[kind](batch.non_tensor_batch[key].tolist())
        return batch

    def reference():
        batch = example_rows()
        batch.batch["is_drop_mask"][3] = True
        return batch

    cfg = config("agentlightning.max_ppo_update_times=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1")
    ours, ref = rows(), reference()
    ids = ours.non_tensor_batch["rollout_id_list"]
    mask = ref.batch["response_mask"]
    torch.testing.assert_close(
        normalize_advantages_by_rollout(mask.float(), mask, ids, num_trained_rows=5),
        normalize_advantages_by_rollout(
            mask.float(), mask, ref.non_tensor_batch["rollout_id_list"], num_trained_rows=5
        ),
    )
    for fn in (
        lambda b: prepare_batch(b, cfg, seed=1),
        lambda b: select_rows(b, cfg, seed=1),
        lambda b: apply_update_cap(b, mini_batch_size=5, seed=1),
        lambda b: drop_marked_rows(b),
        lambda b: compute_rollout_level_advantage(
            with_rewards(b), adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=3
        ),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyBatchWarning)
            (got, metrics), (want, want_metrics) = fn(rows()), fn(reference())
        assert metrics == want_metrics
        for key in want.batch.keys():
            torch.testing.assert_close(got.batch[key], want.batch[key], rtol=0, atol=0, msg=key)
        assert list(got.non_tensor_batch["rollout_id_list"]) == list(
            ID_KINDS[kind](list(want.non_tensor_batch["rollout_id_list"]))
        )
    assert same_reward_rows(rows()).tolist() == same_reward_rows(reference()).tolist()
    assert rows_frame(rows())["rows_in_rollout"].tolist() == rows_frame(reference())["rows_in_rollout"].tolist()
    weighting, _ = analyze_weighting(rows(), cfg, seed=1)
    expected, _ = analyze_weighting(reference(), cfg, seed=1)
    assert weighting.rollouts["weight"].tolist() == expected.rollouts["weight"].tolist()


@settings(max_examples=60, deadline=None)
@given(
    plan=plans(max_prompts=3, max_rollouts=3, max_rows=3),
    mini=st.integers(1, 3),
    times=st.sampled_from([None, 1, 2]),
    unit=st.sampled_from(["row", "rollout"]),
    seed=st.integers(0, 99),
)
def test_the_selection_carries_the_rollouts_trained_in_part(plan, mini, times, unit, seed):
    # the count every reader takes from the Selection equals a recount of the kept rows against the input's rollouts
    rows = make_rows(plan)
    cfg = config(
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        f"agentlightning.max_ppo_update_times={'null' if times is None else times}",
        f"lab.cap_drop_unit={unit}",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selection = plan_selection(rows, cfg, seed=seed)
    recount = partially_dropped(rows, selection.batch)
    assert selection.partial_metrics == recount
    assert selection.partially_dropped == recount["lab/partially_dropped_rollouts"]
    del rows.non_tensor_batch["rollout_id_list"]
    if unit == "row":  # without rollout ids there is nothing to count (and the rollout unit refuses)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert plan_selection(rows, cfg, seed=seed).partial_metrics == {}


def test_the_weighting_lab_and_the_trainer_share_steps_3_and_4():
    # the weighting lab's per-row advantage is the pipeline's own (rewards_and_advantages), for both rollout levels
    rows = example_rows()
    for level in (True, False):
        cfg = config(f"algorithm.enable_rollout_level_advantage={str(level).lower()}")
        result, _ = analyze_weighting(rows, cfg, rollout_levels=(level,), seed=0)
        batch, _ = select_rows(rows, cfg, seed=0)
        batch, _ = rewards_and_advantages(batch, cfg)
        mask = batch.batch["response_mask"].double()  # (kept, T)
        per_row = (batch.batch["advantages"].double() * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (kept,)
        np.testing.assert_allclose(result.advantages[level], per_row.numpy(), rtol=1e-6, atol=1e-7)
