"""``agl-lab weighting`` on a batch from a fresh process, and on a verl run against the time pandas takes to read it.

**A batch** (``data/sample_batch``): each command runs in a fresh process ``--repeats`` times (median): the
interpreter alone (``python -c pass``), the imports the command needs (``agl_lab.cli`` and the weighting path:
readers, the weight catalogue, pandas), torch alone (which the command loaded before the weight catalogue imported it
only where a loss needs it), then the whole command printing the sample batch's table for every mode; for scale,
``import verl.protocol`` (Ray and tensordict: what the command loaded before it read batches with numpy). Goal (issue
33): the table in at most 2 s wall. Which of torch, verl, Ray, tensordict and Hydra the command's imports load.

**A verl run** (issue 54): ``--steps`` steps (100) of verl's ``trainer.rollout_data_dir``, one ``<step>.jsonl`` each,
written by verl's own writer (``RayPPOTrainer._log_rollout_data`` → ``_write_generations``, through
:func:`agl_lab.files.verl_dump.write_verl_dump`) in a child process, so this one never imports verl: the synthetic
agent of ``tests/test_cli_weighting.py`` at ``--prompts`` prompts (38: about 2,000 rows a step, sessions of 1 to 12
rows, every LLM call a row). Measured in this process, side by side, interleaved, ``--repeats`` times each (median):
pandas reading every file (``pd.read_json(lines=True)`` per file, concatenated); agl_lab's reader through every step
(``iter_run_steps``: parsing, the session, step and group checks, the outcomes); and the whole command
(``agl_lab.cli.main(["weighting", RUN])``: the reader, every mode on every step, the printed tables). Once idle and
once beside ``--load`` busy processes (:mod:`busy_load`), each with its load average. Goal: the command at most 2x
pandas. Then the command from a fresh process, imports included.

Run: ``.venv/bin/python benchmarks/bench_weighting_cli.py [--repeats 5 --steps 100 --prompts 38 --load 2 --dir DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_cli import _median_s  # one way of timing a fresh process for both CLI benchmarks
from busy_load import busy_processes, load_now

ROOT = Path(__file__).resolve().parents[1]
AGL_LAB = str(Path(sys.executable).parent / "agl-lab")
IMPORTS = (
    "import agl_lab.cli, agl_lab.cli.weighting, agl_lab.studies.weighting_source, agl_lab.lab.run_diagnostics, "
    "agl_lab.files.run_readers, agl_lab.config.diagnostics_settings"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=38, help="prompts a step (8 rollouts each)")
    parser.add_argument("--load", type=int, default=2, help="busy processes beside the second measurement")
    parser.add_argument("--dir", default=None, help="where the run is written, or read if it is there")
    parser.add_argument("--generate", default=None, help=argparse.SUPPRESS)  # the child: write the run here
    args = parser.parse_args()
    if args.generate:
        return generate(Path(args.generate), steps=args.steps, prompts=args.prompts)
    table, imports = measure_batch(args.repeats)
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(args.dir or scratch) / "rollout_data_dir"
        if not run.exists():
            started = time.perf_counter()
            command = [sys.executable, __file__, "--generate", str(run), "--steps", str(args.steps)]
            subprocess.run([*command, "--prompts", str(args.prompts)], check=True)
            print(f"wrote {args.steps} steps with verl's writer in {time.perf_counter() - started:.1f} s")
        figures = measure_run(run, repeats=args.repeats, load=args.load)
    idle, busy = figures["idle"], figures["busy"]
    print(
        f"weighting cli: a verl run of {idle['steps']} steps ({idle['rows']:,} rows) in {idle['command']:.2f} s, "
        f"{idle['ratio']:.2f}x pandas reading its files idle (load {idle['load']:.1f}), {busy['ratio']:.2f}x beside "
        f"{args.load} busy processes (load {busy['load']:.1f}) (goal <= 2x); data/sample_batch's table in "
        f"{table:.2f} s wall (goal <= 2 s), of which imports {imports:.2f} s"
    )


def measure_batch(repeats: int) -> tuple[float, float]:
    """``agl-lab weighting data/sample_batch`` and its imports from fresh processes; (table s, imports s)."""
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import torch": [sys.executable, "-c", "import torch"],
        "imports of the command": [sys.executable, "-c", IMPORTS],
        "agl-lab weighting data/sample_batch": [AGL_LAB, "weighting", str(ROOT / "data" / "sample_batch")],
        "import verl.protocol (before)": [sys.executable, "-c", "import verl.protocol"],
    }
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{IMPORTS}; import sys; print(sorted(m for m in ('torch', 'verl', "
            "'ray', 'tensordict', 'hydra') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    print(f"load average before: {load_now():.1f}; {os.cpu_count()} cores; {repeats} runs each, median")
    times = {}
    for label, command in commands.items():
        times[label] = _median_s(command, repeats)
        print(f"  {label:<38} {times[label]:6.2f} s")
    print(f"load average after: {load_now():.1f}; the command loads {loaded.stdout.strip()}")
    table, imports = times["agl-lab weighting data/sample_batch"], times["imports of the command"]
    print(
        f"data/sample_batch: table in {table:.2f} s wall, of which imports {imports:.2f} s (torch alone "
        f"{times['import torch']:.2f} s) and reading + 18 modes {table - imports:.2f} s; "
        f"import verl.protocol alone {times['import verl.protocol (before)']:.2f} s"
    )
    return table, imports


def generate(run: Path, *, steps: int, prompts: int) -> None:
    """The run, written by verl's writer (this child imports verl)."""
    from agl_lab.files.verl_dump import write_verl_dump
    from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows

    for step in range(1, steps + 1):
        knobs = SyntheticKnobs(n_prompts=prompts, level="transition", fail_extra_calls=9, seed=step)
        write_verl_dump(synthetic_rows(knobs)[0], run, step=step)


