"""``agl-lab demo``: the settings that matter, trained side by side on the embedded default, in a few minutes on a CPU.

Three short runs of the default task and policy (``agl_lab.short_run_config``), same seed, one setting apart:

* ``both_on`` — Agent Lightning's defaults: rollout-level advantage and ``per_rollout_mean`` (no cap);
* ``both_off`` — plain verl: advantage per row and ``vanilla`` token-mean loss;
* ``both_on_cap2`` — both on with ``agentlightning.max_ppo_update_times=2``, as the docs recommend.

Written to the output folder: ``success.png`` (success per step by setting), ``rows_vs_rollouts.png``
(``n_rows`` vs ``n_rollouts``), ``drops.png`` (rows trained and dropped per step), ``summary.csv`` and
``summary.md`` (one line per setting), and ``runs/<setting>/`` (each run's directory). Notebook:
``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from agl_lab import training_plots
from agl_lab.pipeline import mini_batch_rows
from agl_lab.trainer import TrainResult, short_run_config, train

__all__ = ["DEMO_SETTINGS", "DemoResult", "run_demo", "success_first_last", "summarize"]

_ON = (
    "algorithm.enable_rollout_level_advantage=true",
    "actor_rollout_ref.actor.policy_loss.loss_mode=per_rollout_mean",
)
DEMO_SETTINGS: dict[str, tuple[str, ...]] = {
    "both_on": (*_ON, "agentlightning.max_ppo_update_times=null"),
    "both_off": (
        "algorithm.enable_rollout_level_advantage=false",
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
        "agentlightning.max_ppo_update_times=null",
    ),
    "both_on_cap2": (*_ON, "agentlightning.max_ppo_update_times=2"),
}


@dataclass
class DemoResult:
    out_dir: Path
    summary: pd.DataFrame  # one line per setting (summary.csv)
    runs: dict[str, TrainResult]
    files: list[Path]  # the PNGs and tables written


def run_demo(
    *,
    out_dir: str | Path | None = None,
    dotlist: Sequence[str] = (),
    settings: Mapping[str, Sequence[str]] = DEMO_SETTINGS,
    progress: bool = True,
) -> DemoResult:
    """Train each setting (``dotlist`` applies to all, e.g. ``lab.seed=1``), then write the figures and tables.

    ``out_dir`` defaults to a fresh ``runs/demo-<time>/``.
    """
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"demo-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    runs, walls = {}, {}
    for name, items in settings.items():
        cfg = short_run_config(
            dotlist=[*dotlist, *items, f"lab.run_dir={out / 'runs' / name}", f"trainer.experiment_name={name}"]
        )
        start = time.perf_counter()
        runs[name] = train(cfg, progress=progress)
        walls[name] = time.perf_counter() - start
        if runs[name].stopped:
            break  # Ctrl-C: write what finished
    summary = summarize(runs, walls=walls)
    files = [out / "summary.csv", out / "summary.md"]
    summary.to_csv(files[0], index=False)
    files[1].write_text(_markdown(summary))
    for kind, figure in training_plots.compare_runs({name: r.history for name, r in runs.items()}).items():
        files.append(out / f"{kind}.png")
        figure.savefig(files[-1], dpi=110)
    return DemoResult(out_dir=out.resolve(), summary=summary, runs=runs, files=files)


def summarize(runs: Mapping[str, TrainResult], *, walls: Mapping[str, float] | None = None) -> pd.DataFrame:
    """One line per run: its settings, success early and late, rows per rollout, drops, updates per step."""
    lines = []
    for name, result in runs.items():
        h, cfg = result.history, result.config
        first, last = success_first_last(h)
        lines.append(
            {
                "setting": name,
                "rollout_level_advantage": bool(cfg.algorithm.enable_rollout_level_advantage),
                "loss_mode": cfg.actor_rollout_ref.actor.policy_loss.loss_mode,
                "max_ppo_update_times": _show(cfg.agentlightning.max_ppo_update_times),
                "steps": len(h),
                "success_first_20pct": first,
                "success_last_20pct": last,
                "rows_per_rollout": (h["training/n_sample"] / h["training/n_rollouts"]).mean(),
                "rows_trained_per_step": h["training/n_sample_trained"].mean(),
                "dropped_same_reward": int(h["training/n_sample_dropped/same_reward"].sum()),
                "dropped_random": int(h["training/n_sample_dropped/random"].sum()),
                "updates_per_step": (h["training/n_sample_trained"] / mini_batch_rows(cfg)).mean(),
                "wall_s": round(walls[name], 1) if walls and name in walls else None,
                "run_dir": str(result.run_dir),
            }
        )
    return pd.DataFrame(lines)


def success_first_last(history: pd.DataFrame) -> tuple[float, float]:
    """Mean success rate over the first and over the last 20% of a run's steps (at least one step each):
    learning is visible when the second is well above the first."""
    success = history[training_plots.SUCCESS]
    k = max(1, len(success) // 5)
    return float(success.iloc[:k].mean()), float(success.iloc[-k:].mean())


def _show(cap: int | None) -> int | str:
    return "null" if cap is None else int(cap)  # as in the config; pandas would print a missing value as nan


def _markdown(frame: pd.DataFrame) -> str:
    def cell(value) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"
