"""Settings across seeds: per setting, metric and step, the mean and a labelled band.

Input is the long-form table of :mod:`agl_lab.curves.history` / :func:`agl_lab.run_sweep` (``setting, seed,
step, metric, value``). For each setting, metric and step the seeds are aggregated into a mean and a band —
``std`` (mean ± one standard deviation across seeds) or ``ci95`` (a 95% bootstrap confidence interval of the
mean, resampling seeds). The figures that draw them are :mod:`agl_lab.curves.figures`. Notebook:
``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

__all__ = ["BAND_LABELS", "Band", "bands"]

Band = Literal["std", "ci95"]
BAND_LABELS = {"std": "mean ± 1 std across seeds", "ci95": "mean, 95% bootstrap CI across seeds"}


def bands(
    table: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    band: Band = "std",
    smooth: int = 1,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per setting, metric and step: ``mean``, ``low``, ``high`` and ``n_seeds``.

    ``smooth`` > 1 first applies a trailing rolling mean of that many steps to each run (per seed).
    """
    if band not in BAND_LABELS:
        raise ValueError(f"band must be one of {list(BAND_LABELS)}, got {band!r}")
    if smooth < 1:
        raise ValueError(f"smooth must be a window of >= 1 steps, got {smooth}")
    data = table if metrics is None else table[table.metric.isin(list(metrics))]
    if data.empty:
        raise ValueError(f"no rows for metrics {list(metrics or [])}: the table has {sorted(set(table.metric))[:20]}")
    data = data.sort_values("step")
    if smooth > 1:
        runs = data.groupby(["setting", "seed", "run", "metric"], dropna=False)["value"]
        data = data.assign(value=runs.transform(lambda v: v.rolling(smooth, min_periods=1).mean()))
    groups = data.groupby(["setting", "metric", "step"], dropna=False)["value"]
    out = groups.agg(mean="mean", n_seeds="count").reset_index()
    if band == "std":
        spread = groups.std(ddof=1).fillna(0.0).to_numpy()
        out["low"], out["high"] = out["mean"] - spread, out["mean"] + spread
    else:
        rng = np.random.default_rng(seed)
        intervals = [_bootstrap(values.to_numpy(), rng, n_boot) for _, values in groups]
        out["low"], out["high"] = np.array(intervals).T if intervals else ([], [])
    return out[["setting", "metric", "step", "mean", "low", "high", "n_seeds"]]


def _bootstrap(values: np.ndarray, rng: np.random.Generator, n_boot: int) -> tuple[float, float]:
    if len(values) < 2:
        return float(values.mean()), float(values.mean())
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)  # (n_boot,)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)
