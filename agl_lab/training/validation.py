"""Held-out evaluation as verl reports it: greedy rollouts on a fixed item set, logged as ``val-core/...``.

verl's trainer validates before training (``trainer.val_before_train``, logged at step 0), every
``trainer.test_freq`` steps and at the last step (``test_freq`` -1, its default: never), each time after that step's
update, sampling with ``actor_rollout_ref.rollout.val_kwargs`` (greedy, one response per prompt) and naming the
metrics with ``process_validation_metrics`` (``verl/trainer/ppo/metric_utils.py``) sectioned as
``RayPPOTrainer._val_metrics_update`` does (``verl/trainer/ppo/ray_trainer.py``). The lab does the same on its task:

========================================  ==========================================================================
when                                      :func:`validation_steps`: 0 (``val_before_train``), every ``test_freq``,
                                          the last step; none when ``test_freq`` <= 0 (the lab's one difference:
                                          verl also validates once at step 0 then, given a validation set)
which items                               the task's :meth:`~agl_lab.training.tasks.Task.heldout_items`
                                          (``lab.heldout_size``, fixed by ``lab.seed``; disjoint from training's when
                                          the task is large enough: ``lab/val_items_held_out``)
how                                       ``val_kwargs.n`` episodes per item through the training rollouts' own code
                                          (:func:`~agl_lab.training.rollout.collect_rollouts`), the policy in eval
                                          mode without gradients; ``do_sample: false`` is greedy (verl's rule for it:
                                          temperature 0, top_k -1, top_p 1), else ``val_kwargs``' temperature, top_k,
                                          top_p; nothing trained, nothing dropped
randomness                                its own stream (:data:`VALIDATION_STREAM`, per step) and the environment of
                                          step 0, which no training step plays (steps count from 1): evaluating never
                                          moves a training draw, and every evaluation meets the same environment
names                                     ``val-core/<lab.task>/reward/mean@<n>`` (the share of items solved, a
                                          rollout's reward being its success), ``val-aux/...`` for the rest verl
                                          sections there, ``val-aux/num_turns/{min,max,mean}`` (messages per episode,
                                          user and assistant, as verl's agent loop counts them: one call = 2)
========================================  ==========================================================================

The trainer (:mod:`agl_lab.training.trainer`) writes each evaluation to ``validation.jsonl`` (step 0 included) and
merges those of steps >= 1 into that step's ``metrics.jsonl`` record, as verl merges them into the step's metrics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.metric_utils import process_validation_metrics

from agl_lab.core.keys import (
    HELDOUT_SIZE,
    TEST_FREQ,
    VAL_AUX,
    VAL_BEFORE_TRAIN,
    VAL_CORE,
    VAL_ITEMS_HELD_OUT,
    VAL_KWARGS,
)
from agl_lab.training.policy import Policy, StopEvent
from agl_lab.training.rollout import SamplingParams, collect_rollouts
from agl_lab.training.tasks import Task

__all__ = ["VALIDATION_STREAM", "val_metrics", "val_sampling_params", "validate", "validation_steps"]

VALIDATION_STREAM = 8  # agl_lab.training.seeding's streams: 3 sampler, 4 drops, 5 update, 6 LoRA init, 7 step batches


def validation_steps(cfg: DictConfig, *, total_steps: int) -> list[int]:
    """The steps after which a run evaluates (0 = before training): verl's schedule (module docstring)."""
    test_freq = int(OmegaConf.select(cfg, TEST_FREQ, default=-1) or -1)
    if test_freq <= 0:
        return []
    first = [0] if bool(OmegaConf.select(cfg, VAL_BEFORE_TRAIN, default=True)) else []
    return first + [s for s in range(1, total_steps + 1) if s % test_freq == 0 or s == total_steps]


def val_sampling_params(cfg: DictConfig) -> SamplingParams:
    """``actor_rollout_ref.rollout.val_kwargs`` as the sampler takes them (module docstring)."""
    rollout = cfg.actor_rollout_ref.rollout
    val = OmegaConf.select(cfg, VAL_KWARGS)
    greedy = not bool(val.get("do_sample", False))
    return SamplingParams(
        n=int(val.get("n", 1)),
        max_new_tokens=int(rollout.response_length),
        temperature=0.0 if greedy else float(val.temperature),
        top_k=-1 if greedy else int(val.top_k),
        top_p=1.0 if greedy else float(val.top_p),
    )


def validate(
    policy: Policy,
    task: Task,
    *,
    data_source: str,
    sampling: SamplingParams,
    seed: int,
    stop_event: StopEvent | None = None,
) -> dict[str, float]:
    """One evaluation of ``policy`` on ``task``'s held-out items: verl's validation metrics (module docstring).
    ``seed``: the generator's seed (only drawn from when ``val_kwargs`` sample); ``data_source``: the task's name."""
    heldout = task.heldout_items()
    if not heldout.items:
        raise ValueError(f"task {data_source!r} has no held-out items: set {HELDOUT_SIZE} >= 1")
    generator = torch.Generator(device=policy.device).manual_seed(int(seed))
    was_training = policy.model.training
    policy.model.eval()
    try:
        with torch.no_grad():
            rollouts, _ = collect_rollouts(
                policy, task, step=0, items=list(heldout.items), sampling=sampling, generator=generator,
                stop_event=stop_event,
            )  # fmt: skip
    finally:
        policy.model.train(was_training)
    uids = [f"{data_source}/{item}" for item in np.repeat(heldout.items, sampling.n)]  # one uid per item, as verl's
    metrics = val_metrics(
        [data_source] * len(rollouts),
        uids,
        {"reward": [float(r.reward) for r in rollouts]},
        turns=[2 * len(r.calls) for r in rollouts],
    )
    metrics[VAL_ITEMS_HELD_OUT] = float(heldout.disjoint)
    return metrics


def val_metrics(
    data_sources: list[str], uids: list[str], infos: dict[str, list[Any]], *, turns: list[int] | None = None
) -> dict[str, float]:
    """verl's validation metric names and values for per-sample ``infos`` (``reward`` and any extra): verl's own
    ``process_validation_metrics``, then ``RayPPOTrainer._val_metrics_update``'s sections: ``val-core`` for the core
    variable (``acc`` when logged, else ``reward``)'s mean/maj/best at the largest n, ``val-aux`` for the rest."""
    by_source = process_validation_metrics(data_sources, uids, infos)
    metrics: dict[str, float] = {}
    for data_source, var2metric2val in by_source.items():
        core_var = "acc" if "acc" in var2metric2val else "reward"
        for var_name, metric2val in var2metric2val.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric2val)
            for metric_name, value in metric2val.items():
                core = (
                    var_name == core_var
                    and any(metric_name.startswith(prefix) for prefix in ("mean", "maj", "best"))
                    and f"@{n_max}" in metric_name
                )
                metrics[f"{VAL_CORE if core else VAL_AUX}/{data_source}/{var_name}/{metric_name}"] = float(value)
    if turns:
        stats = {"min": np.min, "max": np.max, "mean": np.mean}
        metrics.update({f"{VAL_AUX}/num_turns/{stat}": float(fn(turns)) for stat, fn in stats.items()})
    return metrics
