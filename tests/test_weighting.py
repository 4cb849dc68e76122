import copy
import functools
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass

from agl_lab import LOSS_MODES, EmptyBatchWarning, compose_config, prepare_batch
from agl_lab.config.modes import mode_settings, trainable_modes
from agl_lab.lab.examples import seed_example
from agl_lab.lab.loss_scale import loss_scale
from agl_lab.lab.weighting import analyze_weighting
from conftest import assert_unchanged, make_rows, plans, snapshot

MODES = list(LOSS_MODES)


@functools.cache
def _base():
    return compose_config(overrides={"algorithm": {"adv_estimator": "grpo"}})


@functools.cache
def config(*, n=1, mini=1, cap=None, level=True, loss_mode="per_rollout_mean", divisor="rows", kl=False):
    """A composed config (shared: do not modify) with mini-batches of n × mini rows, the cap and the settings."""
    cfg = copy.deepcopy(_base())
    cfg.actor_rollout_ref.rollout.n = n
    cfg.actor_rollout_ref.actor.ppo_mini_batch_size = mini
    cfg.agentlightning.max_ppo_update_times = cap
    cfg.algorithm.enable_rollout_level_advantage = level
    cfg.algorithm.use_kl_in_reward = kl
    cfg.actor_rollout_ref.actor.policy_loss.loss_mode = loss_mode
    cfg.lab.per_rollout_divisor = divisor
    return cfg


def weights(result, mode, level=True):
    """{rollout_id: weight} for one setting."""
    frame = result.rollouts[(result.rollouts["mode"] == mode) & (result.rollouts["rollout_level"] == level)]
    return dict(zip(frame["rollout_id"], frame["weight"], strict=True))


def column(result, mode, name, level=True):
    frame = result.rollouts[(result.rollouts["mode"] == mode) & (result.rollouts["rollout_level"] == level)]
    return dict(zip(frame["rollout_id"], frame[name], strict=True))


def total(result, mode, level=True):
    t = result.totals
    return t[(t["mode"] == mode) & (t["rollout_level"] == level)]["total_weight"].item()


# --- the seed's example: A = rows of 2 and 1 tokens (reward 1), B = one row of 3 (reward 0), 3 rows trained ---

