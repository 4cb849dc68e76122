"""Per-token loss weights: verl's closed forms are the gradient of verl's own agg_loss; per_rollout_mean's are the
trainer's normalization; every catalogue mode's function is checked on hand-worked layouts."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.core_algos import agg_loss

from agl_lab import LOSS_MODES
from agl_lab.core import weights
from agl_lab.core.weights import TokenLayout

VERL_AGG = [name for name, mode in LOSS_MODES.items() if mode.family == "verl loss_agg_mode"]


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
