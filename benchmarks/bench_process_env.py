"""The two process settings ``import agl_lab`` makes, each against torch's default, on one step's batch math.

1. ``OMP_WAIT_POLICY=PASSIVE``. torch's CPU ops run on an OpenMP team (libgomp). Between two parallel regions a team
   thread spins, by libgomp's default, for a while before it sleeps. On an idle machine that saves a wake-up per op.
   On a busy one (a notebook beside a training run) the spinning thread holds a core that the thread with the work
   needs. Then every small op waits for a descheduled thread, and code made of many small ops (the diagnostics' row
   blocks) slows down many times over. ``PASSIVE`` makes waiting threads sleep at once. A shorter spin
   (``GOMP_SPINCOUNT=10000``) is shown for comparison.
2. ``THP_MEM_ALLOC_ENABLE=1``. torch then advises the kernel to back every CPU tensor of 2 MiB or more with
   transparent huge pages. A step writes a few hundred MB of fresh tensors (the kept rows' copy, advantages, returns);
   with 4 KiB pages, faulting them in is most of that time.

Both only work before torch reads them (:mod:`agl_lab`'s docstring), so each measurement is a fresh process, run
round-robin with the settings: one step's batch math (``bench_batch_math.lab_step``: selection, advantage,
diagnostics, normalization), Agent Lightning 1.0.2's ``_train_step`` steps 1–5 on the same rows, and the masked pass,
at torch's default thread count (2 on 2 cores; the trainer itself runs on ``lab.cpu_threads=1``, where no team
waits), with ``--load 0`` and with ``--load N`` busy processes beside it. It prints the median ms per setting, the
process's peak resident memory, and the ratios, with the load each ran at.
Run: ``.venv/bin/python benchmarks/bench_process_env.py [--load 2] [--rounds 3] [--rows 10000]``.
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
_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "THP_MEM_ALLOC_ENABLE")
# torch's defaults; each of agl_lab's two settings alone; both (what ``import agl_lab`` sets); a shorter spin
SETTINGS = {
    "torch's defaults": {"THP_MEM_ALLOC_ENABLE": "0"},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "0"},
    "THP_MEM_ALLOC_ENABLE=1": {"THP_MEM_ALLOC_ENABLE": "1"},
    "both (agl_lab's)": {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1"},
    "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000", "THP_MEM_ALLOC_ENABLE": "0"},
}
# torch loads first, with the setting's environment as given: agl_lab's own defaults come after torch has read them
CHILD = """
import json, random, resource, statistics, sys, time, warnings
sys.path.insert(0, {here!r})
sys.path.insert(0, {tests!r})
warnings.simplefilter("ignore")
import torch
from agl_oracle import agl_train_step
from bench_batch_math import compose_config, fresh, lab_step, make_step
cfg = compose_config(dotlist=["algorithm.adv_estimator=grpo_vectorized", "actor_rollout_ref.rollout.n=8",
                              "actor_rollout_ref.actor.ppo_mini_batch_size=64", "trainer.balance_batch=false"])
rows = make_step({rows}, width=512, prompt=256, mask_dtype=torch.float32)
mask = rows.batch["response_mask"]
advantages = torch.randn(mask.shape)

def agl():
    random.seed(0)
    batch = fresh(rows)
    start = time.perf_counter()
    seen = agl_train_step(cfg, batch)
    if seen.error is not None:
        raise seen.error
    return time.perf_counter() - start

lab_step(fresh(rows), cfg), agl()
steps, agls, passes = [], [], []
for _ in range({repeats}):
    start = time.perf_counter(); torch.sum(advantages * mask); passes.append(time.perf_counter() - start)
    steps.append(sum(lab_step(fresh(rows), cfg).values()))
    agls.append(agl())
print(json.dumps({{"step": statistics.median(steps) * 1e3, "agl": statistics.median(agls) * 1e3,
                  "pass": statistics.median(passes) * 1e3, "threads": torch.get_num_threads(),
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def measure(setting: dict[str, str], *, rows: int, repeats: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in _VARIABLES} | setting
    code = CHILD.format(here=str(HERE), tests=str(HERE.parent / "tests"), rows=rows, repeats=repeats)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", type=int, default=2, help="busy processes beside the second half of the runs")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per setting and load")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5, help="steps timed in each process")
    args = parser.parse_args()
    for load in sorted({0, args.load}):
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
        with busy_processes(load):
            loads = [load_now()]
            for _ in range(args.rounds):
                for name, setting in SETTINGS.items():
                    samples[name].append(measure(setting, rows=args.rows, repeats=args.repeats))
            loads.append(load_now())
        median = {
            key: {name: statistics.median(s[key] for s in runs) for name, runs in samples.items()}
            for key in ("step", "agl", "pass", "rss")
        }
        ms, agl = median["step"], median["agl"]
        threads = samples["torch's defaults"][0]["threads"]
        print(f"\n--load {load} (load average {min(loads):.1f}-{max(loads):.1f}), {threads} torch threads, "
              f"{args.rows} rows, median of {args.rounds} processes x {args.repeats} steps")  # fmt: skip
        for name in SETTINGS:
            print(f"  {name:26s} lab stages {ms[name]:7.1f} ms  Agent Lightning {agl[name]:7.1f} ms  masked pass "
                  f"{median['pass'][name]:6.2f} ms  peak RSS {median['rss'][name]:6.0f} MiB")  # fmt: skip
        default, passive, both = "torch's defaults", "OMP_WAIT_POLICY=PASSIVE", "both (agl_lab's)"
        print(
            f"process_env[load {load}]: lab stages default / PASSIVE = {ms[default] / ms[passive]:.2f}x; "
            f"PASSIVE / PASSIVE + huge pages = {ms[passive] / ms[both]:.2f}x (Agent Lightning "
            f"{agl[passive] / agl[both]:.2f}x); torch's defaults / agl_lab's = {ms[default] / ms[both]:.2f}x"
        )


if __name__ == "__main__":
    main()