SEED_WEIGHTS = {
    # w = 1/(T·N) with T = 3 tokens per rollout, N = 3 rows: each rollout 3·1/9 = 1/3; total 2/3
    "per_rollout_mean:rows": ({"A": 1 / 3, "B": 1 / 3}, 2 / 3),
    # w = 1/(T·R), R = 2 rollouts: 3·1/6 = 1/2 each; total 1
    "per_rollout_mean:rollouts": ({"A": 1 / 2, "B": 1 / 2}, 1.0),
    # CISPO's gradient at ratio 1 is −Â, Â normalized as for per_rollout_mean ÷ rows
    "cispo_per_rollout_mean:rows": ({"A": 1 / 3, "B": 1 / 3}, 2 / 3),
    # w = 1/N_b, 6 tokens: A 3/6, B 3/6
    "token-mean": ({"A": 1 / 2, "B": 1 / 2}, 1.0),
    # w = 1/G, G = 3 rows: row weights 2/3, 1/3 (A) and 3/3 (B)
    "seq-mean-token-sum": ({"A": 1.0, "B": 1.0}, 2.0),
    # each row 1/G = 1/3 whatever its length: A has two rows
    "seq-mean-token-mean": ({"A": 2 / 3, "B": 1 / 3}, 1.0),
    # as seq-mean-token-sum, ÷ H = 3 (the response width)
    "seq-mean-token-sum-norm": ({"A": 1 / 3, "B": 1 / 3}, 2 / 3),
    # w = 1 per token: each rollout has 3 tokens
    "token-sum": ({"A": 3.0, "B": 3.0}, 6.0),
    # sapo forces seq-mean-token-mean: each row 1/G = 1/3, A has two rows
    "sapo": ({"A": 2 / 3, "B": 1 / 3}, 1.0),
    # geo_mean: the mean over the micro-batch's B_μ = 3 rows (one micro-batch), D = 1: each row 1/3
    "geo_mean": ({"A": 2 / 3, "B": 1 / 3}, 1.0),
    # TRL grpo: per-row token mean over G = 3 rows, as seq-mean-token-mean
    "trl:grpo": ({"A": 2 / 3, "B": 1 / 3}, 1.0),
    # TRL bnpo: 1/(N_μ · M_b) = 1/(6 tokens · 1 micro-batch): each rollout 3/6
    "trl:bnpo": ({"A": 1 / 2, "B": 1 / 2}, 1.0),
    # TRL dr_grpo: 1/(G · H) = 1/(3 · 3): 3 tokens each → 1/3
    "trl:dr_grpo": ({"A": 1 / 3, "B": 1 / 3}, 2 / 3),
    # TRL dapo: 1/N_b = 1/6 per token
    "trl:dapo": ({"A": 1 / 2, "B": 1 / 2}, 1.0),
    # SkyRL prompt_mean: one prompt group of 6 tokens, P_b = 1 group: 1/6 per token
    "skyrl:prompt_mean": ({"A": 1 / 2, "B": 1 / 2}, 1.0),
    # rollout_mean, R = 2: A's rows (k = 2) of 2 and 1 tokens: 2·1/(2·2·2) + 1·1/(2·2·1) = 1/4 + 1/4; B: 3·1/(2·1·3)
    "rollout_mean": ({"A": 1 / 2, "B": 1 / 2}, 1.0),
    # session_equal (verl PR #7580, revision 2): each row's token mean × 1/N rescaled to mean 1 over the 3 rows (raw
    # 1/2, 1/2, 1 average 2/3: × 3/2), over G = 3 rows: A's two rows (3/4)/3 each, B (3/2)/3; total 3 rows / G = 1
    "session_equal": ({"A": 1 / 2, "B": 1 / 2}, 1.0),
    # partition_preserving: row weight T_j / mean T over the rollout's rows, ÷ G: A (2 and 1 tokens, mean 3/2)
    # (4/3 + 2/3)/3 = 2/3, B (3/3)/3 = 1/3: a split rollout still weighs N times
    "partition_preserving": ({"A": 2 / 3, "B": 1 / 3}, 1.0),
}


@pytest.mark.parametrize("mode", MODES)
def test_seed_example_weights_per_mode(mode):
    rows, cfg = seed_example()
    result, _ = analyze_weighting(rows, cfg)
    expected, expected_total = SEED_WEIGHTS[mode]
    for level in (True, False):  # weights do not depend on the advantage
        assert weights(result, mode, level) == pytest.approx(expected)
        assert total(result, mode, level) == pytest.approx(expected_total)


def test_seed_example_advantages_and_masses():
    rows, cfg = seed_example()
    result, metrics = analyze_weighting(rows, cfg)

    # The example's scores are bf16, as Agent Lightning's, so verl's GRPO computes in bf16: each advantage is the
    # exact value rounded to bf16 (8 significant bits).
    def bf16(x):
        return torch.tensor(x, dtype=torch.bfloat16).item()

    # rollout-level GRPO on one row per rollout: rewards (1, 0), mean 1/2, std 1/√2 → ±1/√2
    on = column(result, "per_rollout_mean:rows", "advantage", level=True)
    assert on == pytest.approx({"A": bf16(2**-0.5), "B": bf16(-(2**-0.5))}, rel=1e-6)
    # verl's GRPO on the rows: rewards (1, 1, 0), mean 2/3, std √(1/3) → A (1/3)/√(1/3) = √(1/3), B −2√(1/3)
    off = column(result, "per_rollout_mean:rows", "advantage", level=False)
    # (verl's GRPO takes the mean and std in bf16 too: about 2^-7 relative error per step, so 1% overall)
    assert off == pytest.approx({"A": 3**-0.5, "B": -2 * 3**-0.5}, rel=1e-2)
    # mass = weight × advantage: 1/3 × ±1/√2 with rollout-level advantage on
    assert column(result, "per_rollout_mean:rows", "mass", level=True) == pytest.approx(
        {"A": bf16(2**-0.5) / 3, "B": bf16(-(2**-0.5)) / 3}, rel=1e-6
    )
    assert column(result, "per_rollout_mean:rows", "share") == pytest.approx({"A": 0.5, "B": 0.5})
    assert column(result, "seq-mean-token-mean", "relative_weight") == pytest.approx({"A": 4 / 3, "B": 2 / 3})
    assert metrics["training/rollout_level_advantage/n_multi_row_rollouts"] == 1
    # the notebook's views: weights per rollout and mode with the total, and one line per mode
    assert result.pivot().loc["per_rollout_mean:rows"].tolist() == pytest.approx([1 / 3, 1 / 3, 2 / 3])
    assert result.pivot().columns.tolist() == ["A", "B", "total"]
    summary = result.summary(rollout_level=False)
    assert summary.index.tolist() == list(MODES)
    assert summary.loc["seq-mean-token-mean", "weight_ratio"] == pytest.approx(2.0)  # A (2 rows) vs B (1 row)


