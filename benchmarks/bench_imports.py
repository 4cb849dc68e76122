"""What every process that loads verl pays before it does anything: the imports, each in a fresh process.

The test suite, the notebooks' kernels, each ``agl-lab`` run that trains and each Ray worker start a Python process
that imports torch, verl and Ray; their import cost is the floor under ``make test``'s time and a notebook's first
cell. In one run, each import in a fresh process, ``--repeats`` times (median wall and CPU seconds): ``python -c
pass`` for scale, torch, tensordict (which imports ``torch._dynamo``), transformers, Ray, ``verl.protocol`` (all of
them), and ``agl_lab.core.pipeline`` (what the trainer and the weighting analysis load).

Side by side, when rfc3987-syntax is installed (jsonschema from 4.25 imports it for its format checkers, and Ray
imports jsonschema): ``import ray`` alone against ``import rfc3987_syntax, ray``, the cost pyproject.toml's
``jsonschema<4.25`` keeps out of every such process. A fresh ``.venv/`` holds jsonschema 4.24 and not the package;
the line says so then.

``--load N`` keeps N busy processes beside the measurement (``busy_load.py``), as a laptop runs a notebook next to a
training run; the load average is printed beside the figures.

Run: ``.venv/bin/python benchmarks/bench_imports.py [--repeats N] [--load N]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time

from busy_load import busy_processes, load_now

IMPORTS = {
    "python -c pass": "pass",
    "import torch": "import torch",
    "import tensordict": "import tensordict",
    "import transformers": "import transformers",
    "import ray": "import ray",
    "import verl.protocol": "import verl.protocol",
    "import agl_lab.core.pipeline": "import agl_lab.core.pipeline",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the measurement")
    args = parser.parse_args()
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be 1 or more, got {args.repeats}")
    imports = dict(IMPORTS)
    syntax = importlib.util.find_spec("rfc3987_syntax") is not None
    if syntax:
        imports["import rfc3987_syntax, ray"] = "import rfc3987_syntax, ray"
    with busy_processes(args.load):
        print(f"{os.cpu_count()} cores, {args.load} busy processes beside; {args.repeats} fresh processes each, median")
        print(f"load average before: {load_now():.1f}")
        figures = {label: _median(code, args.repeats) for label, code in imports.items()}
        for label, (wall, cpu) in figures.items():
            print(f"  {label:<32} {wall:6.2f} s wall {cpu:6.2f} CPU-s")
        print(f"load average after: {load_now():.1f}")
    verl = figures["import verl.protocol"][1] - figures["python -c pass"][1]
    print(f"imports: verl.protocol {verl:.2f} CPU-s beyond the interpreter's start")
    if syntax:
        ray, both = figures["import ray"][1], figures["import rfc3987_syntax, ray"][1]
        print(f"imports: rfc3987-syntax beside Ray {both:.2f} against {ray:.2f} CPU-s ({both / ray:.1f}x)")
    else:
        print("imports: rfc3987-syntax is not installed (jsonschema < 4.25 does not ask for it): nothing to compare")


def _median(code: str, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds (user + system, the child's own) of ``python -c code`` in fresh processes."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


if __name__ == "__main__":
    main()
