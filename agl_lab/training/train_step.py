"""One training step of a short run, in Agent Lightning's step order, on verl's parts (:mod:`agl_lab.training.trainer`
runs the steps, keeps the files and takes the stops).

1. sample ``data.train_batch_size`` task items × ``rollout.n`` rollouts with the current policy
   (:mod:`agl_lab.training.rollout`), then trace aggregation into rows (:func:`agl_lab.core.aggregation.aggregate`,
   ``agentlightning.trace_aggregator.*``) — Agent Lightning's adapter metrics;
2. :func:`agl_lab.core.pipeline.plan_selection`: marked rows out, mini-batch alignment, ``max_ppo_update_times`` —
   the drop counters and ``lab/partially_dropped_rollouts``; a step with nothing left is skipped with a warning;
3. old log-probs (``actor/entropy``) and, for a KL term, reference log-probs of the initial policy;
4. :func:`agl_lab.compute_advantages`: rewards, rollout-level or verl advantage, ``per_rollout_mean``
   normalization — verl's data metrics, ``training/rollout_level_advantage/*`` and, on the advantages before the
   loss's normalization, the weighting diagnostics ``lab/diagnostics/*`` (:mod:`agl_lab.lab.diagnostics`);
5. the PPO update with the policy loss from verl's registry — ``actor/*``.

Steps 3 and 5 run on the backend ``lab.actor`` names: ``lab`` = agl_lab's own update loop (the default, faster at
lab sizes: :class:`agl_lab.training.actor.LabActor`), ``verl`` = verl's actor engine in this process, its weights
copied back after each update (:class:`agl_lab.training.verl_actor.VerlActor`). Reference log-probs come from a
frozen copy of the initial policy, or with a LoRA adapter the base model with the adapter disabled, as verl's
(:func:`_reference_policy`). Each step also returns its transcript (:mod:`agl_lab.training.transcripts`).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm
from verl.trainer.ppo.core_algos import agg_loss, get_kl_controller

from agl_lab.core import keys
from agl_lab.core.aggregation import aggregate, aggregation_limits
from agl_lab.core.loss import normalize_for_loss
from agl_lab.core.pipeline import compute_advantages, mini_batch_rows, plan_selection
from agl_lab.core.selection import mini_batches
from agl_lab.core.turn_rewards import placement_for
from agl_lab.lab.diagnostics import step_diagnostics
from agl_lab.lab.loss_scale import loss_scale_metrics, token_layout
from agl_lab.lab.rollout_mass import multi_row_mass
from agl_lab.training.actor import LabActor, compute_log_probs
from agl_lab.training.lora import has_adapter
from agl_lab.training.policy import StopEvent, build_policy
from agl_lab.training.rollout import collect_rollouts, sampling_params
from agl_lab.training.seeding import UPDATE_STREAM, derived_seed, seeded_torch
from agl_lab.training.tasks import task_from_config
from agl_lab.training.tracking import plain_metrics
from agl_lab.training.transcripts import step_transcript
from agl_lab.training.validation import VALIDATION_STREAM, val_sampling_params, validate

__all__ = ["ActorBackend", "ProgressHook", "RunState", "StepProgress"]


class ActorBackend(Protocol):  # LabActor (lab.actor=lab) and VerlActor (lab.actor=verl)
    def compute_log_probs(self, batch: Any, *, temperature: float, with_entropy: bool) -> tuple[Any, Any]: ...
    def update(self, batch: Any, *, temperature: float, step: int) -> dict[str, float]: ...
    def close(self) -> None: ...


class RunState:
    """The state of one run (policy, actor backend, task, settings) and its training step."""

    def __init__(self, cfg: DictConfig, *, actor: Any, total_steps: int) -> None:
        self.cfg, self.actor, self.seed = cfg, actor, int(cfg.lab.seed)
        self.task = task_from_config(cfg)
        self.policy = build_policy(cfg, words=self.task.words())
        needs_ref = actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
        self.ref_policy = _reference_policy(self.policy) if needs_ref else None
        self.kl_ctrl = get_kl_controller(cfg.algorithm.kl_ctrl) if cfg.algorithm.use_kl_in_reward else None
        self.sampling = sampling_params(cfg)
        self.val_sampling = val_sampling_params(cfg)  # verl's val_kwargs: greedy, one rollout per held-out item
        self.limits = {**aggregation_limits(cfg), "turn_reward_placement": placement_for(cfg)}  # lab.turn_cost
        self.mini_batch_rows = mini_batch_rows(cfg)
        self.log_prob_micro = int(
            cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu or actor.ppo_micro_batch_size_per_gpu
        )
        self.backend = _backend(cfg, self, total_steps=total_steps)

    def step(
        self,
        step: int,
        *,
        stop_event: StopEvent | None = None,
        progress: bool = False,
        on_progress: ProgressHook | None = None,
    ) -> tuple[dict[str, Any], dict[str, float], list[dict[str, Any]]]:
        """One training step; returns its metrics (deterministic), its timings (wall clock) and its transcript.
        ``stop_event`` set while the policy samples raises :class:`agl_lab.training.policy.GenerationStopped`;
        ``progress``: a bar of the step's rollouts, then its phases; ``on_progress(step, rollouts done, rollouts,
        phase)``: the same for a caller of its own (the training panel)."""
        timing: dict[str, float] = {}
        rollouts = int(self.cfg.data.train_batch_size) * self.sampling.n
        with StepProgress(step, rollouts, bar=progress, hook=on_progress) as bar:
            with _timed(timing, "step"):
                metrics, tokens, transcript = self._step(step, timing, stop_event=stop_event, bar=bar)
        # the verl backend's memory and MFU figures vary from run to run: timings, never metrics.jsonl
        perf = {key: metrics.pop(key) for key in [k for k in metrics if k.startswith("perf/")]}
        return plain_metrics(metrics), {**_timing_metrics(timing, tokens=tokens), **plain_metrics(perf)}, transcript

    def _step(self, step: int, timing: dict[str, float], *, stop_event: StopEvent | None, bar: Any):
        cfg, temperature = self.cfg, self.sampling.temperature
        with _timed(timing, "gen"):
            generator = torch.Generator(device=self.policy.device).manual_seed(self._seed(3, step))
            items = self.task.sample_items(step=step, batch_size=int(cfg.data.train_batch_size))
            dialogues: list[list[dict[str, str]]] = []
            rollouts, task_metrics = collect_rollouts(
                self.policy, self.task, step=step, items=items, sampling=self.sampling, generator=generator,
                stop_event=stop_event, on_done=bar.done, dialogues=dialogues,
            )  # fmt: skip
        with _timed(timing, "aggregate"):
            rows, adapter_metrics = aggregate(rollouts, **self.limits, pad_token_id=self.policy.pad_token_id)
        with _timed(timing, "drop"):
            selection = plan_selection(rows, cfg, seed=self._seed(4, step))
            batch = selection.batch  # with the rollouts it trains in part (lab.cap_drop_unit), counted once there
        metrics = {**task_metrics, **adapter_metrics, **selection.metrics, **selection.partial_metrics}
        if len(batch) == 0:  # plan_selection warned (EmptyBatchWarning): Agent Lightning skips the step
            return metrics, 0, step_transcript(rollouts, dialogues, rows, selection, None, level=self.limits["level"])

        bar.phase("old log-probs")
        with _timed(timing, "old_log_prob"):
            old_log_probs, entropy = self.backend.compute_log_probs(batch, temperature=temperature, with_entropy=True)
            batch.batch["old_log_probs"] = old_log_probs  # (rows, R)
            entropy_agg = agg_loss(entropy, batch.batch["response_mask"].bool(), self.actor.loss_agg_mode)
            metrics[keys.ACTOR_ENTROPY] = entropy_agg.item()
        if self.ref_policy is not None:
            with _timed(timing, "ref"), _adapter_off(self.ref_policy):
                batch.batch["ref_log_prob"], _ = compute_log_probs(
                    self.ref_policy, batch, micro_batch_size=self.log_prob_micro, temperature=temperature,
                    with_entropy=False,
                )  # fmt: skip
        with _timed(timing, "adv"):
            batch, adv_metrics = compute_advantages(batch, cfg, kl_ctrl=self.kl_ctrl, normalize=False)
            adv_metrics.update(step_diagnostics(batch, cfg, layout=(layout := token_layout(batch, cfg))))  # PR #7580's
            transcript = step_transcript(rollouts, dialogues, rows, selection, batch, level=self.limits["level"])
            normalize_for_loss(batch, cfg)
            adv_metrics.update(loss_scale_metrics(batch, cfg, layout=layout))
            adv_metrics.update(multi_row_mass(batch, cfg, layout=layout))  # multi-row rollouts' share of the mass
        bar.phase("update")
        # seeded: a model with dropout draws from torch's global generator (agl_lab.training.seeding)
        with _timed(timing, "update_actor"), seeded_torch(self._seed(UPDATE_STREAM, step), device=self.policy.device):
            actor_metrics = self.backend.update(batch, temperature=temperature, step=step)
        actor_metrics[keys.PPO_UPDATES] = mini_batches(len(batch), cfg) * int(self.actor.ppo_epochs)
        return {**metrics, **adv_metrics, **actor_metrics}, int(batch.batch["attention_mask"].sum()), transcript

    def validate(self, step: int, *, stop_event: StopEvent | None = None) -> tuple[dict[str, float], float]:
        """The held-out evaluation after ``step`` (0: before training): verl's ``val-core/...`` metrics and its wall
        time (``timing_s/testing``), from a stream of its own (:mod:`agl_lab.training.validation`)."""
        start = time.perf_counter()
        metrics = validate(
            self.policy, self.task, data_source=str(self.cfg.lab.task), sampling=self.val_sampling,
            seed=self._seed(VALIDATION_STREAM, step), stop_event=stop_event,
        )  # fmt: skip
        return metrics, time.perf_counter() - start

    def _seed(self, stream: int, step: int) -> int:
        """A seed per (stream, step): each step's randomness is fixed by lab.seed alone, whatever came before."""
        return derived_seed(self.seed, stream, step)


