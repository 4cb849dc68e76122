"""``lab.actor=verl``: verl 0.9.1's own actor engine (``ActorRolloutRefWorker``, role ``actor``, FSDP2) in this process.

The lab keeps sampling, trace aggregation, row selection, advantages and the reference policy; this backend replaces
only old log-probs and the PPO update (with its optimizer and LR schedule) by the worker verl's trainer drives over
Ray, called the way verl's trainer calls it (``_compute_old_log_prob``, ``_update_actor``):

* the lab's ``Policy`` goes to the worker as a Hugging Face folder (``save_pretrained`` of model and tokenizer in a
  temporary directory that ``actor_rollout_ref.model.path`` points to); verl loads it bit for bit;
* the process is a world of one: a default process group on an in-process ``HashStore`` (``gloo``; with
  ``nccl`` beside it on CUDA), so no port is opened; on the CPU verl sees the host through
  :func:`agl_lab.training.cpu_platform.cpu_platform`, on CUDA it finds its own ``nvidia`` platform;
* batches go in as ``DataProto`` rows → ``TensorDict`` → ``left_right_2_no_padding`` with the trainer's non-tensor
  keys; log-probs come back through ``no_padding_2_padding`` as (rows, R);
* the loss is ``ppo_loss`` with ``get_policy_loss_fn(policy_loss.loss_mode)`` from verl's registry;
* after each update the worker's weights are copied back into the lab's ``Policy`` (``get_per_tensor_param``, what
  verl uses to push weights to its rollout servers), so the lab samples with the new policy and saves it as usual.

What the worker gets on top of the run's ``actor_rollout_ref`` (:func:`verl_worker_config`): FSDP2 in fp32
(verl's default mixed precision is bf16: ~3e-2 off in log-probs), the lab model's own attention (verl asks for
flash-attn), the lab's padded row layout (``use_remove_padding=false``), no gradient checkpointing, no
``torch.compile``, the log-prob micro-batch defaulting to the update's, and ``optim.total_training_steps``.

Equal to ``lab.actor=lab`` (old log-probs and weights within 1e-5 over several updates, ``tests/test_verl_actor.py``)
when both see mini-batches in the same order: ``actor.shuffle=false``, the default (verl shuffles with its own
``DataLoader`` seed, the lab per step and epoch). fp32 and the same attention kernel are set here; AdamW magnifies
rounding in near-zero gradients, so differences grow slowly with steps (3.6e-6 after 20 on one CPU thread). The
update computes the entropy only with ``entropy_coeff != 0`` (``actor/entropy`` comes from the old log-probs).

Everything the worker changes in the process (environment, verl platform and registries, process group, CUDA device,
CPU affinity) is restored by :meth:`VerlActor.close`. One ``VerlActor`` at a time per process: a second, from another
thread, is refused with a ConfigError that says so.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from transformers.utils import logging as hf_logging
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from agl_lab.config.checks import verl_actor_problem
from agl_lab.config.compose import ConfigError
from agl_lab.core.keys import ACTOR_BACKEND, ACTOR_LR, LOG_PROB_MICRO, USE_KL_LOSS
from agl_lab.core.pipeline import mini_batch_rows
from agl_lab.training.policy import Policy
from agl_lab.training.world_of_one import worker_start, world_of_one

__all__ = ["VerlActor", "verl_worker_config"]

_ROW_FIELDS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")
_LOSS_FIELDS = ("old_log_probs", "advantages")
_OPTIONAL_LOSS_FIELDS = ("ref_log_prob", "rollout_is_weights")
_FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
_ONE_AT_A_TIME = threading.Lock()


class VerlActor:
    """verl's actor worker on ``policy``'s weights, in this process. Use as a context manager, or :meth:`close`.

    The same interface as :class:`agl_lab.training.actor.LabActor`: :meth:`compute_log_probs`, :meth:`update`.
    """

    def __init__(self, cfg: DictConfig, policy: Policy, *, total_steps: int, quiet: bool = True) -> None:
        from verl.workers.engine_workers import ActorRolloutRefWorker

        self.policy, self.mini_batch_rows = policy, mini_batch_rows(cfg)
        self._stack = contextlib.ExitStack()
        if not _ONE_AT_A_TIME.acquire(blocking=False):  # verl's worker and process group are process-global
            raise ConfigError(
                f"{ACTOR_BACKEND}=verl: another run on verl's actor engine is active in this process; "
                f"wait for it to end, "
                f"or train side by side with {ACTOR_BACKEND}=lab (or in separate processes, e.g. a Ray sweep)"
            )
        self._stack.callback(_ONE_AT_A_TIME.release)
        try:
            folder = Path(tempfile.mkdtemp(prefix=f"agl_lab_verl_actor_{os.getpid()}_"))  # whose, by its pid
            self._stack.callback(shutil.rmtree, folder, ignore_errors=True)
            policy.save(folder)
            self.config = verl_worker_config(
                cfg, model_path=folder, total_steps=total_steps, attn_implementation=_attention(policy)
            )
            self._check_micro_batches()
            problem = verl_actor_problem(lambda key: OmegaConf.select(cfg, key, default=None))
            if problem is not None:
                raise ConfigError(str(problem))
            self._stack.enter_context(world_of_one(policy.device))
            with worker_start(), _quiet(quiet):
                self.worker = ActorRolloutRefWorker(self.config, role="actor")
                self.worker.init_model()
            self._stack.callback(self._release)  # the engine goes before the process group it runs on
            # torch warns once per process, at FSDP2's first forward, about its own is_fx_tracing: nothing to act on
            self._stack.enter_context(_without_log("torch.fx._symbolic_trace", "is_fx_tracing will return true"))
        except BaseException:
            self._stack.close()
            raise

    @property
    def engine(self) -> Any:
        """verl's FSDP engine: ``.module`` (the FSDP2 model), ``.optimizer``, ``.lr_scheduler``."""
        return self.worker.actor.engine

    def compute_log_probs(
        self, batch: DataProto, *, temperature: float, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (rows, R) of every row's response, and entropies when asked, on the CPU."""
        td = _tensordict(batch, _ROW_FIELDS)
        tu.assign_non_tensor(td, temperature=float(temperature), calculate_entropy=with_entropy, compute_loss=False)
        output = self.worker.compute_log_prob(td)
        log_probs = no_padding_2_padding(tu.get(output, "log_probs"), td).float()  # (rows, R)
        entropy = no_padding_2_padding(tu.get(output, "entropy"), td).float() if with_entropy else None  # (rows, R)
        return log_probs, entropy

    def update(self, batch: DataProto, *, temperature: float, step: int) -> dict[str, float]:
        """One training step's PPO update (every epoch and mini-batch, one LR step); then the lab policy is synced.

        ``batch`` needs ``old_log_probs`` and ``advantages`` (``ref_log_prob`` with ``use_kl_loss``). Returns the
        ``actor/*`` metrics the lab backend returns (``actor/lr`` = the LR this update trained with) plus verl's
        ``perf/*`` memory and MFU figures. ``step`` is unused: verl seeds its mini-batch order by ``data_loader_seed``.
        """
        actor, n = self.config.actor, len(batch)
        if n == 0 or n % self.mini_batch_rows:  # verl's make_iterator asserts it (the doctor refuses what leads here)
            raise ValueError(
                f"verl's actor engine needs whole mini-batches of {self.mini_batch_rows} rows, got {n} rows"
            )
        fields = [*_ROW_FIELDS, *_LOSS_FIELDS, *(k for k in _OPTIONAL_LOSS_FIELDS if k in batch.batch.keys())]
        if actor.use_kl_loss and "ref_log_prob" not in fields:
            raise ValueError(f"{USE_KL_LOSS}=true needs ref_log_prob in the batch")
        td = _tensordict(batch, fields)
        tu.assign_non_tensor(
            td,
            temperature=float(temperature),
            # verl's trainer also computes it with actor.calculate_entropy; it only enters the loss with a coefficient
            calculate_entropy=bool(actor.entropy_coeff != 0),
            distillation_use_topk=False,
            distillation_only=False,
            global_batch_size=self.mini_batch_rows,
            mini_batch_size=self.mini_batch_rows,
            epochs=int(actor.ppo_epochs),
            seed=int(actor.data_loader_seed),
            dataloader_kwargs={"shuffle": bool(actor.shuffle)},
            compute_loss=True,
        )
        lr = self.engine.lr_scheduler.get_last_lr()[0]  # verl reports the LR after its step: the next update's
        output = self.worker.update_actor(td)
        metrics = _named_metrics(tu.get(output, "metrics"))
        metrics[ACTOR_LR] = lr
        self.sync_policy()
        return metrics

    @torch.no_grad()
    def sync_policy(self) -> None:
        """Copy the worker's weights into the lab's ``policy.model`` (full tensors under Hugging Face names)."""
        params, _ = self.engine.get_per_tensor_param()
        state = {name: tensor.detach() for name, tensor in params}
        missing, unexpected = self.policy.model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if self.policy.model.config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"verl's weights do not fit the lab's model: missing {missing}, unexpected {unexpected}")

    def close(self) -> None:
        """Free the worker; destroy the process group it made; restore verl's platform; delete the temporary folder."""
        self._stack.close()

    def __enter__(self) -> VerlActor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _release(self) -> None:
        self.worker = None
        gc.collect()  # FSDP modules hold reference cycles: free their (GPU) memory now, not at some later collection
        if self.policy.device.type == "cuda":
            torch.cuda.empty_cache()

    def _check_micro_batches(self) -> None:
        if self.config.actor.use_dynamic_bsz:
            return
        micro = int(self.config.rollout.log_prob_micro_batch_size_per_gpu)
        if self.mini_batch_rows % micro:
            key = LOG_PROB_MICRO
            raise ConfigError(
                f"{ACTOR_BACKEND}=verl: {key}={micro} must divide the PPO mini-batch of "
                f"{self.mini_batch_rows} rows (verl's "
                f"worker asserts the batch is whole micro-batches): set {key} to a divisor of it, or null"
            )


