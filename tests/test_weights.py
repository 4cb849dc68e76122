"""Per-token loss weights: hand-worked layouts for every catalogue mode, verl's layout of ranks, mini- and
micro-batches, and the closed forms against autograd through verl's agg_loss and every registered policy loss."""

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, agg_loss
from verl.utils.config import omega_conf_to_dataclass

from agl_lab import LOSS_MODES, compose_config
from agl_lab.config.modes import AGG_LOSS_POLICY_LOSSES
from agl_lab.config.verl_features import VERL_FEATURES, forced_aggregation
from agl_lab.core import weights
from agl_lab.core.loss import normalize_advantages_by_rollout
from agl_lab.core.weights import TokenLayout, token_layout

# verl's aggregations the installed verl has (verl 0.8.0 has no token-sum: its closed form is pinned on 0.9.1)
VERL_AGG = [name for name, mode in LOSS_MODES.items() if mode.family == "verl loss_agg_mode" and not mode.verl_problem]
LOSS_KEY = "actor_rollout_ref.actor.policy_loss.loss_mode"


def layout(tokens, *, rollout=None, mini=None, horizon=4.0):
    tokens = np.asarray(tokens, dtype=np.float64)
    n = len(tokens)
    mini = mini or max(n, 1)
    return TokenLayout(
        row_tokens=tokens,
        rollout=np.arange(n) if rollout is None else np.asarray(rollout),
        mini_batch=np.arange(n) // mini,
        mini_batch_rows=mini,
        horizon=horizon,
    )


def test_hand_worked_weights_of_two_mini_batches():
    # rows of 1, 3 | 2, 2 tokens in mini-batches of 2 rows; rollouts a = rows 0, 2 and b = rows 1, 3; H = 4
    lay = layout([1, 3, 2, 2], rollout=[0, 1, 0, 1], mini=2)
    np.testing.assert_allclose(weights.token_mean(lay), [1 / 4, 1 / 4, 1 / 4, 1 / 4])  # 4 tokens per mini-batch
    np.testing.assert_allclose(weights.seq_mean_token_sum(lay), [1 / 2] * 4)  # G = 2
    np.testing.assert_allclose(weights.seq_mean_token_mean(lay), [1 / 2, 1 / 6, 1 / 4, 1 / 4], rtol=1e-6)  # 1/(n·G)
    np.testing.assert_allclose(weights.seq_mean_token_sum_norm(lay), [1 / 8] * 4)  # 1/(G·H)
    np.testing.assert_allclose(weights.token_sum(lay), [1.0] * 4)
    # per_rollout_mean: T_a = 3, T_b = 5 tokens; N = 4 rows → 1/12, 1/20; R = 2 rollouts → 1/6, 1/10
    np.testing.assert_allclose(weights.per_rollout_mean_rows(lay), [1 / 12, 1 / 20, 1 / 12, 1 / 20])
    np.testing.assert_allclose(weights.per_rollout_mean_rollouts(lay), [1 / 6, 1 / 10, 1 / 6, 1 / 10])


# Eight rows; rollouts a = rows 0, 2; b = 1; c = 3, 4; d = 5, 6, 7; prompt groups q0 = {a, b}, q1 = {c, d}.
TOKENS = [1, 3, 2, 2, 4, 1, 1, 2]
ROLLOUT = [0, 1, 0, 2, 2, 3, 3, 3]
GROUP = [0, 0, 0, 1, 1, 1, 1, 1]


def eight_rows(*, dp, micro):
    return token_layout(TOKENS, ROLLOUT, group=GROUP, mini_batch_rows=4, micro_batch_rows=micro, dp_size=dp, horizon=8)


def test_verls_layout_chunks_ranks_first_then_mini_then_micro_batches():
    one = eight_rows(dp=1, micro=2)  # consecutive mini-batches of 4 rows, micro-batches of 2
    assert one.mini_batch.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert one.micro_batch.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # two ranks: rank 0 holds rows 0-3, rank 1 rows 4-7; each cuts mini-batches of 4 / 2 = 2 rows, so the step's
    # mini-batch 0 is rows 0, 1 (rank 0) and 4, 5 (rank 1); micro-batches of 1 row: id (b·D + rank)·M + offset
    two = eight_rows(dp=2, micro=1)
    assert two.mini_batch.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert two.micro_batch.tolist() == [0, 1, 4, 5, 2, 3, 6, 7]
    with pytest.raises(ValueError, match="cannot be split over 3 data-parallel ranks"):
        eight_rows(dp=3, micro=1)


