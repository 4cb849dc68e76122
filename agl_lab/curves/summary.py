"""One line per setting: what a sweep (or the demo, a sweep with one seed) found, from its long-form table.

Success early and late (the mean over the first and the last 20% of steps: learning shows as the second well
above the first), rows per rollout, rows trained and dropped, PPO updates per step and, for runs that evaluated
(``trainer.test_freq``; :mod:`agl_lab.training.validation`), the held-out success (verl's
``val-core/<task>/reward/mean@n``): ``heldout_success_last`` at the last evaluation and ``heldout_success_auc``, its
area under the curve over the evaluation steps (trapezoid) divided by their span, i.e. the curve's mean height (NaN
with a single evaluation); each averaged over the setting's seeds, with ``n_seeds`` beside it. ``agl-lab demo``
writes it as ``summary.csv`` and ``summary.md``.

The windows of a run's steps (:data:`WINDOWS`, :func:`window_mean`) are defined here once: the summary's early and
late success and :func:`agl_lab.curves.effects.compare_settings` both read them.
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import numpy as np
import pandas as pd

from agl_lab.core.keys import (
    N_ROLLOUTS,
    N_SAMPLE,
    N_SAMPLE_DROPPED_RANDOM,
    N_SAMPLE_DROPPED_SAME_REWARD,
    N_SAMPLE_TRAINED,
    PPO_UPDATES,
    SUCCESS_RATE,
    VAL_CORE_REWARD,
    VALIDATION_METRICS,
)

__all__ = ["SUCCESS", "WINDOWS", "heldout_success", "markdown_table", "number", "success_first_last", "summarize"]
__all__ += ["window_mean"]

SUCCESS = SUCCESS_RATE
# The windows of a run's steps a value is averaged over (k = a fifth of the run's steps, at least one).
WINDOWS = {
    "first_20pct": "the mean over the first 20% of the run's steps",
    "last_20pct": "the mean over the last 20% of the run's steps",
    "all": "the mean over all the run's steps",
    "last_minus_first": "the mean over the last 20% of the run's steps minus that over the first 20% (the change)",
    "final": "the value at the last step that logged it (a held-out evaluation: the end of training)",
    "auc": "the area under the curve over the steps that logged it (trapezoid), divided by their span: the curve's "
    "mean height (a held-out evaluation's area under the curve; NaN with fewer than two values)",
}


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """One line per setting (in the table's order), each value the mean over the setting's seeds."""
    if table.empty:
        return pd.DataFrame(columns=["setting", "n_seeds"])
    lines = []
    for setting, part in table.groupby("setting", sort=False):
        runs = [  # one wide history (a line per step, a column per metric) per seed
            run.pivot_table(index="step", columns="metric", values="value").sort_index()
            for _, run in part.groupby("seed", sort=False, dropna=False)
        ]
        per_run = pd.DataFrame([_run_summary(run) for run in runs])
        lines.append({"setting": setting, "n_seeds": len(runs), **per_run.mean(numeric_only=True).to_dict()})
    return pd.DataFrame(lines)


def success_first_last(success: pd.Series | np.ndarray) -> tuple[float, float]:
    """Mean success over the first and over the last 20% of a run's steps (at least one step each)."""
    return window_mean(success, "first_20pct"), window_mean(success, "last_20pct")


def window_mean(values: pd.Series | np.ndarray, window: str, *, steps: np.ndarray | None = None) -> float:
    """The mean of a run's values (one per step, in step order) over ``window`` (a key of :data:`WINDOWS`).

    Values that are not finite (NaN where a step did not log the metric, inf) are left out of the mean; a window
    without a finite value gives NaN (no warning). ``steps``: the values' step numbers, for ``auc`` (default: one
    apart).
    """
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {list(WINDOWS)}, got {window!r}")
    values = np.asarray(values, dtype=float)
    if window == "last_minus_first":
        return window_mean(values, "last_20pct") - window_mean(values, "first_20pct")
    if window in ("final", "auc"):
        logged = np.flatnonzero(np.isfinite(values))
        if window == "final":
            return float(values[logged[-1]]) if len(logged) else float("nan")
        at = (np.arange(len(values)) if steps is None else np.asarray(steps, dtype=float))[logged]
        span = at[-1] - at[0] if len(at) else 0
        return float(np.trapezoid(values[logged], at) / span) if span > 0 else float("nan")
    k = max(1, len(values) // 5)
    part = {"first_20pct": values[:k], "last_20pct": values[-k:], "all": values}[window]
    part = part[np.isfinite(part)]
    return float(part.mean()) if len(part) else float("nan")


def number(value) -> str:
    """A summary value as the tables show it: whole numbers as integers, other floats to 3 significant digits,
    never in exponent form."""
    if not isinstance(value, float) or not np.isfinite(value):
        return str(value)
    if value.is_integer() or abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) < 1e-4:  # where .3g would switch to exponent form: the same 3 digits, written out
        return f"{value:.{min(2 - math.floor(math.log10(abs(value))), 20)}f}"
    return f"{value:.3g}"


def markdown_table(frame: pd.DataFrame) -> str:
    """``frame`` as a Markdown table, values as :func:`number` shows them."""
    cell = number
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


def heldout_success(run: pd.DataFrame) -> dict[str, float]:
    """``heldout_success_last`` and ``heldout_success_auc`` (module docstring) of one wide run history (a line per
    step, a column per metric); empty when the run logged no ``val-core/*/reward/mean@*``."""
    column = next((c for c in sorted(run.columns) if fnmatchcase(str(c), VAL_CORE_REWARD)), None)
    curve = run[column].dropna().sort_index() if column is not None else pd.Series(dtype=float)
    if curve.empty:
        return {}
    values, steps = curve.to_numpy(dtype=float), curve.index.to_numpy(dtype=float)
    return {
        "heldout_success_last": window_mean(values, "final"),
        "heldout_success_auc": window_mean(values, "auc", steps=steps),
    }


def _run_summary(run: pd.DataFrame) -> dict[str, float]:
    heldout = heldout_success(run)
    # training steps only: a held-out evaluation before training (step 0) logs nothing else
    trained = [c for c in run.columns if not str(c).startswith(VALIDATION_METRICS)]
    run = run.loc[run[trained].notna().any(axis=1)] if trained else run

    def column(metric: str) -> pd.Series:
        return run[metric] if metric in run else pd.Series(np.nan, index=run.index)

    out: dict[str, float] = {"steps": float(len(run))}
    if SUCCESS in run:
        out["success_first_20pct"], out["success_last_20pct"] = success_first_last(run[SUCCESS])
    out["rows_per_rollout"] = float((column(N_SAMPLE) / column(N_ROLLOUTS)).mean())
    out["rows_trained_per_step"] = float(column(N_SAMPLE_TRAINED).mean())
    out["dropped_same_reward"] = float(column(N_SAMPLE_DROPPED_SAME_REWARD).sum())
    out["dropped_random"] = float(column(N_SAMPLE_DROPPED_RANDOM).sum())
    out["updates_per_step"] = float(column(PPO_UPDATES).mean())
    return {**out, **heldout}
