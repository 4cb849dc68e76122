import copy
import functools
import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass

import agl_lab
from agl_lab import (
    CISPO_PER_ROLLOUT_MEAN_LOSS_MODE,
    PER_ROLLOUT_MEAN_LOSS_MODE,
    compose_config,
    compute_policy_loss_cispo_per_rollout_mean,
    compute_policy_loss_per_rollout_mean,
    normalize_advantages_by_rollout,
)
from agl_lab.config.verl_features import VERL_FEATURES
from agl_lab.core.loss import register_in_worker


@functools.lru_cache
def _actor_config(overrides):
    dotlist = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"]
    dotlist += [f"actor_rollout_ref.actor.{k}={v}" for k, v in overrides]
    return omega_conf_to_dataclass(compose_config(dotlist=dotlist).actor_rollout_ref.actor)


def actor_config(dp_size=None, **overrides):
    """verl's own ActorConfig dataclass, built from the composed config like verl's workers build it."""
    config = copy.deepcopy(_actor_config(tuple(sorted(overrides.items()))))
    if dp_size is not None:
        config.global_batch_info["dp_size"] = dp_size
    return config


# The seed's example: rollout A = rows of 2 and 1 trainable tokens, rollout B = one row of 3 tokens.
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
IDS = np.array(["A", "A", "B"], dtype=object)


def rollout_masses(normalized, mask, ids):
    mass = (normalized * mask).sum(-1)
    return {r: mass[torch.from_numpy(ids == r)].sum().item() for r in dict.fromkeys(ids)}


def test_v1_divisor_gives_each_rollout_one_over_rows():
    advantages = MASK.float()  # advantage 1 on every trainable token
    out = normalize_advantages_by_rollout(advantages, MASK, IDS, num_trained_rows=3)
    # A: 3 tokens × 3 rows = 9 per token -> 3/9 = 1/3; B: 3 × 3 = 9 -> 3/9 = 1/3. Total 2/3 = n_rollouts / n_rows.
    assert out[0].tolist() == pytest.approx([1 / 9, 1 / 9, 0])
    assert rollout_masses(out, MASK, IDS) == pytest.approx({"A": 1 / 3, "B": 1 / 3})
    assert (out * MASK).sum().item() == pytest.approx(2 / 3)


def test_eq16_divisor_gives_each_rollout_one_over_rollouts():
    out = normalize_advantages_by_rollout(MASK.float(), MASK, IDS, num_trained_rows=3, divisor="rollouts")
    # A: 3 tokens × 2 rollouts = 6 -> 3/6 = 1/2; B: 3 × 2 -> 1/2. Total exactly 1.
    assert rollout_masses(out, MASK, IDS) == pytest.approx({"A": 0.5, "B": 0.5})


def test_divisor_is_floored_at_one():
    mask = torch.tensor([[0, 0], [1, 0]])
    out = normalize_advantages_by_rollout(
        torch.ones(2, 2), mask, np.array(["A", "B"], dtype=object), num_trained_rows=1
    )
    # A has 0 tokens: 0 × 1 floored to 1 (no division by zero); B: 1 × 1 = 1
    assert out.tolist() == [[1.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (
            lambda: normalize_advantages_by_rollout(MASK.float(), MASK, None, num_trained_rows=3),
            RuntimeError,
            "per_rollout_mean loss requires rollout_id_list",
        ),
        (
            lambda: normalize_advantages_by_rollout(MASK.float(), MASK, IDS[:2], num_trained_rows=3),
            ValueError,
            "rollout_ids length (2) must match advantages rows (3)",
        ),
        (
            lambda: normalize_advantages_by_rollout(MASK.float(), MASK, IDS, num_trained_rows=0),
            ValueError,
            "num_trained_rows must be positive",
        ),
        (
            lambda: normalize_advantages_by_rollout(MASK.float(), MASK, IDS, num_trained_rows=3, divisor="tokens"),
            ValueError,
            "divisor must be one of ['rows', 'rollouts'], got 'tokens'",
        ),
        (
            lambda: normalize_advantages_by_rollout(MASK.float(), MASK[:, :2], IDS, num_trained_rows=3),
            ValueError,
            "response_mask shape (3, 2) must match advantages shape (3, 3)",
        ),
    ],
)
def test_normalization_errors(call, error, text):
    with pytest.raises(error, match=re.escape(text)):
        call()


