"""One step's batch from a short run's policy, and that policy's differentiable log-probs on it.

What :mod:`agl_lab.lab.gradient_shares` measures on: :func:`sample_step_batch` plays a step of the task with a
policy (a finished run's ``policy/`` folder through ``lab.model_path``, or the config's fresh one), aggregates the
rollouts and keeps the rows the trainer keeps (:func:`agl_lab.select_rows`); :func:`policy_log_probs` scores them as
the actor does, with gradients. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from omegaconf import DictConfig
from verl import DataProto

from agl_lab.core.aggregation import aggregate, aggregation_limits
from agl_lab.core.pipeline import select_rows
from agl_lab.core.turn_rewards import placement_for
from agl_lab.training.policy import Policy, build_policy, score
from agl_lab.training.rollout import collect_rollouts, sampling_params
from agl_lab.training.tasks import task_from_config

__all__ = ["policy_log_probs", "sample_step_batch"]


def sample_step_batch(cfg: DictConfig, *, step: int = 1, policy: Policy | None = None) -> tuple[DataProto, Policy]:
    """The kept rows of one step (``data.train_batch_size`` items × ``rollout.n`` rollouts) and the policy."""
    lab = cfg.lab
    task = task_from_config(cfg)
    policy = policy if policy is not None else build_policy(cfg, words=task.words())
    seed = int(np.random.SeedSequence([int(lab.seed), 7, step]).generate_state(1)[0])
    generator = torch.Generator(device=policy.device).manual_seed(seed)
    items = task.sample_items(step=step, batch_size=int(cfg.data.train_batch_size))
    rollouts, _ = collect_rollouts(
        policy, task, step=step, items=items, sampling=sampling_params(cfg), generator=generator
    )
    placement = placement_for(cfg)  # where lab.turn_cost's per-turn rewards go
    rows, _ = aggregate(rollouts, **aggregation_limits(cfg), pad_token_id=policy.pad_token_id,
                        turn_reward_placement=placement)  # fmt: skip
    batch, _ = select_rows(rows, cfg, seed=seed)
    return batch, policy


def policy_log_probs(policy: Policy, cfg: DictConfig) -> Callable[[DataProto], torch.Tensor]:
    """A function of kept rows → (rows, R) log-probs of their responses under ``policy``, with gradients."""
    temperature = float(cfg.actor_rollout_ref.rollout.temperature)

    def log_probs(batch: DataProto) -> torch.Tensor:
        data = batch.batch
        log_prob, _ = score(
            policy,
            input_ids=data["input_ids"].to(policy.device),
            attention_mask=data["attention_mask"].to(policy.device),
            position_ids=data["position_ids"].to(policy.device),
            response_length=data["responses"].shape[-1],
            temperature=temperature,
            with_entropy=False,
        )
        return log_prob.cpu()

    return log_probs
