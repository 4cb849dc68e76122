"""Batch math per training step: the lab's stages against one masked pass, Agent Lightning's loops beside them.

One realistic step of 10,000 rows (sessions of 1–12 rows, 8 rollouts per prompt, response width 512 with ragged
lengths, a 256-token prompt, bf16 scores as Agent Lightning's adapter writes them, some prompts whose rollouts all
got one reward, 1% of rows marked ``is_drop_mask``), once with a float32 and once with a bool ``response_mask``.
Timed side by side in one run, medians of round-robin repeats:

* the floor: one masked pass, ``torch.sum(advantages * response_mask)`` over the same (rows, 512);
* the lab's stages as the trainer runs them: row selection (marked rows out, mini-batch alignment, the same-reward
  and random drops, ``lab/partially_dropped_rollouts``), advantage (rewards, rollout-level advantage, group and
  verl's data metrics; ``compute_advantages(normalize=False)``), the per-step diagnostics (``lab/diagnostics/*``,
  ``lab/loss_scale``, ``lab/multi_row_*``) and the per_rollout_mean normalization;
* within the lab's stages, what no reimplementation of them avoids: one copy of every tensor of the rows (the least a
  row selection writes; the selection makes one), verl's data metrics (``agl_lab.core.data_metrics``: verl's
  ``compute_data_metrics`` with its two serial ``masked_select`` replaced by one shared gather, the same numbers;
  verl's function as Agent Lightning calls it is timed beside it) and verl's estimator on one row per rollout
  (``grpo_vectorized``, the same call on both sides);
* Agent Lightning 1.0.2's own ``_train_step`` steps 1–5 on a bare trainer (``tests/agl_oracle.py``), its Python loops
  over rows and groups included (it computes no diagnostics).

Prints each as ms and as a ratio to the masked pass, and the load average it ran at. Goal: the lab's stages
≤ 3× one pass. On a loaded machine the pass drifts most (8–46 ms here at loads 2–5); the lab's stages over Agent
Lightning's, measured in the same round-robin, drift least. Run: ``make bench`` (or ``.venv/bin/python
benchmarks/bench_batch_math.py [--rows N] [--repeats K] [--threads N]``).
"""

from __future__ import annotations

import agl_lab  # first: its process settings reach torch only before tensordict loads (agl_lab's docstring)

# isort: split

import argparse
import os
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab import compose_config
from agl_lab.core.data_metrics import data_metrics
from agl_lab.core.loss import normalize_for_loss
from agl_lab.core.pipeline import advantage_kwargs, compute_advantages, select_rows
from agl_lab.core.update_cap import partially_dropped
from agl_lab.lab.diagnostics import step_diagnostics
from agl_lab.lab.loss_scale import loss_scale_metrics, token_layout
from agl_lab.lab.rollout_mass import multi_row_mass
from agl_lab.training.process_state import huge_pages_advised

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from agl_oracle import agl_train_step  # noqa: E402  (the tests' driver of Agent Lightning's own trainer)

STAGES = ("select", "advantage", "diagnostics", "normalize")
LINES = {
    "pass": "one masked pass: sum(advantages * response_mask)",
    "lab": "lab stages, total",
    "select": "  row selection: marked rows, alignment, drops",
    "advantage": "  advantage: rewards, rollout level, group and data metrics",
    "diagnostics": "  diagnostics: lab/diagnostics, loss scale, multi-row mass",
    "normalize": "  per_rollout_mean normalization",
    "copy": "  within them: one copy of every tensor of the rows",
    "data_metrics": "  within them: verl's data metrics, tokens selected once",
    "verl_metrics": "  (beside them: verl's compute_data_metrics as it is)",
    "estimator": "  within them: verl's estimator on one row per rollout",
    "agl": "Agent Lightning 1.0.2 _train_step, steps 1-5 (no diagnostics)",
}