def test_two_mini_batches_and_a_rollout_split_across_them():
    # rows in order: A0 (1 token), B0 (2) | B1 (3), C0 (2); mini-batches of n × mini = 2 × 1 = 2 rows
    rows = make_rows([("q", "A", 1.0, [1]), ("q", "B", 0.0, [2, 3]), ("q", "C", 1.0, [2])])
    result, _ = analyze_weighting(rows, config(n=2, mini=1))
    assert result.rows["mini_batch"].tolist() == [0, 0, 1, 1]
    # token-mean: mini-batch 0 has 3 tokens (w = 1/3), mini-batch 1 has 5 (w = 1/5)
    # A = 1/3; B = 2/3 + 3/5 = 19/15; C = 2/5; each mini-batch sums to 1, the step to 2
    assert weights(result, "token-mean") == pytest.approx({"A": 1 / 3, "B": 19 / 15, "C": 2 / 5})
    assert total(result, "token-mean") == pytest.approx(2.0)
    # seq-mean-token-mean: every row 1/2; B has two
    assert weights(result, "seq-mean-token-mean") == pytest.approx({"A": 0.5, "B": 1.0, "C": 0.5})
    # seq-mean-token-sum: row tokens / 2: A 1/2, B (2 + 3)/2, C 2/2
    assert weights(result, "seq-mean-token-sum") == pytest.approx({"A": 0.5, "B": 2.5, "C": 1.0})
    # per_rollout_mean normalizes over the whole step, mini-batches or not: 1/N = 1/4 and 1/R = 1/3 each
    assert weights(result, "per_rollout_mean:rows") == pytest.approx({"A": 0.25, "B": 0.25, "C": 0.25})
    assert weights(result, "per_rollout_mean:rollouts") == pytest.approx({"A": 1 / 3, "B": 1 / 3, "C": 1 / 3})
    assert column(result, "token-mean", "mini_batches") == {"A": 1, "B": 2, "C": 1}
    per_mb = result.by_mini_batch("token-mean", rollout_level=True)
    b = per_mb[per_mb["rollout_id"] == "B"]
    assert b["mini_batch"].tolist() == [0, 1] and b["weight"].tolist() == pytest.approx([2 / 3, 3 / 5])
    mb = result.mini_batches[(result.mini_batches["mode"] == "token-mean") & result.mini_batches["rollout_level"]]
    assert mb["rows"].tolist() == [2, 2] and mb["rollouts"].tolist() == [2, 2]
    assert mb["total_weight"].tolist() == pytest.approx([1.0, 1.0])


def test_cap_fates_same_reward_groups_first_then_random_then_marked():
    # q0: a and b both reward 1 (no GRPO signal); q1: c (2 rows, reward 1), d (reward 0), e (marked: prompt too long)
    plan = [("q0", "a", 1.0, [1]), ("q0", "b", 1.0, [1]), ("q1", "c", 1.0, [1, 1]), ("q1", "d", 0.0, [1])]
    rows = make_rows([*plan, ("q1", "e", 0.0, [1])])
    rows.batch["is_drop_mask"][5] = True
    # 5 unmarked rows, mini-batches of 2 rows, cap 1: keep 2, drop 3 — a and b first, then one of c0, c1, d
    result, metrics = analyze_weighting(rows, config(n=2, mini=1, cap=1), seed=0)
    fates = result.rows["fate"].tolist()
    assert fates[:2] == ["dropped/same_reward"] * 2 and fates[5] == "dropped/marked"
    assert sorted(fates[2:5]) == ["dropped/random", "kept", "kept"]
    assert metrics["training/n_sample_dropped/same_reward"] == 2 and metrics["training/n_sample_dropped/random"] == 1
    assert column(result, "token-mean", "rows_kept")["a"] == 0 and column(result, "token-mean", "rows")["c"] == 2
    # Eq. 16 over the 2 kept rows' rollouts (1 or 2 of them): each trained rollout weighs 1/R, the others 0
    eq16 = weights(result, "per_rollout_mean:rollouts")
    trained = [r for r, k in column(result, "token-mean", "rows_kept").items() if k > 0]
    assert eq16 == pytest.approx({r: (1 / len(trained) if r in trained else 0.0) for r in "abcde"})


