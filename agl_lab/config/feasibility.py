"""Before a short run starts: a rough count of the memory and the time one step needs, against this machine.

Sizes that pass every range check can still be infeasible here: ``actor_rollout_ref.rollout.n=1000000`` samples 8
million episodes at once (the first step never ends, or the kernel kills the process), and a policy of
``lab.model_hidden=8192`` × 64 layers needs a terabyte for its weights and optimizer state. :func:`estimate_step`
counts, from the config alone, what the lab trainer (:mod:`agl_lab.training.trainer`) holds at its peak and the
floating-point work of one step; :func:`feasibility_findings` turns that into doctor findings: an **error** when the
peak exceeds the device's memory (the machine's RAM on the CPU, the GPU's memory on CUDA) or when one step would take
longer than :data:`MAX_STEP_S` (``ppo_epochs=100000``: the run cannot finish, and would sit in step 1 without a word), a
**warning** when it would take longer than :data:`SLOW_STEP_S` at :data:`CPU_FLOPS` / :data:`GPU_FLOPS`. Each names the
keys to lower, the largest part of the work first. And ``lab.cpu_threads`` beyond the cores this process may use is an
error: torch would start that many threads on too few cores (every step slower, and under a memory limit the OpenMP
runtime dies), and a sweep on Ray would wait forever for a node with that many CPUs. The counts are upper bounds of the
usual kind (fp32 everywhere, every rollout making ``lab.max_turns`` rows padded to the aggregator's limits), not
measurements: the default short run counts ~0.1 s per step and takes ~0.1-0.2 s; the pretrained preset's
(``lab.model=smollm2-135m-instruct``) counts ~2-4 min; what a step takes is measured in docs/real-model.md
(section Speed).

What is counted (P = the policy's parameters, S = ``train_batch_size × rollout.n`` episodes sampled together,
C = the longest row, R = S × ``lab.max_turns`` rows at the transition level and S at the trajectory level (a
conversation's tokens in its rows once), M = the micro-batch's rows, V = the vocabulary):

* memory: weights, gradients and AdamW's two moments (16 bytes per trained parameter, 4 per frozen one: a LoRA
  adapter's base; +4 for a frozen reference policy),
  plus the larger of sampling (the KV cache, 2 × layers × S × C × hidden floats, and the first call's logits
  S × C × V) and the update (M × C × (20 × hidden × layers + 3 × V) floats of activations), plus the rows;
* work: sampling 2·P·S·C, old (and reference) log-probs 2·P·R·C, the update 6·P·R·C per PPO epoch (4·P·R·C with a
  LoRA adapter: no weight gradients of the frozen base).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from omegaconf import DictConfig

from agl_lab.config.checks import Finding
from agl_lab.config.model_shape import model_shape
from agl_lab.config.model_source import model_source
from agl_lab.core.aggregation import aggregation_limits
from agl_lab.core.keys import (
    CPU_THREADS,
    LORA_RANK,
    MODEL,
    MODEL_HIDDEN,
    MODEL_LAYERS,
    PPO_EPOCHS,
    ROLLOUT_N,
    TRAIN_BATCH,
)

__all__ = ["CPU_FLOPS", "GPU_FLOPS", "MAX_STEP_S", "SLOW_STEP_S", "StepEstimate", "available_cores", "estimate_step"]
__all__ += ["feasibility_findings"]

# fp32 FLOP/s assumed per CPU thread: a laptop core with AVX2 reaches ~1-5e10; SmolLM2-135M's forward and backward ran
# at ~3e10 per thread on 2 shared AMD EPYC cores (benchmarks/bench_real_model.py), the tiny policy's small ops at less
CPU_FLOPS = 3e10
GPU_FLOPS = 5e13  # fp32/tf32 FLOP/s assumed for one CUDA GPU
SLOW_STEP_S = 60.0  # a step counted slower than this is warned about
MAX_STEP_S = 3600.0  # a step counted slower than this is refused: a short run of such steps cannot finish


@dataclass(frozen=True)
class StepEstimate:
    parameters: int  # the policy's
    memory_bytes: float  # at the step's peak
    flops: float  # one step's floating-point work
    update_share: float  # the PPO update's share of it (ppo_epochs multiplies it)
    seconds: float  # flops at the assumed rate
    device_memory_bytes: float  # what the device has
    device: str  # "cpu" or "cuda"

    def summary(self) -> str:
        return (
            f"~{_bytes(self.memory_bytes)} of {_bytes(self.device_memory_bytes)} ({self.device}) and "
            f"~{self.seconds:.3g} s per step ({self.flops:.2g} FLOP; a {self.parameters:,}-parameter policy)"
        )


def estimate_step(cfg: DictConfig) -> StepEstimate:
    """Count one step of a short run of ``cfg`` on this machine (module docstring)."""
    layers, hidden, intermediate, vocab, tied = _model_shape(cfg)
    params = layers * (4 * hidden * hidden + 3 * hidden * intermediate) + vocab * hidden * (1 if tied else 2)
    episodes = int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    limits = aggregation_limits(cfg)
    context = int(limits["max_prompt_length"]) + int(limits["max_response_length"])
    # the transition level makes a row of every call, each with the whole conversation so far as its prompt; the
    # trajectory level holds a conversation's tokens in its rows once (a rewrite starts a shorter row)
    trajectory = str(limits["level"]).startswith("trajectory")
    rows = episodes * (1 if trajectory else int(cfg.lab.max_turns))
    actor = cfg.actor_rollout_ref.actor
    micro = int(actor.ppo_micro_batch_size_per_gpu or actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n)
    reference = bool(actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)
    floats = 4
    # a LoRA adapter (verl's lora_rank) on every linear layer: only it has gradients and AdamW's moments, and the
    # update computes no weight gradients of the frozen base (about 4 P instead of 6 P per token)
    rank = int(cfg.actor_rollout_ref.model.get("lora_rank", 0) or 0)
    adapter = rank * layers * (8 * hidden + 3 * (hidden + intermediate))
    trained = adapter if rank > 0 else params
    state = params * (4 + (4 if reference else 0)) + trained * 12
    sampling = (2 * layers * episodes * context * hidden + episodes * context * vocab) * floats
    update = micro * context * (20 * hidden * layers + 3 * vocab) * floats
    row_tensors = rows * context * 8 * 8  # ~8 int64/float tensors per row
    epochs = int(actor.ppo_epochs)
    update_flops = (4 if rank > 0 else 6) * epochs * params * rows * context
    flops = 2 * params * episodes * context + (2 + 2 * reference) * params * rows * context + update_flops
    device, total = _device(cfg)
    threads = min(int(cfg.lab.cpu_threads) or available_cores(), available_cores())  # more threads add no cores
    rate = GPU_FLOPS if device == "cuda" else CPU_FLOPS * threads
    return StepEstimate(
        parameters=params,
        memory_bytes=float(state + max(sampling, update) + row_tensors),
        flops=float(flops),
        update_share=update_flops / flops,
        seconds=flops / rate,
        device_memory_bytes=float(total),
        device=device,
    )


def feasibility_findings(cfg: DictConfig) -> list[Finding]:
    """An error when a step cannot fit in the device's memory or cannot finish, or when ``lab.cpu_threads`` exceeds
    the cores; a warning when a step would be slow; else nothing."""
    threads, cores = int(cfg.lab.cpu_threads), available_cores()
    if threads > cores:
        return [
            Finding(
                "error",
                CPU_THREADS,
                f"{threads} threads, but this process may use {cores} CPU core(s): torch would start {threads} threads "
                "that take turns on them (every step slower; under a memory limit the OpenMP runtime dies), and a "
                f"sweep on Ray would wait for a node with {threads} CPUs",
                f"set {CPU_THREADS} to at most {cores} (0: torch's own choice)",
            )
        ]
    estimate = estimate_step(cfg)
    lower = f"lower {ROLLOUT_N}, {TRAIN_BATCH}, the length limits or the model ({MODEL}; the tiny one's "
    lower += f"{MODEL_HIDDEN}, {MODEL_LAYERS}; a LoRA adapter: {LORA_RANK} > 0)"
    if estimate.memory_bytes > estimate.device_memory_bytes:
        return [Finding("error", "config", f"a step would need {estimate.summary()}: it cannot fit in memory", lower)]
    if estimate.update_share > 0.5 and int(cfg.actor_rollout_ref.actor.ppo_epochs) > 1:
        lower = f"lower {PPO_EPOCHS} ({estimate.update_share:.0%} of the work; verl's default: 1)"
    if estimate.seconds > MAX_STEP_S:
        return [
            Finding(
                "error",
                "config",
                f"a step would take {estimate.summary()}, by a rough count: more than {MAX_STEP_S:.0f} s a step, a "
                "short run of such steps cannot finish",
                lower,
            )
        ]
    if estimate.seconds > SLOW_STEP_S:
        return [Finding("warning", "config", f"a step would take {estimate.summary()}, by a rough count", lower)]
    return []


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity: a container's or ``taskset``'s limit, not the host's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this OS
        return os.cpu_count() or 1


def _model_shape(cfg: DictConfig) -> tuple[int, int, int, int, bool]:
    """layers, hidden, intermediate, vocabulary, tied embeddings: of the model the run loads (a folder's config.json, a
    GGUF file's header: :func:`agl_lab.config.model_shape.model_shape`), else the tiny default policy's (its
    vocabulary is the task's few words)."""
    try:
        shape = model_shape(model_source(cfg))
    except (OSError, ValueError):
        shape = None  # loading the model will say what is wrong with it
    if shape is not None:
        return shape["layers"], shape["hidden"], shape["intermediate"], shape["vocab"], shape["tied"]
    hidden = int(cfg.lab.model_hidden)
    return int(cfg.lab.model_layers), hidden, 4 * hidden, int(cfg.lab.task_size) + 32, True


def _device(cfg: DictConfig) -> tuple[str, float]:
    """The device the run will use and its memory in bytes (the machine's RAM for the CPU)."""
    name = str(cfg.lab.device)
    if name.startswith("cuda") or name == "auto":
        import torch

        if torch.cuda.is_available():
            index = int(name.split(":")[1]) if ":" in name else 0
            return "cuda", float(torch.cuda.get_device_properties(index).total_memory)
    return "cpu", float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"
