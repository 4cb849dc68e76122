"""Short-run speed: steps/s, tokens/s, and where a step's time goes, for the default run (``short_run_config``).

One run, timed stage by stage by the trainer itself (``timings.jsonl``), printed side by side:

* steps/s over the training steps, and over the whole call (policy build, run directory, checkpoint included);
* tokens/s: prompt + response tokens of the trained rows per second of step time (verl's ``perf/throughput``),
  and sampled tokens per second of sampling time;
* each stage's share of step time — sampling, agl_lab's batch pipeline (trace aggregation, drops and cap,
  advantage and per_rollout_mean normalization, verl's data metrics), old log-probs, the PPO update. Target: the
  pipeline ≤ 5% of step time.

Run: ``.venv/bin/python benchmarks/bench_trainer.py [--steps N] [key=value ...]`` (W&B off: ``trainer.logger=[]``).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

import agl_lab  # noqa: F401  (first: it quiets verl's CPU-platform notices)
from agl_lab import short_run_config, train

PIPELINE = ("timing_s/aggregate", "timing_s/drop", "timing_s/adv")
STAGES = {
    "sampling (policy.generate, task)": ("timing_s/gen",),
    "agl_lab batch pipeline": PIPELINE,
    "  trace aggregation": ("timing_s/aggregate",),
    "  drops, alignment, cap": ("timing_s/drop",),
    "  advantage, normalization, metrics": ("timing_s/adv",),
    "old log-probs": ("timing_s/old_log_prob",),
    "PPO update": ("timing_s/update_actor",),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the short-run default)")
    parser.add_argument("dotlist", nargs="*", help="more overrides, e.g. lab.device=cuda")
    args = parser.parse_args()
    dotlist = ["trainer.logger=[]", *args.dotlist]
    if args.steps:
        dotlist.append(f"trainer.total_training_steps={args.steps}")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = short_run_config(dotlist=[*dotlist, f"lab.run_dir={tmp}/run"])
        start = time.perf_counter()
        result = train(cfg, progress=False)
        wall = time.perf_counter() - start
    timings, history = result.timings, result.history
    step_s = timings["timing_s/step"].sum()
    n = len(timings)
    device = "cuda" if torch.cuda.is_available() and cfg.lab.device in ("auto", "cuda") else "cpu"
    threads = cfg.lab.cpu_threads or torch.get_num_threads()
    print(f"default short run: {n} steps on {device} ({threads} torch thread{'s' if threads > 1 else ''})")
    print(f"  steps/s               {n / step_s:8.2f}   (whole call incl. setup and checkpoint: {n / wall:.2f})")
    print(f"  tokens/s (trained)    {timings['perf/total_num_tokens'].sum() / step_s:8.0f}   prompt + response tokens")
    generated = history["lab/generated_tokens"].sum() / timings["timing_s/gen"].sum()
    print(f"  tokens/s (sampled)    {generated:8.0f}   response tokens per second of sampling")
    print(f"  wall                  {wall:8.1f} s  (target for the default run: <= 60 s on 2 cores)")
    print("\nshare of step time (sum over steps):")
    for name, keys in STAGES.items():
        seconds = sum(timings[k].sum() for k in keys if k in timings)
        print(f"  {name:<37} {100 * seconds / step_s:6.2f}%   {1000 * seconds / n:8.2f} ms/step")
    share = sum(timings[k].sum() for k in PIPELINE) / step_s
    verdict = "met" if share <= 0.05 else "MISSED"
    print(f"\nagl_lab's batch pipeline: {100 * share:.2f}% of step time (target <= 5%: {verdict})")


if __name__ == "__main__":
    main()
