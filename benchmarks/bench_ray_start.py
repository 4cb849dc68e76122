"""How long a sweep cell waits for its first training step: serial, on Ray started cold, on Ray started early.

Notebook 04's sweep cell on Ray used to start Ray itself and wait for each worker to import torch, verl and the
trainer; :func:`agl_lab.studies.ray_start.start_ray` (the notebook's cell before it) starts Ray and warms the
workers in the background. In one process, side by side, as the notebook runs them (its import cell first):

* ``serial``: ``run_sweep(executor="serial")``, the run in this process.
* ``ray, cold``: ``run_sweep(executor="ray")`` with no Ray running: it starts Ray and shuts it down at its end
  (what notebook 04 did before).
* ``ray, started at once``: ``start_ray()`` then the sweep at once (a notebook run top to bottom; the worst case).
* ``ray, started earlier``: ``start_ray()``, ``--read`` seconds (a person reading the notebook), then the sweep.
* ``ray, rerun``: the sweep again on the same Ray (its workers warm from the sweep before).

Each time runs from the ``run_sweep`` call to the first line of the cell's ``metrics.jsonl`` (step 1 logged), one
setting, one seed, the default short run. ``start_ray``'s own time is printed beside (what its cell takes). On a
shared machine every figure is inflated by the load, printed before and after.

Run: ``.venv/bin/python benchmarks/bench_ray_start.py [--read 20]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.studies.ray_start import start_ray
from agl_lab.studies.sweep import run_sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read", type=float, default=20.0, help="seconds between start_ray and the sweep")
    parser.add_argument("--steps", type=int, default=3, help="trainer.total_training_steps of the cell")
    args = parser.parse_args()
    import ray

    print(f"load average before: {_load()}; {os.cpu_count()} cores")
    setting = {name: items for name, items in list(DEMO_SETTINGS.items())[:1]}
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:

        def first_step(label: str, executor: str) -> None:
            sweep_dir = Path(tmp) / label.replace(" ", "_").replace(",", "")
            results[label] = _first_step_s(setting, sweep_dir, executor, args.steps)
            print(f"  {label:<24} {results[label]:6.1f} s to the first step", flush=True)

        first_step("serial", "serial")
        first_step("ray, cold", "ray")
        assert not ray.is_initialized()
        start = time.perf_counter()
        start_ray()
        print(f"  (start_ray returned in {time.perf_counter() - start:.1f} s)")
        first_step("ray, started at once", "ray")
        ray.shutdown()
        start_ray()
        time.sleep(args.read)
        first_step(f"ray, started {args.read:.0f} s earlier", "ray")
        first_step("ray, rerun", "ray")
        ray.shutdown()
    print(f"load average after: {_load()}")
    serial = results["serial"]
    print("ray start: " + ", ".join(f"{label} {s:.1f} s ({s - serial:+.1f} s)" for label, s in results.items()))


def _first_step_s(settings: dict, sweep_dir: Path, executor: str, steps: int) -> float:
    """Seconds from the run_sweep call to the cell's first metrics line; the sweep then runs to its end here."""
    metrics = sweep_dir / next(iter(settings)) / "seed-0" / "metrics.jsonl"
    seen: list[float] = []

    def watch() -> None:
        while not seen and not done.is_set():
            if metrics.exists() and metrics.stat().st_size:
                seen.append(time.perf_counter())
            time.sleep(0.02)

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.perf_counter()
    run_sweep(
        settings,
        [0],
        sweep_dir=sweep_dir,
        dotlist=[f"trainer.total_training_steps={steps}"],
        executor=executor,
        progress=False,
        wandb_mode="disabled",
    )
    done.set()
    watcher.join()
    if not seen:
        raise RuntimeError(f"{metrics} has no step after the sweep ended")
    return seen[0] - start


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
