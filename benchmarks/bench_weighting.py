"""Weighting panel speed: what each control change costs at ≥ 10,000 rows, recompute + redraw, kernel side.

Every control of :class:`agl_lab.ui.weighting_panel.WeightingPanel` — the generator's knobs, the three settings,
the mini- and micro-batch sizes, the dp ranks, the seed — and a click on a rollout is timed from setting the
widget's value to the observers having returned, which includes the messages the figures send: every comm
message is serialized to JSON here as ipykernel would (and its binary buffers checked contiguous), so the time is
the kernel's part of a change. What the browser then spends drawing is measured by the browser tests' notes
(README). Each change alternates between two values, so every timed call is a change; the median of round-robin
repeats is reported for the panel's default estimator (``grpo_vectorized``) beside verl's ``grpo`` (the same
numbers, computed with a Python loop). Target: 100 ms per change. The last line is the slowest change with the
default estimator.

Run: ``.venv/bin/python benchmarks/bench_weighting.py [--prompts 900 --repeats 5]`` (900 prompts × 8 rollouts
make ~10,000 rows at the generator's defaults).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import comm
import torch

import agl_lab  # noqa: I001  (first: it quiets verl's CPU-platform notices)
from agl_lab import compose_config
from agl_lab.lab.synthetic import SyntheticKnobs
from agl_lab.ui.weighting_panel import WeightingPanel

TARGET_MS = 100.0
ESTIMATORS = ("grpo_vectorized", "grpo")  # the panel's default first
SENT = {"messages": 0, "bytes": 0}


class SerializingComm(comm.base_comm.BaseComm):
    """What a kernel's comm does with a widget message, minus the socket: JSON text and contiguous buffers."""

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        for buffer in buffers or []:
            if not memoryview(buffer).contiguous:
                raise ValueError("a widget sent a non-contiguous buffer: ipykernel would refuse it")
        SENT["messages"] += 1
        SENT["bytes"] += len(json.dumps(data or {}, default=str)) + sum(memoryview(b).nbytes for b in buffers or [])


comm.create_comm = lambda *args, **kwargs: SerializingComm(*args, **kwargs)


def panel_for(estimator: str, knobs: SyntheticKnobs) -> WeightingPanel:
    cfg = compose_config(
        overrides={
            "algorithm": {"adv_estimator": estimator},
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": max(1, knobs.n_prompts // 4)}},
        }
    )
    panel = WeightingPanel(knobs=knobs, cfg=cfg)
    for figure in (panel.bars.widget, panel.scatter.widget):  # as when a view has drawn them: updates are messages
        figure._handle_msg({"content": {"data": {"method": "custom", "content": {"type": "shown"}}}, "buffers": []})
    return panel


def changes(panel: WeightingPanel) -> dict[str, tuple]:
    """Each control with two values to alternate between (the second is where it starts)."""
    c = panel.controls
    mini = c["ppo_mini_batch_size"].value
    out = {
        "loss mode": ("mode", ("trl:bnpo", "per_rollout_mean:rows")),
        "rollout-level advantage (first time)": ("rollout_level", (False, True)),
        "rollout-level advantage (cached)": ("rollout_level", (False, True)),
        "max_ppo_update_times none -> 2": ("max_ppo_update_times", (2, "none")),
        "ppo_mini_batch_size": ("ppo_mini_batch_size", (mini - 1, mini)),
        "ppo_micro_batch_size_per_gpu": ("micro", (8, 0)),
        "dp ranks": ("dp_size", (2, 1)),
        "seed": ("seed", (1, 0)),
    }
    for name in ("n_prompts", "rollouts_per_prompt", "min_calls", "max_calls", "fail_extra_calls", "min_tokens",
                 "max_tokens"):  # fmt: skip
        out[f"generator: {name}"] = (name, (c[name].value + 1, c[name].value))
    for name in ("success_prob", "partial_credit", "break_prob", "continue_prob"):
        value = c[name].value
        out[f"generator: {name}"] = (name, (round(min(value + 0.05, 1.0), 2), value))
    out["generator: calls"] = ("calls", ("uniform", c["calls"].value))
    out["generator: level"] = ("level", ("transition", c["level"].value))
    return out


def measure(panel: WeightingPanel, name: str, control: str, values: tuple, repeats: int) -> float:
    """Median ms of setting ``control`` to alternating ``values`` (a warm-up pair first)."""
    widget = panel.controls[control]
    samples = []
    for i in range(-2, 2 * repeats):
        if name.endswith("(first time)"):  # the other rollout-level setting's advantages are not computed yet
            panel._analysis_cache.pop((panel._selection, not widget.value), None)
        start = time.perf_counter()
        widget.value = values[i % 2]
        if i >= 0:
            samples.append(time.perf_counter() - start)
        assert panel.error is None, panel.error
    return statistics.median(samples) * 1e3


def measure_click(panel: WeightingPanel, repeats: int) -> float:
    samples = []
    for i in range(2 * repeats):
        start = time.perf_counter()
        panel.show_rollout(i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=900)
    parser.add_argument("--rollouts-per-prompt", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    knobs = SyntheticKnobs(n_prompts=args.prompts, rollouts_per_prompt=args.rollouts_per_prompt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        panels = {estimator: panel_for(estimator, knobs) for estimator in ESTIMATORS}
    n_rows = len(panels[ESTIMATORS[0]].result.compact)
    plan = changes(panels[ESTIMATORS[0]])
    results: dict[str, dict[str, float]] = {name: {} for name in plan}
    sent: dict[str, tuple[float, float]] = {}
    for name, (control, values) in plan.items():
        for estimator in ESTIMATORS:  # round-robin, so drifts of the machine hit both alike
            SENT.update(messages=0, bytes=0)
            results[name][estimator] = measure(panels[estimator], name, control, values, args.repeats)
            if estimator == ESTIMATORS[0]:
                calls = 2 * args.repeats + 2
                sent[name] = (SENT["messages"] / calls, SENT["bytes"] / calls / 1e3)
    results["click a rollout (its rows table)"] = {e: measure_click(panels[e], args.repeats) for e in ESTIMATORS}
    sent["click a rollout (its rows table)"] = (1.0, float("nan"))

    print(f"agl_lab {agl_lab.__version__}, torch {torch.__version__}; the panel computes on 1 torch thread")
    print(f"batch: {n_rows} rows from {knobs.n_prompts * knobs.rollouts_per_prompt} rollouts; median of "
          f"{2 * args.repeats} changes each; messages serialized as a kernel would")  # fmt: skip
    width = max(len(name) for name in results) + 2
    header = "".join(f"{e:>18}" for e in ESTIMATORS)
    print(f"\n{'control change: recompute + redraw':<{width}}{header}   msgs   kB sent   within {TARGET_MS:.0f} ms?")
    for name, values in results.items():
        line = "".join(f"{values[e]:15.1f} ms" for e in ESTIMATORS)
        messages, kilobytes = sent[name]
        verdict = "yes" if values[ESTIMATORS[0]] <= TARGET_MS else "NO"
        print(f"  {name:<{width - 2}}{line}   {messages:4.1f}  {kilobytes:8.0f}   {verdict}")
    slowest = max(values[ESTIMATORS[0]] for values in results.values())
    print(f"slowest control change: {slowest:.0f} ms at {n_rows} rows")


if __name__ == "__main__":
    main()
