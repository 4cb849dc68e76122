"""Settings across seeds: per setting, metric and step, the mean and a labelled band, with the number of seeds.

Input is the long-form table of :mod:`agl_lab.curves.history` / :func:`agl_lab.run_sweep` (``setting, seed,
step, metric, value``). For each setting, metric and step the seeds are aggregated into a mean and a band:

* ``ci95`` — the 95% confidence interval of the mean from Student's t: ``mean ± t(0.975, n−1) · s / √n``. Honest
  for few seeds: with 3 seeds ``t`` is 4.30, where a bootstrap over 3 values (or ± 1.96 standard errors) gives
  intervals that cover the true mean far less often than 95%. One seed has no interval (the band is the line).
* ``std`` — mean ± one standard deviation across seeds (the spread of single runs, not of the mean).
* ``seeds`` — no band: each seed drawn as its own thin line (the honest choice for two or three seeds).

Both intervals are cut at the metric's physical bounds (:func:`agl_lab.curves.bounds.metric_bounds`: counts at 0,
rates at 0 and 1): the true mean lies within them, so the cut interval covers it exactly as often as the uncut one,
and a band never shows a negative count or a success rate above 1. The labels say so.

``n_seeds`` goes with every value, and the figures (:mod:`agl_lab.curves.figures`) print it in every legend.
Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from agl_lab.curves.band_kinds import BAND_LABELS, Band
from agl_lab.curves.bounds import metric_bounds

__all__ = ["BAND_LABELS", "Band", "bands", "smoothed"]


def bands(
    table: pd.DataFrame, metrics: Sequence[str] | None = None, *, band: Band = "std", smooth: int = 1
) -> pd.DataFrame:
    """Per setting, metric and step: ``mean``, ``low``, ``high`` and ``n_seeds`` (``low == high == mean`` for
    ``seeds``, and wherever one seed leaves no interval); ``low``/``high`` within the metric's bounds.

    ``smooth`` > 1 first applies a trailing rolling mean of that many steps to each run (per seed).
    """
    if band not in BAND_LABELS:
        raise ValueError(f"band must be one of {list(BAND_LABELS)}, got {band!r}")
    data = smoothed(table, metrics, smooth=smooth)
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


def smoothed(table: pd.DataFrame, metrics: Sequence[str] | None = None, *, smooth: int = 1) -> pd.DataFrame:
    """The table's rows for ``metrics`` (all when None), sorted by step, each run's values a trailing mean of
    ``smooth`` steps."""
    if smooth < 1:
        raise ValueError(f"smooth must be a window of >= 1 steps, got {smooth}")
    data = table if metrics is None else table[table.metric.isin(list(metrics))]
    if data.empty:
        raise ValueError(f"no rows for metrics {list(metrics or [])}: the table has {sorted(set(table.metric))[:20]}")
    data = data.sort_values("step")
    if smooth > 1:
        runs = data.groupby(["setting", "seed", "run", "metric"], dropna=False)["value"]
        data = data.assign(value=runs.transform(lambda v: v.rolling(smooth, min_periods=1).mean()))
    return data