def test_loss_at_ratio_one_is_minus_dp_size_times_the_advantage_sum():
    advantages = normalize_advantages_by_rollout(MASK.float(), MASK, IDS, num_trained_rows=3)
    log_prob = torch.full((3, 3), -1.3)
    loss, metrics = compute_policy_loss_per_rollout_mean(
        log_prob, log_prob, advantages, MASK, config=actor_config(dp_size=2)
    )
    # ratio 1 everywhere: pg_losses = -A, summed under the mask: -(1/3 + 1/3) = -2/3, times dp_size 2.
    assert loss.item() == pytest.approx(-2 * (advantages * MASK).sum().item())
    assert loss.item() == pytest.approx(-4 / 3)
    assert metrics == {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac_lower": 0.0}


def test_clip_and_dual_clip_hand_worked():
    # Four one-token rows: (A, log-ratio) = (+1, 0.5), (-1, 2.0), (-1, ln 0.5), (+1, 30 -> clamped to 20).
    advantages = torch.tensor([[1.0], [-1.0], [-1.0], [1.0]])
    log_ratio = torch.tensor([[0.5], [2.0], [math.log(0.5)], [30.0]])
    mask = torch.ones(4, 1)
    loss, metrics = compute_policy_loss_per_rollout_mean(
        torch.zeros(4, 1), log_ratio, advantages, mask, config=actor_config()
    )
    # row 0: max(-1.6487, -1.2) = -1.2 (clipped)
    # row 1: max(7.389, 1.2) = 7.389, dual clip min(3, 7.389) = 3 (lower-clipped)
    # row 2: max(0.5, 0.8) = 0.8 (clipped), min(3, 0.8) = 0.8
    # row 3: ratio e^20, max(-e^20, -1.2) = -1.2 (clipped)
    assert loss.item() == pytest.approx(-1.2 + 3.0 + 0.8 - 1.2, rel=1e-5)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(3 / 4)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 4)
    # ppo_kl = mean(-log_ratio) with the clamp: -(0.5 + 2 - 0.6931 + 20) / 4
    assert metrics["actor/ppo_kl"] == pytest.approx(-(0.5 + 2.0 + math.log(0.5) + 20.0) / 4, rel=1e-5)


def test_asymmetric_clip_ratios_and_importance_weights():
    config = actor_config(clip_ratio_low=0.1, clip_ratio_high=0.3)
    advantages = torch.tensor([[1.0, -1.0]])
    log_prob = torch.log(torch.tensor([[1.5, 0.5]]))
    loss, _ = compute_policy_loss_per_rollout_mean(
        torch.zeros(1, 2),
        log_prob,
        advantages,
        torch.ones(1, 2),
        config=config,
        rollout_is_weights=torch.tensor([[2.0, 0.5]]),
    )
    # token 0: max(-1.5, -1.3) = -1.3, × weight 2 = -2.6; token 1: max(0.5, 0.9) = 0.9, × 0.5 = 0.45
    assert loss.item() == pytest.approx(-2.6 + 0.45)


def test_clip_ratio_c_must_exceed_one():
    # Agent Lightning asserts this: an AssertionError with its text (raised explicitly here, so python -O keeps it)
    with pytest.raises(AssertionError, match=re.escape("clip_ratio_c must be greater than 1.0, got 1.0")):
        compute_policy_loss_per_rollout_mean(
            torch.zeros(1, 1),
            torch.zeros(1, 1),
            torch.ones(1, 1),
            torch.ones(1, 1),
            config=actor_config(clip_ratio_c=1.0),
        )


@pytest.mark.parametrize(
    ("loss", "mode"),
    [
        (compute_policy_loss_per_rollout_mean, "per_rollout_mean"),
        (compute_policy_loss_cispo_per_rollout_mean, "cispo_per_rollout_mean"),
    ],
)
def test_missing_config_is_agent_lightnings_assertion(loss, mode):
    with pytest.raises(AssertionError, match=re.escape(f"{mode} loss requires the actor config")):
        loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1))