@pytest.mark.filterwarnings("ignore::agl_lab.EmptyBatchWarning")
@settings(max_examples=20, deadline=None)
@given(plan=plans(max_prompts=3, max_rollouts=3, max_rows=3), cap=st.sampled_from([None, 1, 2]), seed=st.integers(0, 9))
def test_fates_agree_with_the_cap_metrics(plan, cap, seed):
    rows = make_rows(plan)
    rows.batch["is_drop_mask"][0] = True
    result, metrics = analyze_weighting(rows, config(n=2, mini=1, cap=cap), seed=seed, rollout_levels=())
    counts = result.rows["fate"].value_counts()
    for fate, key in [
        ("dropped/marked", "training/n_sample_dropped/marked"),
        ("dropped/same_reward", "training/n_sample_dropped/same_reward"),
        ("dropped/random", "training/n_sample_dropped/random"),
        ("kept", "training/n_sample_trained"),
    ]:
        assert counts.get(fate, 0) == metrics[key], fate


@pytest.mark.filterwarnings("ignore::agl_lab.EmptyBatchWarning")
@settings(max_examples=10, deadline=None)
@given(plan=plans(max_prompts=3, max_rollouts=3, max_rows=3, max_len=4), cap=st.sampled_from([None, 1]))
def test_advantages_and_per_rollout_mean_masses_are_the_pipelines(plan, cap):
    rows = make_rows(plan)
    result, _ = analyze_weighting(rows, config(n=2, mini=1, cap=cap), seed=3)
    kept = result.rows[result.rows["fate"] == "kept"]
    for level in (True, False):
        batch, _ = prepare_batch(rows, config(n=2, mini=1, cap=cap, level=level, loss_mode="vanilla"), seed=3)
        assert len(batch) == len(kept)
        if not len(batch):
            continue
        table = result.row_table("token-mean", rollout_level=level).set_index("row").loc[kept["row"]]
        sums = (batch.batch["advantages"] * batch.batch["response_mask"]).sum(-1)
        np.testing.assert_allclose(table["advantage"] * table["trainable_tokens"], sums, rtol=1e-5, atol=1e-6)
        for divisor in ("rows", "rollouts"):
            cfg = config(n=2, mini=1, cap=cap, level=level, divisor=divisor)
            batch, _ = prepare_batch(rows, cfg, seed=3)  # the trainer's normalized advantages
            mass = result.row_table(f"per_rollout_mean:{divisor}", rollout_level=level).set_index("row")["mass"]
            sums = (batch.batch["advantages"] * batch.batch["response_mask"]).sum(-1)
            np.testing.assert_allclose(mass.loc[kept["row"]], sums, rtol=1e-5, atol=1e-7)


def verl_micro_batches(n_rows, *, mini_rows, dp, micro):
    """Row indices of each micro-batch, as verl's actor update cuts a step: contiguous chunks per rank, each cut
    into mini-batches of mini_rows / dp rows, those into micro-batches of `micro` rows. Yields (mini-batch, rows)."""
    shard, local_mini = n_rows // dp, mini_rows // dp
    micro = micro or local_mini
    for rank in range(dp):
        for b, start in enumerate(range(rank * shard, (rank + 1) * shard, local_mini)):
            for first in range(start, start + local_mini, micro):
                yield b, list(range(first, min(first + micro, start + local_mini)))


