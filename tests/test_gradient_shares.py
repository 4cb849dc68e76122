"""Each rollout's weight measured on the lab policy's actual gradient (per-sample gradients, verl's registered
losses over mini- and micro-batches) equals the closed form for every trainable mode; shares add up to 1."""

import functools

import numpy as np
import pytest
import torch

from agl_lab import short_run_config
from agl_lab.config.modes import trainable_modes
from agl_lab.lab.gradient_shares import gradient_shares, row_gradients
from agl_lab.training.step_batch import policy_log_probs, sample_step_batch
from conftest import TINY_RUN


@functools.cache
def step():
    """A step of a short run's task with the tiny policy: 2 locks × 4 rollouts, mini-batches of 4 rows in
    micro-batches of 2."""
    cfg = short_run_config(dotlist=TINY_RUN)
    batch, policy = sample_step_batch(cfg)
    # Scores in float32, not Agent Lightning's bf16: bf16 advantages (and their bf16 normalization) round the actual
    # gradient by up to 2^-8 relative, which would hide a wrong weight of that size; the closed forms are exact math.
    batch.batch["token_level_scores"] = batch.batch["token_level_scores"].float()
    return cfg, batch, policy


@pytest.mark.parametrize("dp_size", [1, 2])
def test_measured_weights_are_the_closed_forms(dp_size):
    cfg, batch, policy = step()
    assert len(batch) >= 8 and batch.batch["response_mask"].sum(-1).min() > 0
    out = gradient_shares(
        batch, cfg, log_probs=policy_log_probs(policy, cfg), parameters=list(policy.model.parameters()),
        dp_size=dp_size,
    )  # fmt: skip
    assert set(out["mode"]) == set(trainable_modes())
    np.testing.assert_allclose(out["measured_mass"], out["closed_form_mass"], rtol=1e-4, atol=1e-6)
    known = out.dropna(subset=["measured_weight"])  # rollouts whose advantage is not 0
    assert len(known) > len(out) / 2
    np.testing.assert_allclose(known["measured_weight"], known["closed_form_weight"], rtol=1e-4)
    np.testing.assert_allclose(out.groupby("mode")["gradient_share"].sum(), 1.0, rtol=1e-6)


def test_per_sample_gradients_are_each_rows_own():
    cfg, batch, policy = step()
    params = list(policy.model.parameters())
    log_probs = policy_log_probs(policy, cfg)
    _, directions = row_gradients(batch, log_probs=log_probs, parameters=params)
    mask = batch.batch["response_mask"].double()
    for i in (0, len(batch) - 1):  # a plain loop: one backward of one row's mean log-prob
        mean = (log_probs(batch)[i].double() * mask[i]).sum() / mask[i].sum()
        grads = torch.autograd.grad(mean, params)
        expected = torch.cat([g.reshape(-1).double() for g in grads])
        # both sides are float32 gradients: equal up to float32 rounding, relative to the gradient's scale
        torch.testing.assert_close(directions[i], expected, rtol=1e-4, atol=1e-6 * expected.abs().max().item())
