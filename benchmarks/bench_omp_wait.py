"""torch's OpenMP threads on a busy machine: the batch math with OpenMP's default wait policy against ``PASSIVE``.

torch's CPU ops run on an OpenMP team (libgomp). Between two parallel regions a team thread spins, by libgomp's default,
for a while before it sleeps. On an idle machine that saves a wake-up per op. On a busy one (a notebook beside a
training run) the spinning thread holds a core that the thread with the work needs. Then every small op waits for a
descheduled thread, and code made of many small ops (the diagnostics' row blocks) slows down many times over.
``OMP_WAIT_POLICY=PASSIVE`` makes waiting threads sleep at once. ``import agl_lab`` sets it when the environment does
not, which only works before torch is first imported (:mod:`agl_lab`'s docstring).

Each measurement is a fresh process (libgomp reads the variable when it loads), run round-robin with the policies:
one step's batch math (``bench_batch_math.lab_step``: selection, advantage, diagnostics, normalization) and the masked
pass, at torch's default thread count (2 on 2 cores; the trainer itself runs on ``lab.cpu_threads=1``, where no team
waits). Runs with ``--load 0`` and with ``--load N`` busy processes beside it, and a shorter spin
(``GOMP_SPINCOUNT=10000``) for comparison. It prints the median ms per policy and the ratio default / PASSIVE, with
the load each ran at.
Run: ``.venv/bin/python benchmarks/bench_omp_wait.py [--load 2] [--rounds 3] [--rows 10000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from busy_load import busy_processes, load_now

HERE = Path(__file__).resolve().parent
# libgomp's default (spin, then sleep); PASSIVE (what ``import agl_lab`` sets); a shorter spin, for comparison
POLICIES = {"default": {}, "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"}, "short spin": {"GOMP_SPINCOUNT": "10000"}}
CHILD = """
import json, statistics, sys, time, warnings
sys.path.insert(0, {here!r})
warnings.simplefilter("ignore")
import torch
from bench_batch_math import compose_config, fresh, lab_step, make_step
cfg = compose_config(dotlist=["algorithm.adv_estimator=grpo_vectorized", "actor_rollout_ref.rollout.n=8",
                              "actor_rollout_ref.actor.ppo_mini_batch_size=64", "trainer.balance_batch=false"])
rows = make_step({rows}, width=512, prompt=256, mask_dtype=torch.float32)
mask = rows.batch["response_mask"]
advantages = torch.randn(mask.shape)
lab_step(fresh(rows), cfg)
steps, passes = [], []
for _ in range({repeats}):
    start = time.perf_counter(); torch.sum(advantages * mask); passes.append(time.perf_counter() - start)
    steps.append(sum(lab_step(fresh(rows), cfg).values()))
print(json.dumps({{"step": statistics.median(steps) * 1e3, "pass": statistics.median(passes) * 1e3,
                  "threads": torch.get_num_threads()}}))
"""


def measure(policy: dict[str, str], *, rows: int, repeats: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")} | policy
    code = CHILD.format(here=str(HERE), rows=rows, repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", type=int, default=2, help="busy processes beside the second half of the runs")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per policy and load")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5, help="steps timed in each process")
    args = parser.parse_args()
    for load in sorted({0, args.load}):
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in POLICIES}
        with busy_processes(load):
            loads = [load_now()]
            for _ in range(args.rounds):
                for name, policy in POLICIES.items():
                    samples[name].append(measure(policy, rows=args.rows, repeats=args.repeats))
            loads.append(load_now())
        ms = {name: statistics.median(s["step"] for s in runs) for name, runs in samples.items()}
        passes = {name: statistics.median(s["pass"] for s in runs) for name, runs in samples.items()}
        threads = samples["default"][0]["threads"]
        print(f"\n--load {load} (load average {min(loads):.1f}-{max(loads):.1f}), {threads} torch threads, "
              f"{args.rows} rows, median of {args.rounds} processes x {args.repeats} steps")  # fmt: skip
        for name in POLICIES:
            shown = " ".join(f"{k}={v}" for k, v in POLICIES[name].items()) or "libgomp's default"
            print(f"  {shown:30s} batch math {ms[name]:8.1f} ms   masked pass {passes[name]:6.2f} ms")
        print(f"omp_wait[load {load}]: default / PASSIVE = {ms['default'] / ms['PASSIVE']:.2f}x for the batch math")


if __name__ == "__main__":
    main()