def test_hand_worked_weights_of_every_new_mode():
    lay = eight_rows(dp=1, micro=2)  # H = 8, G = 4; mini-batch tokens 8 and 8; micro-batch tokens 4, 4, 5, 3
    n = np.array(TOKENS, dtype=float)
    # geo_mean: 1/(n·B_μ·D) with B_μ = 2, D = 1
    np.testing.assert_allclose(weights.geo_mean(lay), 1 / (2 * n), rtol=1e-6)
    # sapo and TRL grpo: 1/(n·G), G = 4
    np.testing.assert_allclose(weights.sapo(lay), 1 / (4 * n), rtol=1e-6)
    np.testing.assert_allclose(weights.trl_grpo(lay), 1 / (4 * n))
    # TRL bnpo: 1/(N_μ·M_b), M_b = 2 micro-batches per mini-batch
    np.testing.assert_allclose(weights.trl_bnpo(lay), [1 / 8, 1 / 8, 1 / 8, 1 / 8, 1 / 10, 1 / 10, 1 / 6, 1 / 6])
    np.testing.assert_allclose(weights.trl_dr_grpo(lay), [1 / 32] * 8)  # 1/(G·H) = 1/(4·8)
    np.testing.assert_allclose(weights.trl_dapo(lay), [1 / 8] * 8)  # 1/N_b
    # SkyRL prompt_mean: mini-batch 0 holds q0's rows 0-2 (1 + 3 + 2 = 6 tokens) and q1's row 3 (2), P_0 = 2:
    # 1/(2·6) and 1/(2·2); mini-batch 1 holds q1 only (4 + 1 + 1 + 2 = 8 tokens), P_1 = 1: 1/8
    np.testing.assert_allclose(weights.skyrl_prompt_mean(lay), [1 / 12, 1 / 12, 1 / 12, 1 / 4] + [1 / 8] * 4)
    # rollout_mean: R = 4; k = 2, 1, 2, 3 rows; w = 1/(R·k·n): a 1/8, 1/16; b 1/12; c 1/16, 1/32; d 1/12, 1/12, 1/24
    expected = [1 / 8, 1 / 12, 1 / 16, 1 / 16, 1 / 32, 1 / 12, 1 / 12, 1 / 24]
    np.testing.assert_allclose(weights.rollout_mean(lay), expected)
    per_rollout = np.bincount(ROLLOUT, weights=weights.rollout_mean(lay) * n)
    np.testing.assert_allclose(per_rollout, [1 / 4] * 4)  # each rollout 1/R: a = 1/8 + 2/16, c = 2/16 + 4/32, ...


def test_hand_worked_weights_of_verl_pr_7580s_proposals():
    lay = eight_rows(dp=1, micro=2)  # G = 4; rollouts a (rows 0, 2: T = 3), b (1: 3), c (3, 4: 6), d (5-7: 4)
    n = np.array(TOKENS, dtype=float)
    # session_equal: loss_weight 1/k rescaled to mean 1 over the N = 8 rows of R = 4 rollouts (x N/R = x 2), on
    # seq-mean-token-mean's 1/(n·G): w = 2/(k·n·G), k = 2, 1, 2, 3; each rollout's mass N/(R·G) = 2/4
    expected = [1 / 4, 1 / 6, 1 / 8, 1 / 8, 1 / 16, 1 / 6, 1 / 6, 1 / 12]
    np.testing.assert_allclose(weights.session_equal(lay), expected, rtol=1e-7)
    np.testing.assert_allclose(np.bincount(ROLLOUT, weights=weights.session_equal(lay) * n), [1 / 2] * 4, rtol=1e-7)
    # partition_preserving: k/(T·G): a 2/12, b 1/12, c 2/24, d 3/16: each rollout's mass k/G, as unweighted rows
    expected = [1 / 6, 1 / 12, 1 / 6, 1 / 12, 1 / 12, 3 / 16, 3 / 16, 3 / 16]
    np.testing.assert_allclose(weights.partition_preserving(lay), expected, rtol=1e-7)
    per_rollout = np.bincount(ROLLOUT, weights=weights.partition_preserving(lay) * n)
    np.testing.assert_allclose(per_rollout, np.bincount(ROLLOUT) / 4, rtol=1e-7)