@pytest.mark.parametrize(("dp", "micro"), [(1, None), (1, 1), (2, 1), (2, 2)])
@pytest.mark.parametrize("mode", trainable_modes())
def test_masses_are_minus_the_gradient_of_the_registered_policy_loss(mode, dp, micro):
    # The loss the optimizer applies at ratio 1, as verl's engine computes it: the registry's loss on each
    # micro-batch with global_batch_info of its mini-batch, micro-batch losses summed, gradients averaged over the
    # dp ranks. Its gradient w.r.t. each token's log-prob is −w·A, so a row's summed gradient is minus its mass.
    rows = make_rows(
        [("q0", "a", 1.0, [3, 1]), ("q0", "b", 0.0, [2]), ("q1", "c", 0.0, [1, 2, 2]), ("q1", "d", 1.0, [4]),
         ("q2", "e", 1.0, [2, 2]), ("q2", "f", 0.0, [1, 3, 1])]
    )  # fmt: skip
    keys = {**mode_settings(mode), "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro or 4 // dp}
    cfg = copy.deepcopy(config(n=2, mini=2))  # mini-batches of 4 rows: 12 of the 13 rows are trained
    for key, value in keys.items():
        OmegaConf.update(cfg, key, value)
    if micro is None:
        cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = None
    result, _ = analyze_weighting(rows, cfg, dp_size=dp)
    batch, _ = prepare_batch(rows, cfg)  # the trainer's advantages (normalized where the loss needs it)
    actor_cfg = copy.deepcopy(cfg.actor_rollout_ref.actor)
    actor_cfg.ppo_micro_batch_size_per_gpu = micro or 4 // dp
    actor = omega_conf_to_dataclass(actor_cfg)
    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    mask = batch.batch["response_mask"]
    old = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    advantages = batch.batch["advantages"].double()
    gradient = torch.zeros(len(batch), dtype=torch.float64)
    for b, part in verl_micro_batches(len(batch), mini_rows=4, dp=dp, micro=micro):
        mini_tokens = _mini_batch_tokens(mask, b, dp=dp)
        actor.global_batch_info.update(dp_size=dp, batch_num_tokens=mini_tokens, global_batch_size=4,
                                       loss_scale_factor=None)  # fmt: skip
        log_prob = old[part].clone().requires_grad_(True)
        loss, _ = loss_fn(old[part], log_prob, advantages[part], mask[part], actor.loss_agg_mode, actor)
        (grad,) = torch.autograd.grad(loss, log_prob)
        gradient[part] += grad.sum(-1) / dp
    table = result.row_table(mode, rollout_level=True)
    kept = table[table["fate"] == "kept"]
    assert len(kept) == len(batch) == 12
    np.testing.assert_allclose(-gradient.numpy(), kept["mass"].to_numpy(), rtol=1e-5, atol=1e-7)


def _mini_batch_tokens(mask, b, *, dp):
    """Tokens of global mini-batch b: the b-th local mini-batch of every rank, all-reduced."""
    shard, local = len(mask) // dp, 4 // dp
    return int(sum(mask[r * shard + b * local : r * shard + (b + 1) * local].sum() for r in range(dp)))


# --- properties on random batches --------------------------------------------------------------------------


def on_random_batches(test):
    """Run ``test(result)`` on analyses of random batches: mini-batches of 2 rows, no cap or a cap of 1 or 2."""

    @pytest.mark.filterwarnings("ignore::agl_lab.EmptyBatchWarning")
    @settings(max_examples=25, deadline=None)
    @given(plan=plans(max_prompts=3, max_rollouts=4, max_rows=4), cap=st.sampled_from([None, 1, 2]))
    def run(plan, cap):
        test(analyze_weighting(make_rows(plan), config(n=2, mini=1, cap=cap), rollout_levels=(True,))[0])

    run.__name__ = test.__name__
    return run


@on_random_batches
def test_masses_sum_to_each_modes_total(result):
    kept = result.rows[result.rows["fate"] == "kept"]
    n_rows, n_mb = len(kept), kept["mini_batch"].nunique()
    n_rollouts = kept["rollout_id"].nunique()
    expected = {
        "token-mean": n_mb,  # each mini-batch's token weights add up to 1
        "seq-mean-token-mean": n_mb,  # each mini-batch's rows add up to 1
        "seq-mean-token-sum": kept["trainable_tokens"].sum() / 2,  # tokens / rows per mini-batch
        "per_rollout_mean:rows": n_rollouts / n_rows if n_rows else 0.0,  # v1.0: n_rollouts / n_rows
        "per_rollout_mean:rollouts": 1.0 if n_rows else 0.0,  # Eq. 16
        "sapo": n_mb,  # seq-mean-token-mean's
        "geo_mean": kept["micro_batch"].nunique(),  # each micro-batch's rows add up to 1 (D = 1)
        "trl:grpo": n_mb,
        "trl:bnpo": n_mb,  # each micro-batch 1/M_b
        "trl:dapo": n_mb,
        "skyrl:prompt_mean": n_mb,  # each group 1/P_b of its mini-batch
        "rollout_mean": 1.0 if n_rows else 0.0,  # each rollout 1/R
    }
    for mode, value in expected.items():
        assert sum(weights(result, mode).values()) == pytest.approx(value), mode
        assert total(result, mode) == pytest.approx(value), mode


@on_random_batches
def test_eq16_gives_every_trained_rollout_exactly_one_over_r(result):
    frame = result.rollouts[
        (result.rollouts["mode"] == "per_rollout_mean:rollouts") & (result.rollouts["rows_kept"] > 0)
    ]
    assert np.allclose(frame["weight"], 1 / max(len(frame), 1))
    v1 = result.rollouts[(result.rollouts["mode"] == "per_rollout_mean:rows") & (result.rollouts["rows_kept"] > 0)]
    assert np.allclose(v1["weight"], 1 / max(v1["rows_kept"].sum(), 1))  # v1.0: 1/N each, same relative weights
    assert np.allclose(v1["relative_weight"], 1.0)


@settings(max_examples=25, deadline=None)
@given(
    rows_per_rollout=st.lists(st.integers(1, 4), min_size=2, max_size=6),
    length=st.integers(1, 5),
    rewards=st.lists(st.sampled_from([0.0, 1.0]), min_size=6, max_size=6),
)
def test_seq_modes_weigh_a_k_row_rollout_k_times_a_one_row_rollout(rows_per_rollout, length, rewards):
    # every row has the same length; one mini-batch holds all rows (rollout.n = 1, ppo_mini_batch_size = rows)
    plan = [("q", f"r{i}", rewards[i], [length] * k) for i, k in enumerate(rows_per_rollout)]
    rows = make_rows(plan)
    result, _ = analyze_weighting(rows, config(n=1, mini=len(rows)), rollout_levels=(True,))
    for mode in ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        w = weights(result, mode)
        one_row = w["r0"] / rows_per_rollout[0]  # what a one-row rollout of this length weighs
        assert [w[f"r{i}"] for i in range(len(plan))] == pytest.approx([k * one_row for k in rows_per_rollout])
    # …and per_rollout_mean removes it
    assert len(set(np.round(list(weights(result, "per_rollout_mean:rows").values()), 12))) == 1


def test_input_rows_are_left_as_they_were(example):
    snap = snapshot(example)
    analyze_weighting(example, config(n=3, mini=1, cap=1))
    assert_unchanged(example, snap)


def test_derived_response_mask_and_rewards_only_batches():
    rows, cfg = seed_example()
    reference, _ = analyze_weighting(rows, cfg)
    derived, _ = seed_example()
    derived.batch["token_level_rewards"] = derived.batch.pop("token_level_scores")  # a dump taken after step 3
    derived.batch.pop("response_mask")  # verl derives it from responses + attention_mask
    result, _ = analyze_weighting(derived, cfg)
    assert result.rollouts["weight"].tolist() == pytest.approx(reference.rollouts["weight"].tolist())
    assert result.rollouts["mass"].tolist() == pytest.approx(reference.rollouts["mass"].tolist())


def test_a_batch_lacking_the_fields_a_mode_needs():
    rows, cfg = seed_example()
    rows.non_tensor_batch.pop("rollout_id_list")
    rows.batch.pop("token_level_scores")
    with pytest.raises(ValueError) as error:
        analyze_weighting(rows, cfg, modes=["per_rollout_mean:rows"])
    message = str(error.value)
    assert message.startswith("the weighting analysis (per_rollout_mean:rows) needs fields this batch lacks:")
    assert "rollout_id_list (one rollout id per row" in message
    assert "token_level_scores (" in message and " or token_level_rewards (" in message
    assert "non-tensor fields ['data_id_list', 'turn_index_list']" in message


@pytest.mark.parametrize(
    ("kwargs", "keys", "message"),
    [
        ({"modes": ["token-avg"]}, {}, "unknown loss modes ['token-avg']"),
        ({}, {"kl": True}, "set algorithm.use_kl_in_reward=false"),
    ],
)
def test_refused_settings(kwargs, keys, message):
    rows, _ = seed_example()
    with pytest.raises(ValueError, match=re.escape(message)):
        analyze_weighting(rows, config(n=1, mini=3, **keys), **kwargs)


def test_nothing_left_after_the_cap_gives_zero_weights():
    rows, _ = seed_example()
    with pytest.warns(EmptyBatchWarning):
        result, metrics = analyze_weighting(rows, config(n=4, mini=1))  # 3 rows < one mini-batch of 4
    assert metrics["training/n_sample_trained"] == 0
    assert (result.totals["total_weight"] == 0).all() and (result.rollouts["weight"] == 0).all()
    assert set(result.rows["fate"]) == {"dropped/random"}


def test_loss_scale_of_the_seed_example_per_mode():
    from agl_lab.core.pipeline import select_rows

    rows, cfg = seed_example()
    kept, _ = select_rows(rows, cfg)
    # v1.0: each rollout 1/3 (1/n_rows), total 2/3 = n_rollouts / n_rows; Eq. 16: total 1; token-mean: one
    # mini-batch of 3 rows, its token weights sum to 1; seq-mean-token-sum: 6 tokens / 3 rows = 2.
    expected = {"per_rollout_mean:rows": 2 / 3, "per_rollout_mean:rollouts": 1.0, "token-mean": 1.0,
                "seq-mean-token-sum": 2.0}  # fmt: skip
    for mode, total in expected.items():
        mode_cfg = compose_config(
            overrides={"algorithm": {"adv_estimator": "grpo"}, "actor_rollout_ref": {"rollout": {"n": 1}}},
            dotlist=[
                f"{k}={v}" for k, v in {**mode_settings(mode), "actor_rollout_ref.actor.ppo_mini_batch_size": 3}.items()
            ],
        )
        assert loss_scale(kept, mode_cfg) == pytest.approx(total), mode


def test_per_turn_estimators_weigh_like_every_mode_and_refuse_rollout_level_advantage():
    from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows

    knobs = SyntheticKnobs(n_prompts=4, rollouts_per_prompt=4, calls="uniform", min_calls=1, max_calls=3,
                           break_prob=0.4, turn_rewards="per_turn", turn_reward_mean=-0.25, turn_reward_spread=0.25,
                           seed=3)  # fmt: skip
    rows, _ = synthetic_rows(knobs)
    for estimator in ("mt_grpo", "mt_grpo_fix", "turn_grpo"):
        cfg = compose_config(dotlist=[f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=1",
                                      "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                                      "algorithm.enable_rollout_level_advantage=false"])  # fmt: skip
        result, _ = analyze_weighting(rows, cfg)  # rollout-level advantage off alone: it refuses per-turn credit
        assert set(result.rollouts["rollout_level"]) == {False}
        # a rollout's mass under per_rollout_mean ÷ rows is what the trainer's steps 1-5 give it (its normalized
        # advantages, summed): the weighting reads the same per-turn advantages the trainer trains on
        trained, _ = prepare_batch(rows, cfg)
        sums = (trained.batch["advantages"].double() * trained.batch["response_mask"]).sum(dim=-1).numpy()
        ids = trained.non_tensor_batch["rollout_id_list"]
        expected = {rid: sums[ids == rid].sum() for rid in result.rollout_groups.ids}
        masses = [expected[rid] for rid in result.rollout_groups.ids]
        np.testing.assert_allclose(result.rollout_mass("per_rollout_mean:rows", False), masses, rtol=1e-5, atol=1e-7)
        with pytest.raises(ValueError, match="needs every row of a rollout to carry the same reward"):
            analyze_weighting(rows, cfg, rollout_levels=(True,))
