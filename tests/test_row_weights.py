"""verl PR #7580's per-row loss weights, revision of 2026-09-19: hand-worked weights rescaled to mean 1 over the step's
rows, the errors that name the field, the trainer's weighted advantages through the registered loss equal to the
catalogue's closed forms (autograd), the loss scale by hand, and the weight on the entropy and KL terms too."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.utils.config import omega_conf_to_dataclass

from agl_lab import LOSS_MODES, compose_config
from agl_lab.core.row_weights import ROW_WEIGHTED_LOSS_MODES, row_loss_weights, weight_advantages
from agl_lab.core.weights import token_layout

# rollouts a = rows 0, 2 (2 and 4 tokens), b = row 1 (3 tokens), c = rows 3, 4, 5 (1, 1, 4 tokens)
TOKENS = [2, 3, 4, 1, 1, 4]
ROLLOUT = ["a", "b", "a", "c", "c", "c"]


def actor_config(mode):
    cfg = compose_config(
        dotlist=[
            f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        ]
    )
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def mask(tokens, width=5):
    return (torch.arange(width)[None, :] < torch.tensor(tokens)[:, None]).double()  # (rows, width)


def test_hand_worked_loss_weights():
    m = mask(TOKENS)
    # session_equal: raw 1/N with N = 2, 1, 2, 3, 3, 3 rows in the row's rollout: 1/2, 1, 1/2, 1/3, 1/3, 1/3, which
    # add up to 3 (one per rollout) over 6 rows, mean 1/2; rescaled to mean 1 (x 6/3 = x 2): 1, 2, 1, 2/3, 2/3, 2/3
    expected = [1.0, 2.0, 1.0, 2 / 3, 2 / 3, 2 / 3]
    got = row_loss_weights(m, ROLLOUT, mode="session_equal")
    torch.testing.assert_close(got, torch.tensor(expected).double())
    assert float(got.mean()) == pytest.approx(1.0)
    # every rollout still weighs the same: a 1 + 1, b 2, c 3 x 2/3
    np.testing.assert_allclose(np.bincount([0, 1, 0, 2, 2, 2], weights=got.numpy()), [2, 2, 2])
    # partition_preserving: T_j / mean(T): a's mean is 3 -> 2/3, 4/3; b 3/3; c's mean is 2 -> 1/2, 1/2, 2; these add
    # up to 6 over 6 rows already (mean 1): the rescale leaves them
    expected = [2 / 3, 1.0, 4 / 3, 1 / 2, 1 / 2, 2.0]
    got = row_loss_weights(m, ROLLOUT, mode="partition_preserving")
    torch.testing.assert_close(got, torch.tensor(expected).double())
    # its weights add up to N per rollout, as unweighted rows do: 2, 1, 3
    np.testing.assert_allclose(np.bincount([0, 1, 0, 2, 2, 2], weights=got.numpy()), [2, 1, 3])


def test_an_empty_rollout_weighs_nothing_under_partition_preserving():
    # raw 0 and 1, mean 1/2: rescaled 0 and 2, so the batch keeps the unweighted loss scale
    got = row_loss_weights(mask([0, 2]), ["a", "b"], mode="partition_preserving")
    torch.testing.assert_close(got, torch.tensor([0.0, 2.0]).double())
    assert row_loss_weights(mask([0, 0]), ["a", "b"], mode="partition_preserving").tolist() == [0.0, 0.0]


@pytest.mark.parametrize("mode", ROW_WEIGHTED_LOSS_MODES)
def test_the_loss_keeps_the_unweighted_scale_whatever_the_rows_per_rollout(mode):
    # revision 2's reason: raw 1/N scaled the loss by rollouts/rows (here 3/6); rescaled, the step's total weight is
    # seq-mean-token-mean's, rows / G = 6 / 2 = 3 (three mini-batches of G = 2 rows, each adding 1)
    codes = np.unique(ROLLOUT, return_inverse=True)[1]
    lay = token_layout(TOKENS, codes, mini_batch_rows=2, horizon=5)
    total = float((LOSS_MODES[mode].weight(lay) * lay.row_tokens).sum())
    unweighted = float((LOSS_MODES["seq-mean-token-mean"].weight(lay) * lay.row_tokens).sum())
    assert total == pytest.approx(unweighted) == pytest.approx(3.0)


def test_the_weights_do_not_depend_on_how_rows_are_packed():
    # once over the global batch, not per micro-batch: any micro-batch size gives the same per-row weight
    codes = np.unique(ROLLOUT, return_inverse=True)[1]
    weights = [
        LOSS_MODES["session_equal"].weight(
            token_layout(TOKENS, codes, mini_batch_rows=6, horizon=5, micro_batch_rows=m)
        )
        for m in (1, 2, 3, 6)
    ]
    for other in weights[1:]:
        np.testing.assert_allclose(other, weights[0])


def test_errors_name_the_field():
    with pytest.raises(RuntimeError, match=r"session_equal loss requires rollout_id_list"):
        row_loss_weights(mask(TOKENS), None, mode="session_equal")
    with pytest.raises(ValueError, match=r"rollout_ids length \(2\) must match response_mask rows \(6\)"):
        row_loss_weights(mask(TOKENS), ["a", "b"], mode="session_equal")
    with pytest.raises(ValueError, match=r"mode must be one of \['session_equal', 'partition_preserving'\]"):
        row_loss_weights(mask(TOKENS), ROLLOUT, mode="rollout_mean")
    with pytest.raises(ValueError, match=r"response_mask shape \(6, 5\) must match advantages shape \(6, 4\)"):
        weight_advantages(torch.ones(6, 4), mask(TOKENS), ROLLOUT, mode="session_equal")


@pytest.mark.parametrize("mode", ROW_WEIGHTED_LOSS_MODES)
@pytest.mark.parametrize("dp_size", [1, 2])
def test_the_registered_loss_on_weighted_advantages_weighs_as_the_catalogue_says(mode, dp_size):
    # 6 rows in three mini-batches of 2 (one micro-batch each per rank), ratio 1: the gradient w.r.t. log-prob of the
    # summed micro-batch losses (÷ dp_size, ranks average) is −w·A per token
    actor = actor_config(mode)
    codes = np.unique(ROLLOUT, return_inverse=True)[1]
    lay = token_layout(TOKENS, codes, mini_batch_rows=2, dp_size=dp_size, horizon=5)
    m = mask(TOKENS)
    advantages = torch.tensor([1.0, -2.0, 1.0, 0.5, 0.5, 0.5]).double()[:, None].expand(6, 5)
    weighted = weight_advantages(advantages, m, ROLLOUT, mode=mode)  # the trainer's step 5, once per step
    old = -torch.rand(6, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64) - 0.1
    fn = get_policy_loss_fn(mode)
    grad = torch.zeros_like(old)
    for micro in np.unique(lay.micro_batch):
        part = torch.from_numpy(np.flatnonzero(lay.micro_batch == micro))
        mini = torch.from_numpy(lay.mini_batch == lay.mini_batch[part[0]])
        actor.global_batch_info.update(dp_size=dp_size, batch_num_tokens=int(m[mini].sum()), global_batch_size=2)
        log_prob = old[part].clone().requires_grad_(True)
        loss, _ = fn(old[part], log_prob, weighted[part], m[part], "token-mean", actor)  # its agg mode is forced
        grad[part] += torch.autograd.grad(loss, log_prob)[0] / dp_size
    expected = torch.from_numpy(LOSS_MODES[mode].weight(lay))[:, None] * m * advantages
    torch.testing.assert_close(-grad, expected, rtol=1e-6, atol=1e-12)


def test_a_positive_row_weight_commutes_with_the_clip():
    # off ratio 1 (clipped tokens, dual clip for negative advantages) the loss of weighted advantages is each row's
    # loss times its weight: the PR's weighted seq-mean-token-mean exactly
    actor = actor_config("session_equal")
    actor.global_batch_info.update(dp_size=1, global_batch_size=6, batch_num_tokens=15)
    g = torch.Generator().manual_seed(1)
    old, new = (-torch.rand(6, 5, generator=g, dtype=torch.float64) for _ in range(2))
    advantages = torch.tensor([1.0, -2.0, 1.0, -0.5, -0.5, -0.5]).double()[:, None].expand(6, 5)
    m = mask(TOKENS)
    fn = get_policy_loss_fn("session_equal")
    weighted, _ = fn(old, new, weight_advantages(advantages, m, ROLLOUT, mode="session_equal"), m, "x", actor)
    w = row_loss_weights(m, ROLLOUT, mode="session_equal")
    per_row = [fn(old[i : i + 1], new[i : i + 1], advantages[i : i + 1], m[i : i + 1], "x", actor)[0] for i in range(6)]
    torch.testing.assert_close(weighted, sum(w[i] * per_row[i] for i in range(6)), rtol=1e-9, atol=1e-12)
