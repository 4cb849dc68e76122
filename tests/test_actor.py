"""The lab's actor update: verl PR #7580's row weights on every loss term (revision of 2026-09-19).

One mini-batch of the whole batch in one micro-batch, one epoch: the update's ``actor/entropy_loss`` and
``actor/kl_loss`` are the aggregated terms at the weights before the optimizer step, so they can be computed by hand
from the policy's own log-probs and entropies with verl's ``agg_loss`` and ``kl_penalty``.
"""

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
from verl.utils.config import omega_conf_to_dataclass

from agl_lab import short_run_config
from agl_lab.core.pipeline import prepare_batch
from agl_lab.lab.examples import example_rows
from agl_lab.training.actor import build_optimizer_and_scheduler, compute_log_probs, update_actor
from agl_lab.training.policy import build_policy
from conftest import TINY_RUN

TERMS = (
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.kl_loss_coef=0.1",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "algorithm.enable_rollout_level_advantage=true",
)


def batch_and_actor(mode, *extra):
    rows = example_rows()
    n = len(rows)
    cfg = short_run_config(
        dotlist=[
            *TINY_RUN,
            *TERMS,
            f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={n}",
            "actor_rollout_ref.rollout.n=1",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={n}",
            *extra,
        ]
    )
    policy = build_policy(cfg, words=["a", "b", "c"])
    vocab = policy.model.config.vocab_size
    for key in ("prompts", "responses", "input_ids"):  # the example's token ids, folded into the tiny vocabulary
        rows.batch[key] = rows.batch[key] % vocab
    batch, _ = prepare_batch(rows, cfg)
    old, entropy = compute_log_probs(policy, batch, micro_batch_size=n, temperature=1.0, with_entropy=True)
    batch.batch["old_log_probs"] = old
    generator = torch.Generator().manual_seed(0)
    batch.batch["ref_log_prob"] = old - torch.rand(old.shape, generator=generator) * 0.3  # a reference that differs
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    return policy, batch, actor, entropy


@pytest.mark.parametrize("mode", ["session_equal", "partition_preserving"])
def test_row_weights_multiply_the_entropy_and_kl_terms(mode):
    policy, batch, actor, entropy = batch_and_actor(mode)
    weight = batch.batch["loss_weight"]  # (rows,): mean 1 over the step's rows
    assert float(weight.double().mean()) == pytest.approx(1.0) and float(weight.std()) > 0  # the rows weigh apart
    mask = batch.batch["response_mask"].bool()
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": len(batch)}
    info["loss_scale_factor"] = actor.loss_scale_factor
    rows = weight.unsqueeze(-1)  # (rows, 1)
    kld = kl_penalty(logprob=batch.batch["old_log_probs"], ref_logprob=batch.batch["ref_log_prob"],
                     kl_penalty="low_var_kl")  # fmt: skip
    expected = {
        "actor/entropy_loss": float(agg_loss(entropy * rows, mask, actor.loss_agg_mode, **info)),
        "actor/kl_loss": float(agg_loss(kld * rows, mask, actor.loss_agg_mode, **info)),
    }
    unweighted = {
        "actor/entropy_loss": float(agg_loss(entropy, mask, actor.loss_agg_mode, **info)),
        "actor/kl_loss": float(agg_loss(kld, mask, actor.loss_agg_mode, **info)),
    }
    optimizer, _ = build_optimizer_and_scheduler(policy, actor, total_steps=1)
    metrics = update_actor(policy, optimizer, batch, actor=actor, mini_batch_rows=len(batch), temperature=1.0, step=0)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-9), key
        assert not np.isclose(value, unweighted[key], rtol=1e-3), f"{key}: the weights should change it"


def test_a_batch_without_row_weights_keeps_the_terms_unweighted():
    policy, batch, actor, entropy = batch_and_actor("per_rollout_mean")
    assert "loss_weight" not in batch.batch.keys()
    mask = batch.batch["response_mask"].bool()
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": len(batch)}
    info["loss_scale_factor"] = actor.loss_scale_factor
    optimizer, _ = build_optimizer_and_scheduler(policy, actor, total_steps=1)
    metrics = update_actor(policy, optimizer, batch, actor=actor, mini_batch_rows=len(batch), temperature=1.0, step=0)
    expected = float(agg_loss(entropy, mask, actor.loss_agg_mode, **info))
    assert metrics["actor/entropy_loss"] == pytest.approx(expected, rel=1e-5)


def test_under_lora_only_the_adapter_trains_and_the_base_gets_no_gradient():
    """The frozen base weights have requires_grad False, so autograd never computes their weight gradient (each
    linear's backward computes dW only for a weight that requires it): the backward is the activations' gradient and
    the adapter's, and the optimizer holds the adapter alone."""
    policy, batch, actor, _ = batch_and_actor("per_rollout_mean", "actor_rollout_ref.model.lora_rank=4")
    named = dict(policy.model.named_parameters())
    adapter = {name for name, p in named.items() if p.requires_grad}
    assert adapter and all("lora_" in name for name in adapter)
    optimizer, _ = build_optimizer_and_scheduler(policy, actor, total_steps=1)
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert optimized == {id(named[name]) for name in adapter}
    before = {name: p.detach().clone() for name, p in named.items()}
    optimizer.step = lambda *args, **kwargs: None  # keep the gradients to look at (a step would use them)
    optimizer.zero_grad = lambda *args, **kwargs: None
    update_actor(policy, optimizer, batch, actor=actor, mini_batch_rows=len(batch), temperature=1.0, step=0)
    assert [name for name, p in named.items() if p.grad is not None and name not in adapter] == []
    assert any(named[name].grad is not None and named[name].grad.abs().sum() > 0 for name in adapter)
    assert all(torch.equal(before[name], p) for name, p in named.items() if name not in adapter)