def test_cispo_hand_worked_loss_gradient_and_metrics():
    # Three one-token rows, clip 0.2: (A, log π_old, log π) = (+1, 0, 0.5), (-1, 0, ln 0.5), (+2, -1, -1).
    advantages = torch.tensor([[1.0], [-1.0], [2.0]])
    old = torch.tensor([[0.0], [0.0], [-1.0]])
    log_prob = torch.tensor([[0.5], [math.log(0.5)], [-1.0]], requires_grad=True)
    loss, metrics = compute_policy_loss_cispo_per_rollout_mean(
        old, log_prob, advantages, torch.ones(3, 1), config=actor_config(dp_size=2, clip_ratio_c=1.0)
    )
    # ratios e^0.5 = 1.6487 -> clipped 1.2; 0.5 -> clipped 0.8; 1 -> 1. Terms −clip·A·log π:
    # −1.2·1·0.5 = −0.6; −0.8·(−1)·(−0.6931) = −0.5545; −1·2·(−1) = 2. Sum 0.8455, × dp_size 2 = 1.6910.
    expected = 2 * (-1.2 * 0.5 - 0.8 * math.log(0.5) * -1.0 + 2.0)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    # ∂/∂log π = −clip·A·dp_size: a clipped token keeps its gradient (scaled by the clipped ratio), unlike PPO's
    assert log_prob.grad.flatten().tolist() == pytest.approx([-2 * 1.2, 2 * 0.8, -2 * 2.0])
    # clip_ratio_c = 1.0 is accepted: CISPO has no dual clip and never reads it
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 3)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0
    assert metrics["actor/ppo_kl"] == pytest.approx(-(0.5 + math.log(0.5)) / 3, rel=1e-6)


def test_loss_agg_mode_is_ignored_and_a_dictconfig_works():
    args = (torch.zeros(2, 2), torch.full((2, 2), 0.1), torch.tensor([[1.0, -2.0], [0.5, 0.0]]), torch.ones(2, 2))
    dict_config = compose_config().actor_rollout_ref.actor
    losses = {
        mode: compute_policy_loss_per_rollout_mean(*args, loss_agg_mode=mode, config=dict_config)[0].item()
        for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
    }
    assert len(set(losses.values())) == 1


def test_registered_in_verls_registry():
    assert agl_lab.PER_ROLLOUT_MEAN_LOSS_MODE == "per_rollout_mean"
    assert agl_lab.CISPO_PER_ROLLOUT_MEAN_LOSS_MODE == "cispo_per_rollout_mean"
    assert get_policy_loss_fn(PER_ROLLOUT_MEAN_LOSS_MODE) is compute_policy_loss_per_rollout_mean
    assert get_policy_loss_fn(CISPO_PER_ROLLOUT_MEAN_LOSS_MODE) is compute_policy_loss_cispo_per_rollout_mean


