"""How fast ``agl-lab`` answers when it only prints text, side by side with loading the stack it used to load.

In one run, each command in a fresh process, ``--repeats`` times (median): ``agl-lab --version``, ``--help`` and
every subcommand's ``--help`` (names read from ``--help``), then ``import agl_lab.core.loss`` (torch, verl and
the losses: what every one of those commands imported before agl_lab loaded its names on first use). Target: each
text command ≤ 1 s on 2 cores. The interpreter's own start (``python -c pass``) is printed for scale; on a shared
machine every figure is inflated by the load, which is printed too.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/bench_cli.py [--repeats N]``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

AGL_LAB = str(Path(sys.executable).parent / "agl-lab")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    help_text = subprocess.run([AGL_LAB, "--help"], capture_output=True, text=True, check=True).stdout
    names = re.search(r"{(\w+(?:,\w+)+)}", help_text).group(1).split(",")
    commands = {"--version": [AGL_LAB, "--version"], "--help": [AGL_LAB, "--help"]}
    commands |= {f"{name} --help": [AGL_LAB, name, "--help"] for name in names}
    python = {"python -c pass": [sys.executable, "-c", "pass"]}
    stack = {"import agl_lab.core.loss": [sys.executable, "-c", "import agl_lab.core.loss"]}

    print(f"load average before: {_load()}; {os.cpu_count()} cores; {args.repeats} runs each, median")
    times = {label: _median_s(command, args.repeats) for label, command in (python | commands | stack).items()}
    for label, seconds in times.items():
        print(f"  {label:<28} {seconds:6.2f} s")
    text = {label: times[label] for label in commands}
    slowest = max(text, key=text.get)
    print(f"load average after: {_load()}")
    print(
        f"cli: slowest text command {text[slowest]:.2f} s ({slowest}), median {statistics.median(text.values()):.2f} s "
        f"over {len(text)}; loading the stack {times['import agl_lab.core.loss']:.2f} s "
        f"({times['import agl_lab.core.loss'] / text[slowest]:.0f}x the slowest)"
    )


def _median_s(command: list[str], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
