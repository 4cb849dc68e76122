"""The two actor backends side by side: old log-probs and the PPO update, on one fixed batch, with ratios.

``lab.actor=lab`` (agl_lab's own loop of verl's parts, :mod:`agl_lab.training.actor`) and ``lab.actor=verl``
(verl 0.9.1's actor engine in this process, :mod:`agl_lab.training.verl_actor`; its update includes copying the
weights back into the lab's policy, as a run does) each start from the same policy and time, on the same batch
(step 1 of the default short run: 8 locks × 8 rollouts, its trained rows after trace aggregation and the cap):

* old log-probs with entropies (trainer step 3);
* one training step's update: every PPO mini-batch, optimizer and LR-schedule step (trainer step 5).

Both keep training on that batch rep after rep (timing only). Median wall clock and median process CPU time per
call after two warm-up reps, the backends interleaved so that a busy host slows both alike; ratio = verl / lab.
The default backend is the faster one: ``lab`` (LabConfig.actor). ``--sizes`` times larger policies in the same run.

Run: ``.venv/bin/python benchmarks/bench_actor.py [--reps 10] [--sizes 64x2 256x4] [key=value ...]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from verl.utils.config import omega_conf_to_dataclass

from agl_lab import compute_advantages, select_rows, short_run_config
from agl_lab.core.aggregation import aggregate, aggregation_limits
from agl_lab.core.pipeline import mini_batch_rows
from agl_lab.training.actor import LabActor, compute_log_probs
from agl_lab.training.policy import build_policy
from agl_lab.training.rollout import collect_rollouts, sampling_params
from agl_lab.training.tasks import make_task
from agl_lab.training.verl_actor import VerlActor

PHASES = ("old log-probs", "update")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=10, help="timed calls per phase and backend (after 2 warm-ups)")
    parser.add_argument("--sizes", nargs="*", default=None, help="policy sizes HIDDENxLAYERS (default: the run's)")
    parser.add_argument("dotlist", nargs="*", help="overrides, e.g. lab.device=cuda data.train_batch_size=16")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes] if args.sizes else [None]
    for size in sizes:
        dotlist = [*args.dotlist, "trainer.logger=[]"]
        if size is not None:
            dotlist += [f"lab.model_hidden={size[0]}", f"lab.model_layers={size[1]}"]
        bench(short_run_config(dotlist=dotlist), reps=args.reps)


def bench(cfg, *, reps: int) -> None:
    threads = int(cfg.lab.cpu_threads) or torch.get_num_threads()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        policy, batch = _policy_and_batch(cfg)
        actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        micro = int(
            cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu or actor.ppo_micro_batch_size_per_gpu
        )
        lab = LabActor(policy, actor, mini_batch_rows=mini_batch_rows(cfg), log_prob_micro=micro, total_steps=10**6)
        start = time.perf_counter()
        verl = VerlActor(cfg, copy.deepcopy(policy), total_steps=10**6)
        start_s = time.perf_counter() - start
        with verl:
            wall, cpu = _time(lab, verl, batch, reps=reps)
    finally:
        torch.set_num_threads(before)
    lab_cfg = cfg.lab
    tokens = int(batch.batch["attention_mask"].sum())
    print(
        f"\npolicy hidden {lab_cfg.model_hidden} x {lab_cfg.model_layers} layers on {policy.device}, {threads} torch "
        f"thread{'s' if threads > 1 else ''}; batch {len(batch)} rows, {tokens} tokens, mini-batches of "
        f"{mini_batch_rows(cfg)} rows; verl worker start {start_s:.2f} s; median of {reps} calls"
    )
    header = f"{'lab ms':>10}{'verl ms':>10}{'verl/lab':>10}   {'lab CPU ms':>11}{'verl CPU ms':>12}{'verl/lab':>10}"
    print(f"  {'':<15}{header}")
    for phase in (*PHASES, "step (both)"):
        keys = PHASES if phase == "step (both)" else (phase,)
        w = [sum(statistics.median(wall[b, k]) for k in keys) * 1e3 for b in ("lab", "verl")]
        c = [sum(statistics.median(cpu[b, k]) for k in keys) * 1e3 for b in ("lab", "verl")]
        print(f"  {phase:<15}{w[0]:10.1f}{w[1]:10.1f}{w[1] / w[0]:9.2f}x   {c[0]:11.1f}{c[1]:12.1f}{c[1] / c[0]:9.2f}x")


def _policy_and_batch(cfg):
    """The policy the run starts from and step 1's trained rows with their advantages (trainer steps 1-4)."""
    lab = cfg.lab
    task = make_task(
        lab.task, size=lab.task_size, max_turns=lab.max_turns, rewrite_prob=lab.rewrite_prob, seed=lab.seed
    )
    policy = build_policy(cfg, words=task.words())
    items = task.sample_items(step=1, batch_size=int(cfg.data.train_batch_size))
    generator = torch.Generator(device=policy.device).manual_seed(int(lab.seed))
    rollouts, _ = collect_rollouts(
        policy, task, step=1, items=items, sampling=sampling_params(cfg), generator=generator
    )
    rows, _ = aggregate(rollouts, **aggregation_limits(cfg), pad_token_id=policy.pad_token_id)
    batch, _ = select_rows(rows, cfg, seed=int(lab.seed))
    micro = int(cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)
    batch.batch["old_log_probs"], _ = compute_log_probs(
        policy, batch, micro_batch_size=micro, temperature=1.0, with_entropy=False
    )
    batch, _ = compute_advantages(batch, cfg)
    return policy, batch


def _time(lab: LabActor, verl: VerlActor, batch, *, reps: int):
    temperature = float(verl.config.rollout.temperature)
    sync = torch.cuda.synchronize if lab.policy.device.type == "cuda" else (lambda: None)
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    for rep in range(reps + 2):
        for name, backend in (("lab", lab), ("verl", verl)):
            calls = {
                "old log-probs": lambda b=backend: b.compute_log_probs(
                    batch, temperature=temperature, with_entropy=True
                ),
                "update": lambda b=backend: b.update(batch, temperature=temperature, step=1),
            }
            for phase, call in calls.items():
                sync()
                start, cpu_start = time.perf_counter(), time.process_time()
                call()
                sync()
                if rep >= 2:  # two warm-up reps
                    wall.setdefault((name, phase), []).append(time.perf_counter() - start)
                    cpu.setdefault((name, phase), []).append(time.process_time() - cpu_start)
    return wall, cpu


if __name__ == "__main__":
    main()