def verl_worker_config(
    cfg: DictConfig, *, model_path: str | Path, total_steps: int, attn_implementation: str
) -> DictConfig:
    """The ``actor_rollout_ref`` section the worker gets: the run's, with what one lab process needs (module doc)."""
    section = copy.deepcopy(cfg.actor_rollout_ref)
    with open_dict(section):
        model, actor, rollout = section.model, section.actor, section.rollout
        model.path = str(model_path)
        model.tokenizer_path = model.hf_config_path = None
        attention = {"attn_implementation": attn_implementation}  # a user's override_config wins
        model.override_config = OmegaConf.merge(attention, model.get("override_config") or {})
        model.enable_gradient_checkpointing = False
        model.use_remove_padding = False
        actor.strategy = "fsdp2"
        actor.use_torch_compile = False
        actor.fsdp_config.use_torch_compile = False
        actor.fsdp_config.mixed_precision = dict(_FP32)
        actor.fsdp_config.model_dtype = "fp32"
        actor.optim.total_training_steps = int(total_steps)
        if rollout.get("log_prob_micro_batch_size_per_gpu") is None:
            rollout.log_prob_micro_batch_size_per_gpu = actor.ppo_micro_batch_size_per_gpu
    # verl's sections interpolate into the whole tree (trainer.*, global_profiler.*): resolve them in place
    root = OmegaConf.create({**OmegaConf.to_container(cfg, resolve=False), "actor_rollout_ref": section})
    OmegaConf.resolve(root)
    return root.actor_rollout_ref