def measure_run(run: Path, *, repeats: int, load: int) -> dict[str, dict[str, float]]:
    """pandas, the reader and the command on ``run``, interleaved, idle and beside ``load`` busy processes."""
    started = time.perf_counter()
    import pandas as pd

    from agl_lab.cli import main as agl_lab
    from agl_lab.files.run_readers import iter_run_steps

    imports = time.perf_counter() - started
    files = sorted(run.glob("*.jsonl"), key=lambda p: int(p.stem))

    def pandas_reads() -> int:
        return len(pd.concat([pd.read_json(f, lines=True) for f in files], ignore_index=True))

    def reader() -> int:
        return sum(len(rows) for _, rows in iter_run_steps(run))

    def command() -> int:
        with contextlib.redirect_stdout(io.StringIO()):
            return agl_lab(["weighting", str(run)])

    n_rows = pandas_reads()  # the file cache warm for both
    assert command() == 0 and reader() == n_rows  # the command's lazy imports done before the clock runs
    size = sum(p.stat().st_size for p in files) / 2**20
    print(
        f"run: {len(files)} steps, {n_rows:,} rows ({n_rows / len(files):.0f} a step), {size:.0f} MiB of JSONL; "
        f"importing pandas and the command {imports:.2f} s"
    )
    figures = {}
    for label, busy in (("idle", 0), ("busy", load)):
        with busy_processes(busy):
            if busy:
                time.sleep(5)  # the spinners running before the clock does
            before = load_now()
            timings = {"pandas": [], "reader": [], "command": []}
            for _ in range(repeats):
                for name, fn in (("pandas", pandas_reads), ("reader", reader), ("command", command)):
                    start = time.perf_counter()
                    fn()
                    timings[name].append(time.perf_counter() - start)
            after = load_now()
        median = {name: statistics.median(values) for name, values in timings.items()}
        figures[label] = {
            **median,
            "steps": len(files),
            "rows": n_rows,
            "ratio": median["command"] / median["pandas"],
            "load": after,
        }
        print(
            f"{label} ({busy} busy processes, load average {before:.1f} -> {after:.1f}; median of {repeats}, "
            "interleaved):"
        )
        for name, values in timings.items():
            print(
                f"  {name:<8} {median[name]:5.2f} s  {median[name] / median['pandas']:5.2f}x pandas  "
                f"({', '.join(f'{v:.2f}' for v in values)})"
            )
    fresh = _median_s([AGL_LAB, "weighting", str(run)], max(1, repeats // 2))
    print(f"agl-lab weighting RUN from a fresh process (imports included): {fresh:.2f} s at load {load_now():.1f}")
    return figures


if __name__ == "__main__":
    main()