def test_hand_worked_weights_on_two_ranks():
    lay = eight_rows(dp=2, micro=None)  # micro-batch = a rank's mini-batch of 2 rows
    n = np.array(TOKENS, dtype=float)
    # the step's mini-batch 0 is rows 0, 1, 4, 5 (1 + 3 + 4 + 1 = 9 tokens), mini-batch 1 rows 2, 3, 6, 7 (7 tokens)
    np.testing.assert_allclose(weights.token_mean(lay), [1 / 9, 1 / 9, 1 / 7, 1 / 7, 1 / 9, 1 / 9, 1 / 7, 1 / 7])
    np.testing.assert_allclose(weights.geo_mean(lay), 1 / (n * 2 * 2), rtol=1e-6)  # B_μ = 2, D = 2
    # bnpo: micro-batches {0, 1} 4 tokens, {4, 5} 5, {2, 3} 4, {6, 7} 3; M_b = 2 (one per rank)
    np.testing.assert_allclose(weights.trl_bnpo(lay), [1 / 8, 1 / 8, 1 / 8, 1 / 8, 1 / 10, 1 / 10, 1 / 6, 1 / 6])


@pytest.mark.parametrize("mode", list(LOSS_MODES))
def test_every_catalogue_mode_weighs_an_empty_batch_as_nothing(mode):
    assert LOSS_MODES[mode].weight(layout([])).shape == (0,)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 6), min_size=1, max_size=12),
    size=st.integers(1, 4),
    horizon=st.integers(6, 9),
)
def test_closed_form_weights_are_the_gradient_of_verls_agg_loss(lengths, size, horizon):
    n = len(lengths) // size * size or size
    lengths = (lengths * size)[:n]  # whole mini-batches of `size` rows
    mask = (torch.arange(horizon)[None, :] < torch.tensor(lengths)[:, None]).float()  # (rows, H)
    lay = layout(lengths, mini=size, horizon=float(horizon))
    for mode in VERL_AGG:
        closed = LOSS_MODES[mode].weight(lay)
        for b in range(n // size):
            part = slice(b * size, (b + 1) * size)
            loss_mat = torch.zeros(size, horizon, dtype=torch.float64, requires_grad=True)
            loss = agg_loss(
                loss_mat,
                mask[part].double(),
                mode,
                batch_num_tokens=max(int(mask[part].sum()), 1),
                global_batch_size=size,
                loss_scale_factor=horizon,
            )
            (grad,) = torch.autograd.grad(loss, loss_mat)
            expected = torch.from_numpy(closed[part])[:, None] * mask[part]  # (size, H): empty rows get nothing
            torch.testing.assert_close(grad, expected.double(), msg=mode)


# --- every entry of verl's policy-loss registry, through the real function ------------------------------------


@functools.cache
def actor_config():
    """verl's ActorConfig (gspo, sapo and cispo insist on it); dro (verl 0.9 on) needs its beta."""
    dro = ["actor_rollout_ref.actor.policy_loss.dro_beta=0.5"] if VERL_FEATURES["dro"].available() else []
    cfg = compose_config(dotlist=["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", *dro])
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def registry_gradient(name, agg_mode, lay, mask, old, advantages):
    """−∂L/∂log π ÷ A for the step as verl's engine runs it: each micro-batch through the registered loss with its
    mini-batch's global_batch_info, micro-batch losses summed, gradients averaged over the ranks."""
    actor = actor_config()
    fn = POLICY_LOSS_REGISTRY[name]
    grad = torch.zeros_like(old)
    for micro in np.unique(lay.micro_batch):
        part = torch.from_numpy(np.flatnonzero(lay.micro_batch == micro))
        b = lay.mini_batch[part[0]]
        actor.global_batch_info.update(
            dp_size=lay.dp_size,
            batch_num_tokens=int(mask[torch.from_numpy(lay.mini_batch == b)].sum()),
            global_batch_size=lay.mini_batch_rows,
            loss_scale_factor=lay.horizon,
        )
        log_prob = old[part].clone().requires_grad_(True)
        loss, _ = fn(old[part], log_prob, advantages[part], mask[part], agg_mode, actor)
        if loss.requires_grad:
            grad[part] += torch.autograd.grad(loss, log_prob)[0] / lay.dp_size
    return torch.where(mask > 0, -grad / advantages, 0.0)


REGISTRY_ENTRIES = [n for n in POLICY_LOSS_REGISTRY if n in AGG_LOSS_POLICY_LOSSES or n in LOSS_MODES]


@pytest.mark.parametrize("name", REGISTRY_ENTRIES)
@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 5), min_size=8, max_size=8),  # aggregation never makes an empty row
    dp=st.sampled_from([1, 2]),
    micro=st.sampled_from([None, 1, 2]),
    agg_mode=st.sampled_from(VERL_AGG),
    seed=st.integers(0, 99),
)
def test_every_registered_policy_loss_weighs_as_the_catalogue_says(name, lengths, dp, micro, agg_mode, seed):
    # 8 rows in two mini-batches of 4, at ratio 1 (log-prob = old); sapo and geo_mean aggregate their own way, the
    # others through agg_loss with the configured mode (clip_cov also zeroes a few random tokens per micro-batch)
    lay = token_layout(lengths, np.arange(8), mini_batch_rows=4, micro_batch_rows=micro, dp_size=dp, horizon=6)
    mode = name if name in LOSS_MODES else (forced_aggregation(name) or agg_mode)  # verl 0.8.0's gspo: its own
    mask = (torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]).double()  # (8, 6)
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(8, 6, generator=g, dtype=torch.float64) - 0.1
    advantages = (torch.rand(8, 1, generator=g, dtype=torch.float64) + 0.5).expand(8, 6)  # one per row, ≠ 0
    got = registry_gradient(name, agg_mode, lay, mask, old, advantages)
    expected = torch.from_numpy(LOSS_MODES[mode].weight(lay))[:, None] * mask
    if name == "clip_cov":  # at most max(1, ⌊2e-4·N_μ⌋) = 1 token per micro-batch is zeroed
        zeroed = (got == 0) & (mask > 0)
        assert int(zeroed.sum()) <= len(np.unique(lay.micro_batch))
        got = torch.where(zeroed, expected, got)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-12, msg=f"{name} with {agg_mode}")


