"""Settings across seeds: per setting, metric and step, the mean and a labelled band, with the number of seeds.

Input is the long-form table of :mod:`agl_lab.curves.history` / :func:`agl_lab.run_sweep` (``setting, seed,
step, metric, value``). For each setting, metric and step the seeds are aggregated into a mean and a band:

* ``ci95`` — the 95% confidence interval of the mean from Student's t: ``mean ± t(0.975, n−1) · s / √n``. Honest
  for few seeds: with 3 seeds ``t`` is 4.30, where a bootstrap over 3 values (or ± 1.96 standard errors) gives
  intervals that cover the true mean far less often than 95%. One seed has no interval (the band is the line).
* ``std`` — mean ± one standard deviation across seeds (the spread of single runs, not of the mean).
* ``seeds`` — no band: each seed drawn as its own thin line (the honest choice for two or three seeds).

Both intervals are cut at the metric's physical bounds (:func:`agl_lab.curves.metrics.metric_bounds`: counts at 0,
rates at 0 and 1): the true mean lies within them, so the cut interval covers it exactly as often as the uncut one,
and a band never shows a negative count or a success rate above 1. The labels say so.

Smoothing is TensorBoard's (and W&B's "time weighted EMA" without the time): the debiased exponential moving
average of each run's values in step order, ``s_t = Σ_i w^i x_(t−i) / Σ_i w^i`` over the points so far, with
``smoothing`` = w in [0, 1) (0: the raw values). It is pandas' ``ewm(alpha=1 − w, adjust=True)``: TensorBoard's
loop ``last = w·last + (1 − w)·x; s = last / (1 − w^n)`` gives the same numbers (the tests hold them equal). Like
TensorBoard it weighs points, not the distance between their steps.

``n_seeds`` goes with every value, and the figures (:mod:`agl_lab.curves.figures`) print it in every legend.
Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from agl_lab.curves.band_kinds import BAND_LABELS, Band
from agl_lab.curves.metrics import metric_bounds

__all__ = ["BAND_LABELS", "Band", "band_stats", "bands", "group_same_curves", "same_curve_groups", "smoothed"]


def bands(
    table: pd.DataFrame, metrics: Sequence[str] | None = None, *, band: Band = "std", smoothing: float = 0.0
) -> pd.DataFrame:
    """Per setting, metric and step: ``mean``, ``low``, ``high`` and ``n_seeds`` (``low == high == mean`` for
    ``seeds``, and wherever one seed leaves no interval); ``low``/``high`` within the metric's bounds.

    ``smoothing`` > 0 first smooths each run (per seed) with the debiased EMA of :func:`smoothed`.
    """
    _check_band(band)
    return band_stats(smoothed(table, metrics, smoothing=smoothing), band=band)


def band_stats(data: pd.DataFrame, *, band: Band = "std") -> pd.DataFrame:
    """:func:`bands` of rows already smoothed (or as logged): ``data`` as :func:`smoothed` returns it."""
    _check_band(band)
    groups = data.groupby(["setting", "metric", "step"], dropna=False)["value"]
    out = groups.agg(mean="mean", n_seeds="count").reset_index()
    spread = groups.std(ddof=1).fillna(0.0).to_numpy()  # (points,): 0 where one seed
    if band == "ci95":
        n = out["n_seeds"].to_numpy()
        t = student_t.ppf(0.975, np.maximum(n - 1, 1))  # (points,); one seed has no interval (spread 0 there)
        spread = spread / np.sqrt(n) * np.where(n > 1, t, 0.0)
    elif band == "seeds":
        spread = np.zeros(len(out))
    bounds = {metric: metric_bounds(metric) for metric in out["metric"].unique()}
    low, high = (out["metric"].map({m: b[i] for m, b in bounds.items()}).to_numpy(float) for i in (0, 1))  # (points,)
    out["low"] = np.maximum(out["mean"] - spread, low)
    out["high"] = np.minimum(out["mean"] + spread, high)
    return out[["setting", "metric", "step", "mean", "low", "high", "n_seeds"]]


def _check_band(band: str) -> None:
    if band not in BAND_LABELS:
        raise ValueError(f"band must be one of {list(BAND_LABELS)}, got {band!r}")


def smoothed(table: pd.DataFrame, metrics: Sequence[str] | None = None, *, smoothing: float = 0.0) -> pd.DataFrame:
    """The table's rows for ``metrics`` (all when None), sorted by step, each run's values smoothed with the debiased
    EMA of weight ``smoothing`` in [0, 1) (0: as logged)."""
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1) (0: raw values, 0.6: TensorBoard's default), got {smoothing}")
    data = table if metrics is None else table[table.metric.isin(list(metrics))]
    if data.empty:
        raise ValueError(f"no rows for metrics {list(metrics or [])}: the table has {sorted(set(table.metric))[:20]}")
    data = data.sort_values("step", kind="stable").reset_index(drop=True)  # a unique index to align on
    if smoothing > 0:
        keys = ["setting", "seed", "run", "metric"]
        ema = data.groupby(keys, dropna=False, sort=False)["value"].ewm(alpha=1.0 - smoothing, adjust=True).mean()
        data = data.assign(value=ema.reset_index(level=list(range(len(keys))), drop=True))
    return data


def same_curve_groups(stats: pd.DataFrame, order: Sequence[str]) -> list[list[str]]:
    """The settings of ``stats`` (one metric's :func:`bands`) grouped by identical curves (step, mean and band, step
    by step), in ``order``: a curve several settings share (the rollouts per step, say) is drawn once."""
    curves = {s: part.sort_values("step")[["step", "mean", "low", "high"]].to_numpy(float)
              for s, part in stats.groupby("setting", sort=False)}  # fmt: skip
    return group_same_curves(curves, order)


def group_same_curves(curves: Mapping[Any, np.ndarray], order: Sequence[str]) -> list[list[str]]:
    """:func:`same_curve_groups` of curves already apart: setting → (steps, 4) step, mean, low, high in step order."""
    groups: list[list[str]] = []
    for name in (s for s in order if s in curves):
        same = next((g for g in groups if _same(curves[g[0]], curves[name])), None)
        if same:
            same.append(name)
        else:
            groups.append([name])
    return groups


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=0, atol=1e-12)
