"""How far the demo's numbers move with the CPU's kernels, torch's threads and reruns: the README table's spread.

The demo is deterministic on one machine (a rerun prints the same table), but its float sums depend on which kernels
torch picks for the CPU (``ATEN_CPU_CAPABILITY``: default, avx2, avx512) and on how a thread count splits them, and
40 steps of training carry a last-bit difference into the success rates. A fresh clone on another CPU of this kind
takes other kernels. So this runs ``agl-lab demo`` (the command ``make readme`` runs) once as ``make readme`` does
(this machine's own kernels, the default ``lab.cpu_threads=1``), again the same way (a rerun), and once for every
other kernel set the CPU has × threads 1 and 2, each in a fresh process, and writes ``data/demo_spread.json``: the
CPU, torch's version, every run's table and, per column, the largest distance of any run from the first.
``make readme`` writes that spread beside the README's demo table (:mod:`agl_lab.curves.readme_table`).

Kernels are not the whole story: the same kernel set on another vendor's CPU (an AMD EPYC's AVX-512 against the
Intel Xeon's that made the table) sums differently again. ``--add`` runs this machine's demos (its own kernels, then
every other kernel set × threads) and adds them, each run named with its CPU, to the runs already in the file:
the README's table and its first run stay, and the spread grows to cover every CPU measured.

Run: ``.venv/bin/python benchmarks/bench_numbers.py [--out data/demo_spread.json] [--threads 1 2] [--add]`` (up to
7 demos: minutes on a quiet machine; 2 threads on 2 busy cores can take many times longer, torch's threads waiting on
each other).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
AGL_LAB = str(Path(sys.executable).parent / "agl-lab")
KERNELS = ("default", "avx2", "avx512")  # torch's ATEN_CPU_CAPABILITY values on x86
NOT_NUMBERS = ("setting", "n_seeds", "steps", "wall_s")  # wall time is the machine's, not the demo's numbers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "demo_spread.json")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="lab.cpu_threads values to try")
    parser.add_argument(
        "--add",
        action="store_true",
        help="add this machine's runs to those in --out (another CPU) instead of starting it anew",
    )
    args = parser.parse_args()
    if args.add and not args.out.is_file():
        raise SystemExit(f"--add adds this machine's runs to {args.out}, which is not there: run without --add first")
    earlier = json.loads(args.out.read_text()) if args.add else None
    if earlier is not None and earlier["torch"] != _torch_version():  # before any demo runs
        raise SystemExit(f"{args.out} was made with torch {earlier['torch']}, this is {_torch_version()}: run "
                         "without --add to start it anew")  # fmt: skip
    print(f"load average before: {_load()}; {os.cpu_count()} cores")
    own = _capability({})
    variants = [("as make readme", {}, 1), ("rerun", {}, 1)] if earlier is None else [("own kernels", {}, 1)]
    for kernels in KERNELS:
        if _capability({"ATEN_CPU_CAPABILITY": kernels}).lower() != kernels:
            print(f"  ATEN_CPU_CAPABILITY={kernels}: this CPU lacks it, skipped")
            continue
        for threads in args.threads:
            if kernels == own.lower() and threads == 1:
                continue  # the first run's own kernels and threads: the rerun covers it
            variants.append((f"ATEN_CPU_CAPABILITY={kernels}, {threads} threads",
                             {"ATEN_CPU_CAPABILITY": kernels}, threads))  # fmt: skip
    cpu = _cpu_name()
    runs = []
    for label, env, threads in variants:
        table = _demo(env, threads)
        runs.append({"run": label, "cpu": cpu, "kernels": _capability(env), "threads": threads, "table": table})
        print(f"  {label:<40} " + " ".join(f"{r['setting']} {r['success_last_20pct']}" for r in table), flush=True)
    if earlier is not None:
        runs = [{"cpu": earlier["cpu"], **run} for run in earlier["runs"]] + runs
    spread = _spread([pd.DataFrame(run["table"]) for run in runs])
    result = {
        "cpu": earlier["cpu"] if earlier else cpu,
        "torch": _torch_version(),
        "kernels": earlier["kernels"] if earlier else own,
        "threads": 1,
        "spread": spread,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"load average after: {_load()}")
    print(f"{args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}: " +
          ", ".join(f"{column} ±{value:g}" for column, value in spread.items()))  # fmt: skip


def _demo(env: dict[str, str], threads: int) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-numbers-") as tmp:
        out = Path(tmp) / "demo"
        subprocess.run(
            [AGL_LAB, "demo", "--out", str(out), f"lab.cpu_threads={threads}"],
            env=dict(os.environ, WANDB_MODE="disabled", **env), check=True, capture_output=True, cwd=tmp,
        )  # fmt: skip
        return pd.read_csv(out / "summary.csv").to_dict(orient="records")


def _spread(tables: list[pd.DataFrame]) -> dict[str, float]:
    """Per numeric column: the largest |run - first run| over every run and setting (3 significant digits)."""
    first = tables[0].set_index("setting")
    columns = [c for c in first.columns if c not in NOT_NUMBERS]
    spread = {}
    for column in columns:
        distance = max(float((t.set_index("setting")[column] - first[column]).abs().max()) for t in tables)
        spread[column] = float(f"{distance:.3g}")
    return spread


def _capability(env: dict[str, str]) -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def _torch_version() -> str:
    code = "import torch; print(torch.__version__)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
