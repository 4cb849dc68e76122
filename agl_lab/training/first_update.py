"""Whether the policy can still sample after its first step: an lr that sends its probabilities to inf/NaN at once.

Adam (verl's default optimizer, AdamW) moves every weight by about ``lr`` at its first step, whatever the gradient's
size: the step is lr · m̂ / (√v̂ + eps), and m̂ / √v̂ is ±1 then. Weights start at a scale of 0.02-1, so with
``optim.lr=1e9`` they become ±1e9 after one update, the logits overflow, and the next sampling fails with "probability
tensor contains either inf, nan or element < 0" — after a step was written and a run directory made, as an unexpected
error. :func:`first_update_findings` makes the first step's updates before anything runs, as the run would: the run's
own policy (:func:`agl_lab.training.policy.build_policy`), the run's optimizer at the schedule's peak lr
(:func:`agl_lab.training.actor.build_optimizer_and_scheduler`), gradients clipped at ``optim.clip_grad`` and a
non-finite one skipped, as many updates as the step makes at least (``ppo_epochs`` × its mini-batches when every
rollout is one row; at most :data:`MAX_UPDATES`), each on the log-likelihood of the vocabulary's first ids (every
position's logits depend on its token: one prompt alone can miss the overflow); then it checks that the next-token
probabilities at the sampling temperature are finite at every position. An lr below :data:`PROBED_LR` is not probed:
such an update moves no weight by more than that. It is a probe of the first step, not a proof for the run: an lr
that diverges later (updates add up) shows as NaN metrics, kept as logged.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig

from agl_lab.config.checks import Finding
from agl_lab.core.keys import LR
from agl_lab.training.actor import build_optimizer_and_scheduler
from agl_lab.training.policy import build_policy
from agl_lab.training.tasks import task_from_config

__all__ = ["PROBED_LR", "first_update_findings"]

PROBED_LR = 0.1  # 50x the short run's 0.002; a first update below it moves no weight by more than 0.1
MAX_UPDATES = 8
PROBED_IDS = 64  # the vocabulary's first ids, one sequence


def first_update_findings(cfg: DictConfig, actor: Any) -> list[Finding]:
    """An error when the first step's updates at ``optim.lr`` leave the policy's next-token probabilities inf or NaN
    (module docstring); ``actor``: verl's actor config for ``cfg``."""
    lr = float(actor.optim.lr)
    if lr < PROBED_LR or _samples_after_the_first_step(cfg, actor):
        return []
    return [
        Finding(
            "error",
            LR,
            f"the first step's updates at lr={lr:g} send the policy's next-token probabilities to inf/NaN (Adam moves "
            "every weight by about lr at each step): sampling would fail at the next step ('probability tensor "
            "contains either inf, nan or element < 0')",
            f"lower {LR} (the short run's: 0.002; verl's default: 1e-6)",
        )
    ]


def _samples_after_the_first_step(cfg: DictConfig, actor: Any) -> bool:
    policy = build_policy(cfg, words=task_from_config(cfg, seed=0).words())
    optimizer, _ = build_optimizer_and_scheduler(policy, actor, total_steps=1)
    for group in optimizer.param_groups:  # the schedule's peak: a warmup only delays the same updates
        group["lr"] = actor.optim.lr
    ids = torch.arange(min(len(policy.tokenizer), PROBED_IDS), device=policy.device)[None]  # (1, T)
    mini_batches = max(1, int(cfg.data.train_batch_size) // int(actor.ppo_mini_batch_size))
    policy.model.train()
    for _ in range(min(MAX_UPDATES, int(actor.ppo_epochs) * mini_batches)):
        optimizer.zero_grad(set_to_none=True)
        logits = policy.model(input_ids=ids).logits.float()  # (1, T, V)
        log_likelihood = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])  # (1, T - 1, 1)
        (-log_likelihood.mean()).backward()
        norm = torch.nn.utils.clip_grad_norm_(policy.model.parameters(), max_norm=actor.optim.clip_grad)
        if torch.isfinite(norm):  # the lab's actor skips a step with a non-finite gradient, as verl does
            optimizer.step()
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits.float()  # (1, T, V)
        probs = (logits / float(cfg.actor_rollout_ref.rollout.temperature)).softmax(-1)  # (1, T, V)
    return bool(torch.isfinite(probs).all())
