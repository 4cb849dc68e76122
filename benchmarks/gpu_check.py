"""The device check for one CUDA GPU: a short run with each actor backend, steps/s and tokens/s side by side.

Run on a single-GPU machine with the project's venv (``make`` with the default ``TORCH_INDEX``, so pip takes
torch's CUDA build), from the repository root::

    .venv/bin/python benchmarks/gpu_check.py [--steps 10] [key=value ...]

Each backend trains the default short run (``agl_lab.short_run_config``) on ``lab.device=cuda`` for ``--steps``
steps, W&B off, in a temporary run directory: ``lab.actor=lab`` (agl_lab's update loop) and ``lab.actor=verl``
(verl 0.9.1's actor engine in this process: its own ``nvidia`` platform, a ``cpu:gloo,cuda:nccl`` group of one).
Printed per backend: steps/s over the steps, trained tokens/s (prompt + response tokens of the trained rows per
second of step time, verl's ``perf/throughput``), sampled tokens/s, the old log-prob and update times per step,
peak GPU memory, and the success rate; then verl / lab ratios, and how closely the two runs agree (step 1's actor
metrics; the steps with identical success rates). Step 1 is left out of the rates (CUDA warm-up).
Then one sweep cell per GPU through Ray (``agl_lab.run_sweep``, executor ``ray``, ``lab.device=cuda``, the default
``lab.actor=lab``): each cell's Ray task asks for ``num_gpus=1``, so the N GPUs of the machine run N cells at once,
one each; printed: the sweep's wall time beside the cells' own (all at once: the sweep takes about one cell's time,
not N), each cell's status, node and wall time. ``--no-ray`` leaves it out.
Then the real model (``--real-steps``, default 3; 0 leaves it out): the pretrained preset's run
(``lab.model=smollm2-135m-instruct``, retry_arith, LoRA r16) on the GPU (fp32 weights, bf16 autocast) and the same run
on this machine's CPU (float32), seconds per step side by side (step 1, the warm-up, left out), with the GPU's peak
memory and the two runs' success.
Without a GPU it exits 2 at once, saying so. ``key=value`` items go to every run (e.g. ``lab.model_hidden=256``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

BACKENDS = ("lab", "verl")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="training steps per backend (default 10)")
    parser.add_argument("--no-ray", action="store_true", help="leave out the sweep of one cell per GPU on Ray")
    parser.add_argument("--real-steps", type=int, default=3, help="steps of the real model per device (0: none)")
    parser.add_argument("dotlist", nargs="*", help="overrides for every run, e.g. lab.model_hidden=256")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            f"gpu_check.py needs a CUDA GPU: torch {torch.__version__} sees none "
            f"(CUDA build: {torch.version.cuda or 'no, a CPU-only torch'}). Run it on a GPU machine with torch's CUDA "
            "build; benchmarks/bench_actor.py compares the backends on the CPU.",
            file=sys.stderr,
        )
        return 2
    if args.steps < 2:
        parser.error("--steps must be at least 2 (step 1 is CUDA warm-up and left out of the rates)")

    from agl_lab import short_run_config, train  # after the check: the import takes seconds

    name = torch.cuda.get_device_name()
    print(f"{name}, torch {torch.__version__} (CUDA {torch.version.cuda}); {args.steps} steps per backend")
    results, histories = {}, {}
    for backend in BACKENDS:
        torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory() as tmp:
            dotlist = ["lab.device=cuda", "trainer.logger=[]", f"trainer.total_training_steps={args.steps}"]
            cfg = short_run_config(dotlist=[*dotlist, *args.dotlist, f"lab.actor={backend}", f"lab.run_dir={tmp}/run"])
            start = time.perf_counter()
            result = train(cfg, progress=False)
            wall = time.perf_counter() - start
        results[backend] = _rates(result, wall=wall, peak_gb=torch.cuda.max_memory_allocated() / 2**30)
        histories[backend] = result.history
        _print(backend, results[backend])
    print("\nverl / lab:")
    for key in ("steps_per_s", "trained_tokens_per_s", "old_log_prob_ms", "update_ms"):
        print(f"  {key:<22} {results['verl'][key] / results['lab'][key]:6.2f}x")
    _print_agreement(histories["lab"], histories["verl"])
    if args.real_steps:
        _real_model(steps=args.real_steps, dotlist=args.dotlist)
    return 0 if args.no_ray else _sweep_one_cell_per_gpu(steps=args.steps, dotlist=args.dotlist)


def _real_model(*, steps: int, dotlist: list[str]) -> None:
    """The pretrained preset's run on the GPU (bf16 autocast) and on the CPU: seconds per step side by side."""
    from agl_lab import short_run_config, train

    print(f"\nreal model: lab.model=smollm2-135m-instruct, {steps} steps per device (step 1 left out)")
    per_step = {}
    for device in ("cuda", "cpu"):
        torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory() as tmp:
            items = ["lab.model=smollm2-135m-instruct", f"lab.device={device}", "trainer.logger=[]",
                     f"trainer.total_training_steps={steps}", *dotlist, f"lab.run_dir={tmp}/run"]  # fmt: skip
            result = train(short_run_config(dotlist=items), progress=False)
        timings = result.timings.iloc[1:] if len(result.timings) > 1 else result.timings
        per_step[device] = float(timings["timing_s/step"].mean())
        success = ", ".join(f"{v:.2f}" for v in result.history["lab/success_rate"])
        peak = f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB" if device == "cuda" else ""
        print(f"  {device:<5} {per_step[device]:8.2f} s/step (gen {timings['timing_s/gen'].mean():.2f}, update "
              f"{timings['timing_s/update_actor'].mean():.2f}){peak}; success per step {success}")  # fmt: skip
    print(f"  the CPU takes {per_step['cpu'] / per_step['cuda']:.1f}x the GPU's time per step")