def _attention(policy: Policy) -> str:
    # the lab model's own (sdpa in transformers 5): the closest to the lab actor (3.6e-6 after 20 steps, eager 1.8e-5)
    return getattr(policy.model.config, "_attn_implementation", None) or "sdpa"


def _tensordict(batch: DataProto, fields: Any) -> TensorDict:
    data = batch.batch.select(*fields)
    return left_right_2_no_padding(TensorDict(dict(data.items()), batch_size=[len(batch)]))


def _named_metrics(raw: dict[str, Any]) -> dict[str, float]:
    """verl's worker metrics (a list per mini-batch) as the lab names them: means over mini-batches.

    ``loss`` (the total loss) is left out: the lab backend has no such metric. ``grad_norm``, ``pg_loss``, ... get
    the ``actor/`` prefix verl's trainer adds; memory and MFU go to ``perf/`` (timings, never ``metrics.jsonl``).
    """
    out = {}
    for key, value in raw.items():
        values = [float(v) for v in value] if isinstance(value, list | tuple) else [float(value)]
        name = key.removeprefix("actor/")
        if name == "loss" or not values:
            continue
        name = "perf/mfu/actor" if name == "mfu" else name if name.startswith("perf/") else f"actor/{name}"
        out[name] = sum(values) / len(values)
    return out


@contextlib.contextmanager
def _without_log(logger_name: str, text: str) -> Iterator[None]:
    def keep(record: logging.LogRecord) -> bool:
        return text not in record.getMessage()

    logger = logging.getLogger(logger_name)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@contextlib.contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    """verl's start-up prints (model size, memory, LR-schedule steps) and Hugging Face's weight-loading bar, muted."""
    if not enabled:
        yield
        return
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
