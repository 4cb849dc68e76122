"""``agl-lab weighting data/sample_batch`` from a fresh process, beside what its imports cost and what it used to load.

Each command runs in a fresh process ``--repeats`` times (median): the interpreter alone (``python -c pass``), the
imports the command needs (``agl_lab.cli`` and the weighting path: readers, the weight catalogue, pandas), torch alone
(which the command loaded before the weight catalogue imported it only where a loss needs it), then the whole command
printing the sample batch's table for every mode; for scale, ``import verl.protocol`` (Ray and tensordict: what the
command loaded before it read batches with numpy). Goal (issue 33): the table in at most 2 s wall. The load average
is printed, and which of torch, verl, Ray, tensordict and Hydra the command's imports load.

Run: ``.venv/bin/python benchmarks/bench_weighting_cli.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from bench_cli import _median_s  # one way of timing a fresh process for both CLI benchmarks

ROOT = Path(__file__).resolve().parents[1]
AGL_LAB = str(Path(sys.executable).parent / "agl-lab")
IMPORTS = (
    "import agl_lab.cli, agl_lab.cli.weighting, agl_lab.studies.weighting_source, agl_lab.lab.run_diagnostics, "
    "agl_lab.files.run_readers, agl_lab.config.diagnostics_settings"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
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
    print(f"load average before: {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores; {args.repeats} runs each, median")
    times = {}
    for label, command in commands.items():
        times[label] = _median_s(command, args.repeats)
        print(f"  {label:<38} {times[label]:6.2f} s")
    print(f"load average after: {os.getloadavg()[0]:.1f}; the command loads {loaded.stdout.strip()}")
    table, imports = times["agl-lab weighting data/sample_batch"], times["imports of the command"]
    print(
        f"weighting cli: table in {table:.2f} s wall (goal <= 2 s), of which imports {imports:.2f} s (torch alone "
        f"{times['import torch']:.2f} s) and reading + 18 modes {table - imports:.2f} s; "
        f"import verl.protocol alone {times['import verl.protocol (before)']:.2f} s"
    )


if __name__ == "__main__":
    main()