ProgressHook = Callable[[int, int, int, str], Any]  # (step, rollouts done, rollouts, phase)


class StepProgress:
    """A step's progress: its rollouts as they finish (phase ``sampling``), then ``old log-probs`` and ``update``;
    shown as a tqdm bar once the step takes longer than 2 s (a pretrained model's: fast steps print nothing extra),
    and handed to ``hook``."""

    def __init__(self, step: int, total: int, *, bar: bool, hook: ProgressHook | None) -> None:
        self.step, self.total, self.count, self.hook = step, total, 0, hook
        self.bar = tqdm(total=total, desc=f"step {step}: rollouts", leave=False, delay=2.0, disable=not bar)
        self._report("sampling")

    def done(self, n: int) -> None:
        self.count += n
        self.bar.update(n)
        self._report("sampling")

    def phase(self, name: str) -> None:
        self.bar.set_postfix_str(name)
        self._report(name)

    def _report(self, phase: str) -> None:
        if self.hook is not None:
            self.hook(self.step, self.count, self.total, phase)

    def __enter__(self) -> StepProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


def _backend(cfg: DictConfig, run: RunState, *, total_steps: int) -> ActorBackend:
    """The actor backend ``lab.actor`` names, on the run's policy (module docstring)."""
    if cfg.lab.actor == "verl":
        from agl_lab.training.verl_actor import VerlActor  # verl's engine workers load only when asked for

        return VerlActor(cfg, run.policy, total_steps=total_steps)
    return LabActor(
        run.policy,
        run.actor,
        mini_batch_rows=run.mini_batch_rows,
        log_prob_micro=run.log_prob_micro,
        total_steps=total_steps,
    )