def _sweep_one_cell_per_gpu(*, steps: int, dotlist: list[str]) -> int:
    """N seeds of one setting on Ray, each cell asking for one GPU (agl_lab.studies.sweep_ray.cell_resources)."""
    import json
    from pathlib import Path

    from agl_lab import run_sweep

    gpus = torch.cuda.device_count()
    items = ["lab.device=cuda", "trainer.logger=[]", f"trainer.total_training_steps={steps}", *dotlist]
    print(f"\nRay: {gpus} cell(s), one per GPU (num_gpus=1 each), {steps} steps each")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = run_sweep({"gpu": []}, list(range(gpus)), sweep_dir=f"{tmp}/sweep", dotlist=items, progress=False)
        wall = time.perf_counter() - start
        records = [json.loads(path.read_text()) for path in sorted(Path(tmp, "sweep").glob("gpu/seed-*/cell.json"))]
    for record in records:
        node = (record.get("node_id") or "?")[:12]
        print(f"  seed {record['seed']}: {record['status']} on node {node} ({record['host']}), {record['wall_s']} s")
    cells_s = sum(record["wall_s"] or 0 for record in records)
    print(f"  sweep wall {wall:.1f} s (Ray's start included) for {cells_s:.1f} s of cells")
    failed = result.cells[result.cells.status != "done"]
    for cell in failed.itertuples():
        print(f"  not finished: seed {cell.seed} ({cell.status}): {cell.error}", file=sys.stderr)
    return 1 if len(failed) else 0


def _print_agreement(lab, verl) -> None:
    """Step 1 samples with equal weights, so its actor metrics should agree to float rounding (1e-5 on the CPU)."""
    print("\nagreement (same seed; the runs drift apart once sampling amplifies rounding differences):")
    for key in ("actor/entropy", "actor/pg_loss", "actor/grad_norm", "actor/ppo_kl"):
        a, b = float(lab[key].iloc[0]), float(verl[key].iloc[0])
        print(f"  step 1 {key:<18} lab {a:12.6g}   verl {b:12.6g}   |diff| {abs(a - b):.2e}")
    differ = (lab["lab/success_rate"] != verl["lab/success_rate"]).to_numpy().nonzero()[0]
    print(f"  success rate identical through step {differ[0] if len(differ) else len(lab)} of {len(lab)}")


def _rates(result, *, wall: float, peak_gb: float) -> dict[str, float]:
    timings, history = result.timings.iloc[1:], result.history.iloc[1:]  # without the warm-up step
    step_s = timings["timing_s/step"].sum()
    n = len(timings)
    return {
        "steps_per_s": n / step_s,
        "trained_tokens_per_s": timings["perf/total_num_tokens"].sum() / step_s,
        "sampled_tokens_per_s": history["lab/generated_tokens"].sum() / timings["timing_s/gen"].sum(),
        "old_log_prob_ms": 1000 * timings["timing_s/old_log_prob"].mean(),
        "update_ms": 1000 * timings["timing_s/update_actor"].mean(),
        "wall_s": wall,
        "peak_gpu_gb": peak_gb,
        "success_last": float(result.history["lab/success_rate"].iloc[-1]),
    }


def _print(backend: str, r: dict[str, float]) -> None:
    print(f"\nlab.actor={backend}")
    print(f"  steps/s               {r['steps_per_s']:10.2f}")
    print(f"  tokens/s (trained)    {r['trained_tokens_per_s']:10.0f}   prompt + response tokens of trained rows")
    print(f"  tokens/s (sampled)    {r['sampled_tokens_per_s']:10.0f}   response tokens per second of sampling")
    print(f"  old log-probs         {r['old_log_prob_ms']:10.1f} ms/step")
    print(f"  update                {r['update_ms']:10.1f} ms/step")
    print(f"  peak GPU memory       {r['peak_gpu_gb']:10.3f} GiB")
    print(f"  whole call            {r['wall_s']:10.1f} s (policy build, worker start, checkpoint included)")
    print(f"  success, last step    {r['success_last']:10.2f}")


if __name__ == "__main__":
    sys.exit(main())
