"""Is learning visible in the default short run? Success over the last 20% of steps vs the first 20%, per seed.

The default task must be learnable from scratch by the tiny default policy within the default run; the bar is
a ratio of at least 2 in every seed. Prints one line per seed and exits 1 if a seed misses it (a measurement,
not a test: the suite never asserts on learning speed).

Run: ``.venv/bin/python benchmarks/check_learning.py [key=value ...] [--seeds 0 1 2]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import agl_lab  # noqa: F401  (first: it quiets verl's CPU-platform notices)
from agl_lab import short_run_config, train
from agl_lab.curves.summary import SUCCESS, success_first_last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("dotlist", nargs="*", help="more overrides, e.g. agentlightning.max_ppo_update_times=2")
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            cfg = short_run_config(
                dotlist=["trainer.logger=[]", *args.dotlist, f"lab.seed={seed}", f"lab.run_dir={tmp}/seed-{seed}"]
            )
            start = time.perf_counter()
            history = train(cfg, progress=False).history
            first, last = success_first_last(history[SUCCESS])
            ratio = last / first if first > 0 else float("inf")
            ok &= ratio >= 2
            print(
                f"seed {seed}: success first 20% {first:.3f}, last 20% {last:.3f}, ratio {ratio:.2f} "
                f"({'ok' if ratio >= 2 else 'BELOW 2x'}; {len(history)} steps, {time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
