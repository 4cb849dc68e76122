"""The lab trainer: short single-process training runs in Agent Lightning's step order, on verl's parts.

Each step (AGL_FACTS.md §Trainer step order):

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
frozen copy of the initial policy. It reads the real trainer's keys (``data.*``, ``actor_rollout_ref.*``,
``algorithm.*``, ``agentlightning.*``, ``trainer.*``) plus ``lab:``; :func:`agl_lab.short_run_config` sizes one for a
laptop. Notebook: ``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
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
from agl_lab.training.policy import build_policy
from agl_lab.training.preflight import check_trainable
from agl_lab.training.process_state import (
    deferred_signals,
    raise_if_stopping,
    signal_exit_code,
    stop_signals,
    stopped_by,
    torch_threads,
)
from agl_lab.training.rollout import collect_rollouts, sampling_params
from agl_lab.training.runs import TRAINED_NOTHING
from agl_lab.training.session import open_session
from agl_lab.training.tasks import make_task
from agl_lab.training.tracking import open_tracker, plain_metrics

__all__ = ["TrainResult", "train", "trained_any"]


class StopEvent(Protocol):
    def is_set(self) -> bool: ...


class ActorBackend(Protocol):  # LabActor (lab.actor=lab) and VerlActor (lab.actor=verl)
    def compute_log_probs(self, batch: Any, *, temperature: float, with_entropy: bool) -> tuple[Any, Any]: ...
    def update(self, batch: Any, *, temperature: float, step: int) -> dict[str, float]: ...
    def close(self) -> None: ...


@dataclass
class TrainResult:
    run_dir: Path
    history: pd.DataFrame  # one row per finished step: `step` + every metric (= metrics.jsonl)
    timings: pd.DataFrame  # one row per finished step: `step` + timing_s/* and perf/* (= timings.jsonl)
    stopped: bool  # True when the Stop event or a stop signal ended the run before trainer.total_training_steps
    wandb_run: str | None  # the W&B run's URL (online) or offline-run folder; None without the wandb backend
    config: DictConfig  # the config the run trained with (config.yaml holds it with secrets as ***)
    interrupted_by: str | None = None  # "SIGINT" (Ctrl-C), "SIGTERM" or "SIGHUP" when a signal stopped the run
    exit_code: int = 0  # what status.json and the trackers record: 0 trained, 6 every step skipped, 128 + N signal N


def train(
    cfg: DictConfig,
    *,
    stop_event: StopEvent | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    progress: bool = True,
    composed: bool = False,
) -> TrainResult:
    """Run ``trainer.total_training_steps`` steps; return the history. Files go to the run directory as it runs.

    ``stop_event`` (e.g. a ``threading.Event``) is checked before every step; setting it, Ctrl-C, SIGTERM or SIGHUP ends
    the run cleanly: finished steps are kept, the policy saved, the trackers closed, ``stopped=True``. ``on_step`` gets
    each step's metrics.jsonl record (``step`` + metrics) once the step is written. ``progress``: a tqdm bar.
    ``composed=True``: ``cfg`` is what composition returned, its keys and types already checked
    (:func:`~agl_lab.training.preflight.check_trainable`). Files and trackers: :mod:`agl_lab.training.session` (nothing
    half-made if the run fails before step 1).
    """
    steps, actor = check_trainable(cfg, composed=composed)
    with torch_threads(int(cfg.lab.cpu_threads)), stop_signals():
        return _train(cfg, steps=steps, actor=actor, stop_event=stop_event, on_step=on_step, progress=progress)


def _train(
    cfg: DictConfig,
    *,
    steps: int,
    actor: Any,
    stop_event: StopEvent | None,
    on_step: Callable[[dict[str, Any]], None] | None,
    progress: bool,
) -> TrainResult:
    run = _Run(cfg, actor=actor, total_steps=steps)  # builds the policy: a bad model path fails before any file
    with run.backend:  # closed last: the policy is saved first (the verl backend syncs it after every update)
        history: list[dict[str, Any]] = []
        timings: list[dict[str, Any]] = []
        stopped = finished = False
        interrupted_by = None
        session = bar = None
        try:
            session = open_session(cfg, tracker_factory=open_tracker)  # undoes itself when stopped half-way
            bar = tqdm(total=steps, desc=f"{cfg.trainer.experiment_name} s{cfg.lab.seed}", disable=not progress)
            for step in range(1, steps + 1):
                raise_if_stopping()  # a stop signal whose exception something swallowed (a finalizer) ends it here
                if stop_event is not None and stop_event.is_set():
                    stopped = True
                    break
                metrics, timing = run.step(step)
                with deferred_signals():  # a step is in metrics.jsonl, the trackers (W&B) and the history, or none
                    session.write(step, metrics, timing)
                    history.append({"step": step, **metrics})
                    timings.append({"step": step, **timing})
                bar.update()
                success, rows = metrics[keys.SUCCESS_RATE], metrics[keys.N_SAMPLE]
                bar.set_postfix(success=success, rows=rows, refresh=False)
                if on_step is not None:
                    on_step(history[-1])
            finished = not stopped
        except KeyboardInterrupt as exc:
            if session is None:  # stopped before the run had files: nothing to keep, the caller reports the stop
                raise
            stopped, interrupted_by = True, stopped_by(exc)
        finally:  # also on an error: what finished stays on disk, the policy is saved and the trackers are closed
            if bar is not None:
                bar.close()
            if session is not None:
                # a signal now waits until the files are whole (and is raised after them, if it is the first)
                with deferred_signals():
                    code = 0 if finished else signal_exit_code(interrupted_by) if interrupted_by else 1
                    code = TRAINED_NOTHING if finished and not trained_any(history) else code
                    close_errors = session.close(save_policy=run.policy.save, exit_code=code, stopped=stopped)
        if close_errors:  # only when the run itself raised nothing: that error would be the one to see
            raise close_errors[0]
        return TrainResult(
            run_dir=session.run_dir,
            history=pd.DataFrame(history),
            timings=pd.DataFrame(timings),
            stopped=stopped,
            wandb_run=session.tracker.wandb_run,
            config=cfg,
            interrupted_by=interrupted_by,
            exit_code=code,
        )


def trained_any(history: list[dict[str, Any]]) -> bool:
    """Whether any step of ``history`` (metrics.jsonl's records) trained rows: a step with no rows left after the
    drops is skipped, and a run whose every step was skipped trained nothing."""
    return any(record.get(keys.N_SAMPLE_TRAINED, 0) > 0 for record in history)


class _Run:
    """The state of one run (policy, actor backend, task, settings) and its training step."""

    def __init__(self, cfg: DictConfig, *, actor: Any, total_steps: int) -> None:
        lab = cfg.lab
        self.cfg, self.actor, self.seed = cfg, actor, int(lab.seed)
        self.task = make_task(
            lab.task,
            size=lab.task_size,
            max_turns=lab.max_turns,
            rewrite_prob=lab.rewrite_prob,
            seed=self.seed,
            turn_cost=lab.turn_cost,
        )
        self.policy = build_policy(cfg, words=self.task.words())
        needs_ref = actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
        self.ref_policy = _frozen_copy(self.policy) if needs_ref else None
        self.kl_ctrl = get_kl_controller(cfg.algorithm.kl_ctrl) if cfg.algorithm.use_kl_in_reward else None
        self.sampling = sampling_params(cfg)
        self.limits = {**aggregation_limits(cfg), "turn_reward_placement": placement_for(cfg)}  # lab.turn_cost
        self.mini_batch_rows = mini_batch_rows(cfg)
        self.log_prob_micro = int(
            cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu or actor.ppo_micro_batch_size_per_gpu
        )
        self.backend = _backend(cfg, self, total_steps=total_steps)

    def step(self, step: int) -> tuple[dict[str, Any], dict[str, float]]:
        """One training step; returns its metrics (deterministic) and its timings (wall clock)."""
        timing: dict[str, float] = {}
        with _timed(timing, "step"):
            metrics, tokens = self._step(step, timing)
        # the verl backend's memory and MFU figures vary from run to run: timings, never metrics.jsonl
        perf = {key: metrics.pop(key) for key in [k for k in metrics if k.startswith("perf/")]}
        return plain_metrics(metrics), {**_timing_metrics(timing, tokens=tokens), **plain_metrics(perf)}

    def _step(self, step: int, timing: dict[str, float]) -> tuple[dict[str, Any], int]:
        cfg, temperature = self.cfg, self.sampling.temperature
        with _timed(timing, "gen"):
            generator = torch.Generator(device=self.policy.device).manual_seed(self._seed(3, step))
            items = self.task.sample_items(step=step, batch_size=int(cfg.data.train_batch_size))
            rollouts, task_metrics = collect_rollouts(
                self.policy, self.task, step=step, items=items, sampling=self.sampling, generator=generator
            )
        with _timed(timing, "aggregate"):
            rows, adapter_metrics = aggregate(rollouts, **self.limits, pad_token_id=self.policy.pad_token_id)
        with _timed(timing, "drop"):
            selection = plan_selection(rows, cfg, seed=self._seed(4, step))
            batch = selection.batch  # with the rollouts it trains in part (lab.cap_drop_unit), counted once there
        metrics = {**task_metrics, **adapter_metrics, **selection.metrics, **selection.partial_metrics}
        if len(batch) == 0:  # plan_selection warned (EmptyBatchWarning): Agent Lightning skips the step
            return metrics, 0

        with _timed(timing, "old_log_prob"):
            old_log_probs, entropy = self.backend.compute_log_probs(batch, temperature=temperature, with_entropy=True)
            batch.batch["old_log_probs"] = old_log_probs  # (rows, R)
            entropy_agg = agg_loss(entropy, batch.batch["response_mask"].bool(), self.actor.loss_agg_mode)
            metrics[keys.ACTOR_ENTROPY] = entropy_agg.item()
        if self.ref_policy is not None:
            with _timed(timing, "ref"):
                batch.batch["ref_log_prob"], _ = compute_log_probs(
                    self.ref_policy, batch, micro_batch_size=self.log_prob_micro, temperature=temperature,
                    with_entropy=False,
                )  # fmt: skip
        with _timed(timing, "adv"):
            batch, adv_metrics = compute_advantages(batch, cfg, kl_ctrl=self.kl_ctrl, normalize=False)
            adv_metrics.update(step_diagnostics(batch, cfg, layout=(layout := token_layout(batch, cfg))))  # PR #7580's
            normalize_for_loss(batch, cfg)
            adv_metrics.update(loss_scale_metrics(batch, cfg, layout=layout))
            adv_metrics.update(multi_row_mass(batch, cfg, layout=layout))  # multi-row rollouts' share of the mass
        with _timed(timing, "update_actor"):
            actor_metrics = self.backend.update(batch, temperature=temperature, step=step)
        actor_metrics[keys.PPO_UPDATES] = mini_batches(len(batch), cfg) * int(self.actor.ppo_epochs)
        return {**metrics, **adv_metrics, **actor_metrics}, int(batch.batch["attention_mask"].sum())

    def _seed(self, stream: int, step: int) -> int:
        """A seed per (stream, step): each step's randomness is fixed by lab.seed alone, whatever came before."""
        return int(np.random.SeedSequence([self.seed, stream, step]).generate_state(1)[0])


def _backend(cfg: DictConfig, run: _Run, *, total_steps: int) -> ActorBackend:
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


def _frozen_copy(policy):
    ref = copy.copy(policy)
    ref.model = copy.deepcopy(policy.model).eval().requires_grad_(False)
    return ref


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