def make_step(rows: int, *, width: int, prompt: int, mask_dtype: torch.dtype, seed: int = 0) -> DataProto:
    """One step's rows in Agent Lightning's layout: rollouts of 1–12 rows, 8 per prompt, rewards on last tokens."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 13, rows)  # rows per rollout, more than needed
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), rows)) + 1]
    sizes[-1] -= sizes.sum() - rows
    n_rollouts = len(sizes)
    rollout_of_row = np.repeat(np.arange(n_rollouts), sizes)  # (rows,)
    prompt_of_rollout = np.arange(n_rollouts) // 8  # (rollouts,)
    n_prompts = int(prompt_of_rollout[-1]) + 1
    uniform = rng.random(n_prompts) < 0.3  # a prompt whose rollouts all got one reward: no GRPO signal
    reward = np.where(
        uniform[prompt_of_rollout], rng.integers(0, 2, n_prompts)[prompt_of_rollout], rng.integers(0, 2, n_rollouts)
    ).astype(np.float32)  # (rollouts,)
    lengths = torch.from_numpy(rng.integers(1, width + 1, rows))  # (rows,)
    mask = torch.arange(width)[None, :] < lengths[:, None]  # (rows, R)
    scores = torch.zeros(rows, width, dtype=torch.bfloat16)  # (rows, R)
    scores[torch.arange(rows), lengths - 1] = torch.from_numpy(reward[rollout_of_row]).to(torch.bfloat16)
    attention = torch.cat([torch.ones(rows, prompt, dtype=torch.long), mask.long()], dim=-1)  # (rows, P + R)
    tensors = {
        "prompts": torch.ones(rows, prompt, dtype=torch.long),
        "responses": torch.ones(rows, width, dtype=torch.long),
        "input_ids": torch.ones(rows, prompt + width, dtype=torch.long),
        "attention_mask": attention,
        "position_ids": torch.clamp(torch.cumsum(attention, dim=-1) - 1, min=0),
        "response_mask": mask.to(mask_dtype),
        "is_drop_mask": torch.from_numpy(rng.random(rows) < 0.01),
        "token_level_scores": scores,
    }
    non_tensors = {
        "rollout_id_list": np.array([f"rollout-{r}" for r in rollout_of_row], dtype=object),
        "data_id_list": np.array([f"prompt-{prompt_of_rollout[r]}" for r in rollout_of_row], dtype=object),
    }
    return DataProto(batch=TensorDict(tensors, batch_size=rows), non_tensor_batch=non_tensors)


def fresh(rows: DataProto) -> DataProto:
    """A new DataProto over the same tensors: no call sees the fields an earlier one wrote (Agent Lightning's trainer
    writes into the batch it gets)."""
    return DataProto(batch=rows.batch.copy(), non_tensor_batch=dict(rows.non_tensor_batch), meta_info={})


def lab_step(rows: DataProto, cfg) -> dict[str, float]:
    """The lab trainer's batch math on one step (agl_lab/training/trainer.py's order), seconds per stage."""
    clock = [time.perf_counter()]
    batch, metrics = select_rows(rows, cfg, seed=0)
    metrics.update(partially_dropped(rows, batch))
    clock.append(time.perf_counter())
    batch, adv_metrics = compute_advantages(batch, cfg, normalize=False)
    clock.append(time.perf_counter())
    layout = token_layout(batch, cfg)
    adv_metrics.update(step_diagnostics(batch, cfg, layout=layout))
    adv_metrics.update(loss_scale_metrics(batch, cfg, layout=layout))
    adv_metrics.update(multi_row_mass(batch, cfg, layout=layout))
    clock.append(time.perf_counter())
    normalize_for_loss(batch, cfg)
    clock.append(time.perf_counter())
    return {stage: clock[i + 1] - clock[i] for i, stage in enumerate(STAGES)}


def measure(rows: DataProto, cfg, repeats: int) -> dict[str, float]:
    """Median ms of each measurement, taken round-robin so that the machine's drifts hit every one alike."""
    mask = rows.batch["response_mask"]  # (rows, R)
    advantages = torch.randn(mask.shape)  # (rows, R)
    samples: dict[str, list[float]] = {name: [] for name in LINES}
    kept, _ = select_rows(fresh(rows), cfg, seed=0)
    with_advantages, _ = compute_advantages(fresh(kept), cfg, normalize=False)
    collapsed = kept[torch.from_numpy(np.unique(kept.non_tensor_batch["rollout_id_list"], return_index=True)[1])]
    collapsed.batch["token_level_rewards"] = collapsed.batch["token_level_scores"]
    kwargs = advantage_kwargs(cfg)

    def one_pass() -> None:
        start = time.perf_counter()
        torch.sum(advantages * mask)
        samples["pass"].append(time.perf_counter() - start)

    def lab() -> None:
        times = lab_step(fresh(rows), cfg)
        for stage, seconds in times.items():
            samples[stage].append(seconds)
        samples["lab"].append(sum(times.values()))

    def estimator() -> None:
        batch = fresh(collapsed)
        start = time.perf_counter()
        compute_advantage(batch, **kwargs)
        samples["estimator"].append(time.perf_counter() - start)

    def copy() -> None:
        start = time.perf_counter()
        rows.batch.clone()
        samples["copy"].append(time.perf_counter() - start)

    def lab_metrics() -> None:
        start = time.perf_counter()
        data_metrics(with_advantages)
        samples["data_metrics"].append(time.perf_counter() - start)

    def verl_metrics() -> None:
        start = time.perf_counter()
        compute_data_metrics(batch=with_advantages, use_critic=False)
        samples["verl_metrics"].append(time.perf_counter() - start)

    def agl() -> None:
        batch = fresh(rows)
        random.seed(0)
        start = time.perf_counter()
        seen = agl_train_step(cfg, batch)
        samples["agl"].append(time.perf_counter() - start)
        if seen.error is not None:
            raise seen.error

    runs = (one_pass, lab, copy, lab_metrics, verl_metrics, estimator, agl)
    for run in runs:  # warm-up
        run()
    for values in samples.values():
        values.clear()
    for _ in range(repeats):
        for run in runs:
            run()
    return {name: statistics.median(values) * 1e3 for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--width", type=int, default=512, help="response tokens per row (the mask's width)")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens per row")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # a seedless uid or a skipped step would warn; neither happens here
    cfg = compose_config(
        dotlist=[
            "algorithm.adv_estimator=grpo_vectorized",
            "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=64",
            "trainer.balance_batch=false",
        ]
    )
    print(
        f"agl_lab {agl_lab.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{args.rows} rows, response width {args.width}, prompt {args.prompt}; median of {args.repeats} round-robin; "
        f"huge pages {'advised' if huge_pages_advised() else 'not advised'}, OMP_WAIT_POLICY="
        f"{os.environ.get('OMP_WAIT_POLICY')} (agl_lab's defaults unless set: benchmarks/bench_process_env.py)"
    )
    for mask_dtype in (torch.float32, torch.bool):
        rows = make_step(args.rows, width=args.width, prompt=args.prompt, mask_dtype=mask_dtype)
        n_rollouts = len(np.unique(rows.non_tensor_batch["rollout_id_list"]))
        load_before = os.getloadavg()[0]
        ms = measure(rows, cfg, args.repeats)
        load = (load_before + os.getloadavg()[0]) / 2
        ratio = {name: value / ms["pass"] for name, value in ms.items()}
        dtype = str(mask_dtype).removeprefix("torch.")
        print(f"\nresponse_mask {dtype}: {n_rollouts} rollouts; load average {load:.2f}")
        for name, label in LINES.items():
            print(f"  {label:60s}{ms[name]:9.2f} ms {ratio[name]:7.2f}x")
        print(
            f"perf_batch_math[{dtype}]: lab stages {ratio['lab']:.2f}x, Agent Lightning {ratio['agl']:.2f}x one masked "
            f"pass (goal: lab <= 3x), lab / Agent Lightning {ms['lab'] / ms['agl']:.2f}, at a load of {load:.2f}"
        )


if __name__ == "__main__":
    main()
