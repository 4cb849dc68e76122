"""Weighting lab speed: what each widget change of the panel costs at 10,000 rows, recompute + redraw.

The panel recomputes only what a change touches: a new loss mode or a cached rollout-level toggle redraws two
figures; the cap, the mini-batch size and the seed rerun the trainer's steps 1–4 (``select_rows`` and the
advantage) for the shown rollout-level setting; a generator knob regenerates and re-aggregates the batch.
Each change is timed from setting the widget's value to the images being updated (the observers run
synchronously), as the median of round-robin repeats, with verl's ``grpo`` estimator and its
``grpo_vectorized`` twin side by side. A breakdown of the stages follows. Target: 200 ms per change.

Run: ``.venv/bin/python benchmarks/bench_weighting.py [--prompts 900 --repeats 5]`` (900 prompts × 8 rollouts
make ~10,000 rows at the generator's defaults).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import torch

import agl_lab  # noqa: I001  (first: it quiets verl's CPU-platform notices)
from agl_lab import compose_config
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from agl_lab.lab.weighting import analyze_weighting
from agl_lab.ui.weighting_panel import WeightingPanel

TARGET_MS = 200.0
ESTIMATORS = ("grpo", "grpo_vectorized")


def panel_for(estimator: str, knobs: SyntheticKnobs) -> WeightingPanel:
    cfg = compose_config(
        overrides={
            "algorithm": {"adv_estimator": estimator},
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": max(1, knobs.n_prompts // 4)}},
        }
    )
    return WeightingPanel(knobs=knobs, cfg=cfg)


Change = tuple[Callable[[int], None] | None, Callable[[int], None]]  # (untimed setup, timed change) of repeat i


def interactions(panel: WeightingPanel) -> dict[str, Change]:
    """Each widget change, with alternating values so that every timed call is a change."""
    controls = panel.controls
    mini = controls["ppo_mini_batch_size"].value

    def set_value(name, values):
        return lambda i: setattr(controls[name], "value", values[i % len(values)])

    def forget_other_level(i: int) -> None:
        # the first toggle after a selection change has to compute the other setting's advantages
        panel._analysis_cache.pop((panel._selection, not controls["rollout_level"].value), None)

    return {
        "loss mode (redraws 2 of 4 figures)": (
            None,
            set_value("mode", ("seq-mean-token-mean", "per_rollout_mean:rows")),
        ),
        "rollout-level toggle, cached": (None, set_value("rollout_level", (False, True))),
        "rollout-level toggle, first time": (forget_other_level, set_value("rollout_level", (False, True))),
        "cap none -> 2 (2 mini-batches kept)": (set_value("cap", ("none",)), set_value("cap", (2,))),
        "cap 2 -> none (all aligned rows kept)": (set_value("cap", (2,)), set_value("cap", ("none",))),
        "mini-batch size": (None, set_value("ppo_mini_batch_size", (mini - 1, mini))),
        "generator knob (success_prob)": (None, set_value("success_prob", (0.55, 0.5))),
    }


def measure(change: Change | Callable[[int], object], repeats: int) -> float:
    """Median milliseconds of the timed part over ``repeats`` calls, after one warm-up."""
    setup, timed = change if isinstance(change, tuple) else (None, change)
    samples = []
    for i in range(-1, repeats):
        if setup is not None:
            setup(i)
        start = time.perf_counter()
        timed(i)
        if i >= 0:
            samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def stages(panel: WeightingPanel, repeats: int) -> dict[str, float]:
    """Where the time of a selection change goes: the analysis (trainer steps 1–4 + weights + frames), the drawing."""
    rows = panel._rows()
    cfg = panel.cfg
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for levels, name in (((True,), "analysis, rollout-level on"), ((False,), "analysis, rollout-level off")):
            out[name] = measure(lambda i, levels=levels: analyze_weighting(rows, cfg, rollout_levels=levels), repeats)
        out["analysis, the full table (every catalogue mode x on/off)"] = measure(
            lambda i: analyze_weighting(rows, cfg), repeats
        )
    for name, figure in panel.figures.items():

        def redraw(i: int, figure=figure) -> None:
            figure.drawn_for = None  # force this figure's redraw
            panel.redraw()

        out[f"redraw '{name}' figure"] = measure(redraw, repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=900)
    parser.add_argument("--rollouts-per-prompt", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    knobs = SyntheticKnobs(n_prompts=args.prompts, rollouts_per_prompt=args.rollouts_per_prompt)
    start = time.perf_counter()
    rows, _ = synthetic_rows(knobs)
    generate_ms = (time.perf_counter() - start) * 1e3
    n_rollouts = knobs.n_prompts * knobs.rollouts_per_prompt

    panels = {estimator: panel_for(estimator, knobs) for estimator in ESTIMATORS}
    changes = {estimator: interactions(panel) for estimator, panel in panels.items()}
    results = {estimator: {} for estimator in ESTIMATORS}
    for name in changes[ESTIMATORS[0]]:
        for estimator in ESTIMATORS:  # round-robin, so drifts of the machine hit both alike
            results[estimator][name] = measure(changes[estimator][name], args.repeats)
    breakdown = {estimator: stages(panel, args.repeats) for estimator, panel in panels.items()}

    print(f"agl_lab {agl_lab.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"batch: {len(rows)} rows from {n_rollouts} rollouts, response width {rows.batch['responses'].shape[1]}; "
        f"median of {args.repeats} repeats per change"
    )
    width = max(len(name) for name in [*results[ESTIMATORS[0]], *breakdown[ESTIMATORS[0]]]) + 2
    header = "".join(f"{e:>18}" for e in ESTIMATORS)
    print(f"\n{'panel change: recompute + redraw':<{width}}{header}   within {TARGET_MS:.0f} ms?")
    for name in results[ESTIMATORS[0]]:
        values = [results[e][name] for e in ESTIMATORS]
        verdict = "/".join("yes" if v <= TARGET_MS else "no" for v in values)
        print(f"  {name:<{width - 2}}" + "".join(f"{v:15.0f} ms" for v in values) + f"   {verdict}")
    print(f"\n{'stages':<{width}}{header}")
    for name in breakdown[ESTIMATORS[0]]:
        print(f"  {name:<{width - 2}}" + "".join(f"{breakdown[e][name]:15.0f} ms" for e in ESTIMATORS))
    print(f"  {'synthetic_rows: generate + aggregate':<{width - 2}}{generate_ms:15.0f} ms")


if __name__ == "__main__":
    main()
