"""A whole run diagnosed step by step, every mode, against the time pandas takes just to read the same files.

The run: ``--steps`` steps (100) of about ``--rows`` rows (2,000) in verl's rollout dump format, written by verl's own
writer (``RayPPOTrainer._write_generations``, what verl's dump thread runs) in a child process, so this one never
imports verl. Each step holds GRPO groups of 8 trajectories (``request_id``) of 1 to 10 rows (sessions), whose
chance of success falls with their length (failing agents make more calls, as in verl PR #7580's runs); a row's
``input`` is the task prompt plus the session so far (about 600 characters on average) and its ``output`` about 400.

Measured in this process, side by side, ``--repeats`` times (median): pandas reading every file
(``pd.read_json(lines=True)``), and ``agl_lab.weighting_diagnostics(run, by_step=True)`` (every catalogue mode on every
step: reading, GRPO, the weights, the columns, the influence). Goal (issue 33/30): at most 4x pandas. Peak memory:
the maximum RSS of a fresh process (same imports) diagnosing the whole run, beside one that holds one step and one
that holds the whole run in pandas: the diagnosis stays near the first, since it reads one step at a time. The load
average is printed with the figures.

Run: ``.venv/bin/python benchmarks/bench_run_diagnostics.py [--steps 100 --rows 2000 --repeats 3 --dir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = [f"w{i}" for i in range(5000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the run is written (default: a temporary folder)")
    parser.add_argument("--generate", default=None, help=argparse.SUPPRESS)  # the child: write the run here
    args = parser.parse_args()
    if args.generate:
        return generate(Path(args.generate), steps=args.steps, rows=args.rows)
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(args.dir or scratch) / "rollout_data_dir"
        if not run.exists():
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--generate",
                    str(run),
                    "--steps",
                    str(args.steps),
                    "--rows",
                    str(args.rows),
                ],
                check=True,
            )
            print(f"wrote {args.steps} steps with verl's writer in {time.perf_counter() - started:.1f} s")
        measure(run, repeats=args.repeats)


def generate(run: Path, *, steps: int, rows: int) -> None:
    import numpy as np
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    rng = np.random.default_rng(0)
    for step in range(1, steps + 1):
        inputs, outputs, scores, request_ids = [], [], [], []
        group = 0
        while len(inputs) < rows:
            task = " ".join(rng.choice(WORDS, 60))
            for rollout in range(8):
                n = int(rng.integers(1, 11))
                solved = rng.random() < 0.9 / n
                history = task
                for _ in range(n):
                    output = " ".join(rng.choice(WORDS, 70))
                    inputs.append(history[-1200:])
                    outputs.append(output)
                    scores.append(float(solved))
                    request_ids.append(f"s{step}-g{group}-r{rollout}")
                    history = f"{history} {output}"
            group += 1
        n_rows = len(inputs)
        RayPPOTrainer._write_generations(
            inputs, outputs, [None] * n_rows, scores, {"request_id": request_ids}, str(run), step
        )


def measure(run: Path, *, repeats: int) -> None:
    started = time.perf_counter()
    import pandas as pd

    import agl_lab
    from agl_lab.files import run_readers  # noqa: F401  (imported before the clock runs)
    from agl_lab.lab import run_diagnostics  # noqa: F401

    imports = time.perf_counter() - started
    files = sorted(run.glob("*.jsonl"), key=lambda p: int(p.stem))
    size = sum(p.stat().st_size for p in files)

    def pandas_reads() -> int:
        return sum(len(pd.read_json(f, lines=True)) for f in files)

    def diagnose() -> pd.DataFrame:
        return agl_lab.weighting_diagnostics(run, by_step=True)

    n_rows = pandas_reads()  # warm the file cache for both
    timings = {"pandas": [], "agl_lab": []}
    table = None
    for _ in range(repeats):
        for name, fn in (("pandas", pandas_reads), ("agl_lab", diagnose)):
            start = time.perf_counter()
            result = fn()
            timings[name].append(time.perf_counter() - start)
            table = result if name == "agl_lab" else table
    memory = {what: _child_rss(run, what) for what in ("one step", "diagnosis", "whole run")}
    panda, ours = statistics.median(timings["pandas"]), statistics.median(timings["agl_lab"])
    modes = table["mode"].nunique()
    mib = 2**20
    print(
        f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores; importing agl_lab's readers and "
        f"diagnostics {imports:.2f} s (torch among them: {'torch' in sys.modules})"
    )
    print(f"run: {len(files)} steps, {n_rows} rows ({n_rows / len(files):.0f} a step), {size / mib:.0f} MiB of JSONL")
    print(f"pandas reads every file: {panda:.2f} s (median of {repeats}: {_list(timings['pandas'])})")
    print(
        f"agl_lab diagnoses every step, {modes} modes: {ours:.2f} s ({_list(timings['agl_lab'])}), "
        f"{ours / len(files) * 1000:.0f} ms a step"
    )
    print(
        f"peak memory (max RSS of a fresh process with the same imports): pandas holding one step "
        f"{memory['one step']:.0f} MiB, agl_lab diagnosing the whole run {memory['diagnosis']:.0f} MiB, pandas "
        f"holding the whole run {memory['whole run']:.0f} MiB"
    )
    print(f"run diagnostics: {ours / panda:.2f}x the time pandas takes to read the files (goal <= 4x)")


_CHILD = """
import resource, sys
from pathlib import Path
import pandas as pd
import agl_lab
from agl_lab.files import run_readers
from agl_lab.lab import run_diagnostics
run, what = Path(sys.argv[1]), sys.argv[2]
files = sorted(run.glob("*.jsonl"), key=lambda p: int(p.stem))
if what == "one step":
    kept = pd.read_json(files[0], lines=True)
elif what == "diagnosis":
    kept = agl_lab.weighting_diagnostics(run, by_step=True)
else:
    kept = pd.concat([pd.read_json(f, lines=True) for f in files])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _child_rss(run: Path, what: str) -> float:
    """MiB: the maximum resident size of a fresh process that imports the same and does ``what``."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(run), what], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 1024


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