def test_every_registry_entry_is_accounted_for():
    # a new verl loss must be placed: aggregating through agg_loss, or weighing its own way (a catalogue entry)
    own = {m.settings.get(LOSS_KEY) for m in LOSS_MODES.values() if m.trainable}
    assert set(POLICY_LOSS_REGISTRY) <= set(AGG_LOSS_POLICY_LOSSES) | own


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 700), min_size=1, max_size=12),
    n_rollouts=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    divisor=st.sampled_from(["rows", "rollouts"]),
)
def test_per_rollout_mean_weights_in_numpy_are_the_trainers_normalization(lengths, n_rollouts, seed, divisor):
    # the catalogue's numpy weights (no torch for the diagnostics) = normalize_advantages_by_rollout on a unit float64
    # advantage, bit for bit
    rollout = np.unique(np.random.default_rng(seed).integers(0, n_rollouts, len(lengths)), return_inverse=True)[1]
    lay = token_layout(lengths, rollout, mini_batch_rows=len(lengths), horizon=1.0)
    mask = (torch.arange(max(lengths) + 1)[None, :] < torch.tensor(lengths)[:, None]).long()  # (rows, R)
    unit = normalize_advantages_by_rollout(
        torch.ones(mask.shape, dtype=torch.float64), mask, rollout, num_trained_rows=len(lengths), divisor=divisor
    )[:, 0]  # (rows,): every token of a row has the same weight
    mode = "per_rollout_mean:rows" if divisor == "rows" else "per_rollout_mean:rollouts"
    np.testing.assert_array_equal(LOSS_MODES[mode].weight(lay), unit.numpy())