def _reference_policy(policy):
    """The reference policy of a KL term, as verl's: with a LoRA adapter, the policy itself with the adapter disabled
    (:func:`_adapter_off`): the base model, also when the adapter was loaded from ``lora_adapter_path`` or a saved
    run. verl's trainer sets ``ref_in_actor`` when ``lora_rank > 0`` or ``lora_adapter_path`` is set ("the reference
    policy will be actor without lora applied", verl/trainer/ppo/ray_trainer.py) and its engine worker computes those
    log-probs under ``engine.disable_adapter()`` (verl/workers/engine_workers.py). Without an adapter, a frozen copy
    of the initial policy."""
    if has_adapter(policy.model):
        return policy
    ref = copy.copy(policy)
    ref.model = copy.deepcopy(policy.model).eval().requires_grad_(False)
    return ref


def _adapter_off(policy) -> contextlib.AbstractContextManager:
    return policy.model.disable_adapter() if has_adapter(policy.model) else contextlib.nullcontext()


@contextmanager
def _timed(timing: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timing[name] = time.perf_counter() - start


def _timing_metrics(timing: dict[str, float], *, tokens: int) -> dict[str, float]:
    """verl's ``timing_s/*`` and ``perf/*`` names; ``perf/throughput`` = tokens (prompt + response) per second."""
    step_time = timing.get("step", 0.0)
    return {
        **{f"timing_s/{name}": seconds for name, seconds in timing.items()},
        "perf/total_num_tokens": tokens,
        "perf/time_per_step": step_time,
        "perf/throughput": tokens / step_time if step_time > 0 else 0.0,
    }