def test_registration_never_clobbers_another_function(monkeypatch):
    def theirs(*args, **kwargs):
        raise AssertionError("not called")

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, PER_ROLLOUT_MEAN_LOSS_MODE, theirs)
    monkeypatch.delitem(core_algos.POLICY_LOSS_REGISTRY, CISPO_PER_ROLLOUT_MEAN_LOSS_MODE)
    with pytest.warns(UserWarning, match="'per_rollout_mean' to .*agl_lab leaves that registration in place"):
        register_in_worker()
    assert core_algos.POLICY_LOSS_REGISTRY[PER_ROLLOUT_MEAN_LOSS_MODE] is theirs
    # the other name, missing, is registered all the same
    assert (
        core_algos.POLICY_LOSS_REGISTRY[CISPO_PER_ROLLOUT_MEAN_LOSS_MODE] is compute_policy_loss_cispo_per_rollout_mean
    )
    monkeypatch.setitem(
        core_algos.POLICY_LOSS_REGISTRY, PER_ROLLOUT_MEAN_LOSS_MODE, compute_policy_loss_per_rollout_mean
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register_in_worker()  # re-registering our own function is silent


@settings(max_examples=250, deadline=None)
@given(
    rows=st.integers(1, 6),
    width=st.integers(1, 5),
    dp_size=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    clip=st.sampled_from([(0.2, 0.2), (0.1, 0.28)]),
)
def test_equals_verls_vanilla_loss_summed_over_tokens(rows, width, dp_size, seed, clip):
    # per_rollout_mean is vanilla PPO's clipped objective with a token sum: check it against verl's own code.
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(rows, width, generator=gen)
    new = old + 0.5 * torch.randn(rows, width, generator=gen)
    advantages = torch.randn(rows, width, generator=gen)
    mask = (torch.rand(rows, width, generator=gen) > 0.3).long()
    config = actor_config(dp_size=dp_size, clip_ratio_low=clip[0], clip_ratio_high=clip[1])
    ours, our_metrics = get_policy_loss_fn("per_rollout_mean")(old, new, advantages, mask, "token-mean", config)
    aggregation = "token-sum"
    if not VERL_FEATURES["token-sum"].available():  # verl 0.8.0: its seq-mean-token-sum over one row is the same sum
        aggregation, config.global_batch_info["global_batch_size"] = "seq-mean-token-sum", 1
    verls, verl_metrics = get_policy_loss_fn("vanilla")(old, new, advantages, mask, aggregation, config)
    torch.testing.assert_close(ours, verls)
    assert our_metrics == pytest.approx(verl_metrics, nan_ok=True)


def reference_normalize(advantages, mask, ids, num_trained_rows, divisor):
    """Agent Lightning v1.0's normalization written with loops (Eq. 16 counts rollouts instead of rows)."""
    tokens = {}
    for i, rollout in enumerate(ids):
        tokens[rollout] = tokens.get(rollout, 0.0) + float(mask[i].sum())
    count = num_trained_rows if divisor == "rows" else len(tokens)
    out = advantages.clone()
    for i, rollout in enumerate(ids):
        out[i] = advantages[i] / max(tokens[rollout] * count, 1.0)
    return out


@settings(max_examples=250, deadline=None)
@given(
    n_rows=st.integers(1, 12),
    width=st.integers(1, 6),
    n_rollouts=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    divisor=st.sampled_from(["rows", "rollouts"]),
)
def test_normalization_matches_loop_reference_and_equalizes_rollouts(n_rows, width, n_rollouts, seed, divisor):
    rng = np.random.default_rng(seed)
    ids = np.array([f"r{x}" for x in rng.integers(0, n_rollouts, n_rows)], dtype=object)
    mask = torch.from_numpy(rng.random((n_rows, width)) > 0.25).long()
    mask[:, 0] = 1  # every row has a trainable token
    per_rollout_adv = {r: float(rng.normal()) for r in dict.fromkeys(ids)}
    advantages = torch.tensor([[per_rollout_adv[r]] * width for r in ids]) * mask
    out = normalize_advantages_by_rollout(advantages, mask, ids, num_trained_rows=n_rows, divisor=divisor)
    torch.testing.assert_close(out, reference_normalize(advantages, mask, ids, n_rows, divisor))
    # each rollout's mass is its advantage over the same count, whatever its row and token counts
    count = n_rows if divisor == "rows" else len(per_rollout_adv)
    masses = rollout_masses(out, mask, ids)
    for rollout, advantage in per_rollout_adv.items():
        assert masses[rollout] == pytest.approx(advantage / count, abs=1e-6)
    if divisor == "rollouts":  # Eq. 16: with advantage 1 everywhere the batch total is exactly 1
        ones = normalize_advantages_by_rollout(mask.float(), mask, ids, num_trained_rows=n_rows, divisor="rollouts")
        assert (ones * mask).sum().item() == pytest.approx(1.0)


@pytest.mark.ray
def test_ray_workers_get_the_loss_through_the_setup_hook():
    import ray

    from agl_lab.studies.ray_start import init_ray  # ray.init, tried again if a busy machine makes it time out

    lookup = ray.remote(get_policy_loss_fn)
    try:
        init_ray(num_cpus=1, include_dashboard=False, log_to_driver=False)
        with pytest.raises(ray.exceptions.RayTaskError, match="Unsupported loss mode: per_rollout_mean"):
            ray.get(lookup.remote(PER_ROLLOUT_MEAN_LOSS_MODE))  # a bare worker never imports agl_lab
        ray.shutdown()
        init_ray(num_cpus=1, include_dashboard=False, log_to_driver=False, runtime_env=agl_lab.ray_runtime_env())
        assert ray.get(lookup.remote(PER_ROLLOUT_MEAN_LOSS_MODE)) is compute_policy_loss_per_rollout_mean
        cispo = ray.get(lookup.remote(CISPO_PER_ROLLOUT_MEAN_LOSS_MODE))
        assert cispo is compute_policy_loss_cispo_per_rollout_mean
    finally:
        ray.shutdown()


def test_agent_lightnings_assertions_survive_python_O():
    # Agent Lightning checks with `assert` (gone under python -O); agl_lab raises the same AssertionError explicitly
    import subprocess
    import sys

    probe = (
        "import torch; from omegaconf import OmegaConf\n"
        "from agl_lab.core.loss import compute_policy_loss_per_rollout_mean as loss\n"
        "cfg = OmegaConf.create({'clip_ratio': 0.2, 'clip_ratio_c': 1.0, 'global_batch_info': {}})\n"
        "try:\n    loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), config=cfg)\n"
        "except AssertionError as exc:\n    print('raised:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-O", "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().endswith("raised: clip_ratio_c must be greater than 1.0, got 1.0"), out.stderr[-2000:]
