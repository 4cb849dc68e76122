"""Effects that survive seeds: does a setting change training, by how much, and how many seeds would settle it?

:func:`compare_settings` (``agl_lab.compare_settings``) reads a sweep's long-form table (``setting, seed, step,
metric, value``; :func:`agl_lab.run_sweep`, :mod:`agl_lab.curves.history`) and reduces every run to one number:
the mean of ``metric`` over a window of its steps (:data:`agl_lab.curves.summary.WINDOWS`, the summary's own
windows). Runs are paired by seed (same seed, other setting: the same task draws and initial weights), and per
setting other than ``baseline`` one row says:

==============  ==================================================================================================
``n_pairs``     seeds with a value for both the setting and the baseline
``mean_diff``   mean over pairs of (setting − baseline); ``sd_diff`` their standard deviation (ddof 1)
``ci_low/high`` the 95% Student-t interval of the mean difference (``scipy.stats.ttest_rel``'s interval)
``p_value``     two-sided paired t-test (``scipy.stats.ttest_rel``)
``seeds_needed`` pairs for 80% power at α = 0.05 if the true effect were the observed one
                (``statsmodels`` ``TTestPower().solve_power``; at least 2): a guide to how many seeds settle it
==============  ==================================================================================================

Deliberate cases, each pinned in tests/test_effects.py:

* **Unpaired seeds** (a value for one of the two only: a failed cell, a seed run for one setting) are left out of
  the pairs, never paired with another seed; they are listed in ``effects.attrs["unpaired_seeds"]`` (setting →
  seeds) and an :class:`UnpairedSeedsWarning` names them. Runs without a seed cannot be paired and count there too.
* **NaN and inf**: a run's window mean uses its finite values only; a run with none in the window has no value,
  so its seed is unpaired (above).
* **Fewer than 2 pairs**: ``mean_diff`` is the one difference (NaN without a pair); sd, interval, p and
  ``seeds_needed`` are NaN and the verdict says "need ≥ 2 seeds per setting".
* **Zero variance** (every pair differs by the same d): scipy's interval is [d, d]; p is 0 for d ≠ 0 (any two
  pairs show it: ``seeds_needed`` 2) and NaN for d = 0 (scipy's 0/0; the verdict says no pair differs, and
  ``seeds_needed`` is inf: no number of pairs resolves an effect of 0). Differences that spread around a mean of
  exactly 0 get inf too.

``method`` picks the statistics (:data:`METHODS`), and the table's last column ``method`` says which produced it:
``"paired_t"`` (the above) or ``"rliable"`` (:mod:`agl_lab.curves.rliable_stats`: per setting its IQM with
stratified-bootstrap 95% intervals, ``mean_diff`` = IQM difference with its interval, and the probability of
improvement over the baseline with its interval; extra columns after ``method``; rliable recommends ≥ 5 runs and
warns below). Both read the same per-run values (:func:`run_values`) and the same seeds.
:mod:`agl_lab.curves.verdicts` turns rows into lines and writes ``effects.csv`` and ``effects.md``; ``agl-lab
sweep``/``demo`` print and save them; the forest plot is :mod:`agl_lab.curves.forest`.
Notebooks: ``04_reproduce_curves``, ``05_reproduce_effects``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agl_lab.config.settings import DEMO_BASELINE
from agl_lab.core.keys import VALIDATION_METRICS
from agl_lab.curves.rliable_stats import rliable_compare
from agl_lab.curves.summary import SUCCESS, WINDOWS, window_mean

__all__ = [
    "ALPHA",
    "EFFECT_COLUMNS",
    "METHODS",
    "NEED_TWO_SEEDS",
    "POWER",
    "UnpairedSeedsWarning",
    "compare_metrics",
    "compare_settings",
    "default_baseline",
    "one_sample",
    "pairs_needed",
    "run_values",
]

EFFECT_COLUMNS = [
    "setting", "baseline", "metric", "n_pairs", "mean_diff", "sd_diff", "ci_low", "ci_high", "p_value", "seeds_needed",
]  # fmt: skip
ALPHA = 0.05  # two-sided; the interval is the (1 − ALPHA) one
POWER = 0.8  # for seeds_needed
NEED_TWO_SEEDS = "need ≥ 2 seeds per setting"


class UnpairedSeedsWarning(UserWarning):
    """Some seeds have a value for a setting or its baseline but not both: they were left out of the pairs."""


@dataclass(frozen=True)
class Method:
    """One way to compare a setting with the baseline from the per-run values (indexed by seed; NaN = no value)."""

    compare: Callable[[pd.Series, pd.Series], dict[str, float]]  # (setting, baseline) -> the statistics columns
    label: str  # how effects.md names it
    heading: str  # what the CLI's heading and the forest plot's title say of it


def compare_settings(
    table: pd.DataFrame,
    *,
    baseline: str,
    metric: str = SUCCESS,
    window: str = "last_20pct",
    method: str = "paired_t",
) -> pd.DataFrame:
    """One row per setting other than ``baseline`` (in the table's order), columns :data:`EFFECT_COLUMNS`.

    ``attrs``: ``window``, ``method`` and ``unpaired_seeds`` (setting → seeds left out); the last column ``method``
    names the statistics (``rliable`` adds its own columns after it). An unknown ``baseline``, ``metric``, ``window``
    or ``method`` is a ValueError naming the choices.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    values = run_values(table, metric=metric, window=window)
    if baseline not in values.columns:
        raise ValueError(f"baseline {baseline!r} is not a setting of the table; choose one of {list(values.columns)}")
    rows, unpaired = [], {}
    for setting in values.columns.drop(baseline):
        pair = values[[setting, baseline]]
        seedless = values.attrs["seedless"]
        left_out = pair.index[pair.notna().sum(axis=1) == 1].tolist()
        left_out += seedless.get(setting, []) + seedless.get(baseline, [])
        if left_out:
            unpaired[setting] = left_out
        statistics = METHODS[method].compare(pair[setting], pair[baseline])
        rows.append({"setting": setting, "baseline": baseline, "metric": metric, **statistics, "method": method})
    extra = [c for c in (rows[0] if rows else {}) if c not in EFFECT_COLUMNS and c != "method"]
    effects = pd.DataFrame(rows, columns=[*EFFECT_COLUMNS, "method", *extra])
    effects.attrs.update(window=window, method=method, unpaired_seeds=unpaired)
    if unpaired:
        named = "; ".join(f"{setting}: {seeds}" for setting, seeds in unpaired.items())
        warnings.warn(
            f"compare_settings left out seeds with a value of {metric} ({window}) for only one of a setting and "
            f"{baseline!r} (never paired with another seed): {named}",
            UnpairedSeedsWarning,
            stacklevel=2,
        )
    return effects


def compare_metrics(
    table: pd.DataFrame,
    *,
    baseline: str,
    metrics: Sequence[str],
    window: str = "last_20pct",
    method: str = "paired_t",
) -> pd.DataFrame:
    """:func:`compare_settings` for each of ``metrics``, one frame (the forest plot draws one panel per metric);
    ``attrs["unpaired_seeds"]`` is keyed ``"<setting>, <metric>"``."""
    if isinstance(metrics, str) or not list(metrics):
        raise ValueError(f"metrics must name at least one metric (a list of names), got {metrics!r}")
    frames = [compare_settings(table, baseline=baseline, metric=m, window=window, method=method) for m in metrics]
    effects = pd.concat(frames, ignore_index=True)
    unpaired = {f"{s}, {f.metric.iloc[0]}": seeds for f in frames for s, seeds in f.attrs["unpaired_seeds"].items()}
    effects.attrs.update(window=window, method=method, unpaired_seeds=unpaired)
    return effects


def run_values(table: pd.DataFrame, *, metric: str, window: str) -> pd.DataFrame:
    """Each run's mean of ``metric`` over ``window`` of its steps: seeds × settings (NaN: no value).

    A run's steps are every step it logged (any metric), as in the summary. ``attrs["seedless"]``: setting → runs
    without a seed (left out: nothing to pair them by).
    """
    if not isinstance(table, pd.DataFrame):
        raise TypeError(
            "table must be a long-form history, a pandas DataFrame with setting, seed, step, metric and value "
            f"columns (agl_lab.run_sweep(...).table, read_history(...)), got {type(table).__name__}"
        )
    missing = {"setting", "seed", "step", "metric", "value"} - set(table.columns)
    if missing:
        raise ValueError(f"the table lacks columns {sorted(missing)}: give a long-form history (agl_lab.run_sweep)")
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {list(WINDOWS)}, got {window!r}")
    present = table["metric"].unique()
    if metric not in present:
        raise ValueError(f"metric {metric!r} is not in the table; choose one of {sorted(present)}")
    run_key = table["run"] if "run" in table else table["setting"].astype(str) + "/" + table["seed"].astype(str)
    settings = list(dict.fromkeys(table["setting"]))
    values: dict[tuple, float] = {}
    seedless: dict[str, list[str]] = {}
    for (setting, seed, run), part in table.groupby(["setting", "seed", run_key], sort=False, dropna=False):
        if pd.isna(seed):
            seedless.setdefault(setting, []).append(f"run {run} (no seed)")
            continue
        if (setting, seed) in values:
            raise ValueError(
                f"setting {setting!r} has several runs with seed {seed}: pairing by seed needs one run per setting "
                "and seed (read each source into its own table)"
            )
        # the run's training steps, and those at which the metric was logged: a held-out evaluation's step 0 holds no
        # training metric, so a training metric's windows start at step 1 whether the run evaluated or not
        counted = ~part["metric"].str.startswith(VALIDATION_METRICS) | (part["metric"] == metric)
        steps = np.sort(part.loc[counted, "step"].dropna().unique())
        series = part[part["metric"] == metric].groupby("step")["value"].mean().reindex(steps)
        values[(setting, seed)] = window_mean(series.to_numpy(dtype=float), window, steps=steps)
    frame = pd.Series(values, dtype=float).unstack(0) if values else pd.DataFrame()
    frame = frame.reindex(columns=settings)
    frame.index = frame.index.astype("int64") if len(frame) else frame.index
    frame.attrs["seedless"] = {setting: runs for setting, runs in seedless.items() if setting in settings}
    return frame


def default_baseline(settings: Sequence[str]) -> str:
    """The baseline a sweep compares against when none is given: the demo's (``both_off``, plain verl) when the
    sweep has it, else its first setting."""
    settings = list(settings)
    if not settings:
        raise ValueError("no settings to choose a baseline from")
    return DEMO_BASELINE if DEMO_BASELINE in settings else settings[0]


def one_sample(values: pd.Series | np.ndarray) -> dict[str, float]:
    """The statistics columns for one setting's own per-run values against 0 (``scipy.stats.ttest_1samp``): a
    change within runs (window ``last_minus_first``) tested on its own. ``n_pairs`` counts the runs."""
    from scipy.stats import ttest_1samp

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return _t_statistics(v, lambda: ttest_1samp(v, 0.0))


def _paired_t(setting: pd.Series | np.ndarray, baseline: pd.Series | np.ndarray) -> dict[str, float]:
    from scipy.stats import ttest_rel

    a, b = np.asarray(setting, dtype=float), np.asarray(baseline, dtype=float)
    both = np.isfinite(a) & np.isfinite(b)  # the pairs; compare_settings reports the rest
    a, b = a[both], b[both]
    return _t_statistics(a - b, lambda: ttest_rel(a, b))


def _t_statistics(diffs: np.ndarray, test: Callable) -> dict[str, float]:
    """n, mean and sd of ``diffs`` (pairs,), and the interval and p of scipy's ``test()`` on them (2 or more)."""
    n = len(diffs)
    nan = float("nan")
    out = {"n_pairs": n, "mean_diff": float(diffs.mean()) if n else nan, "sd_diff": nan}
    out |= {"ci_low": nan, "ci_high": nan, "p_value": nan, "seeds_needed": nan}
    if n < 2:
        return out
    out["sd_diff"] = float(diffs.std(ddof=1))
    with warnings.catch_warnings():
        if out["sd_diff"] == 0:  # deliberate (module docstring): scipy's "catastrophic cancellation" is expected here
            warnings.simplefilter("ignore", RuntimeWarning)
        # nearly identical values (a metric at 1.0 or 1e-10 in every run) are a result, not a fault: the interval
        # says how close they are, and scipy's note that their moments lose precision would only alarm
        warnings.filterwarnings("ignore", "Precision loss occurred in moment calculation", RuntimeWarning)
        result = test()
        interval = result.confidence_interval(confidence_level=1 - ALPHA)
    out |= {"ci_low": float(interval.low), "ci_high": float(interval.high), "p_value": float(result.pvalue)}
    out["seeds_needed"] = pairs_needed(out["mean_diff"], out["sd_diff"])
    return out


def pairs_needed(mean: float, sd: float) -> float:
    """Pairs for POWER at ALPHA (two-sided) if the true standardized effect were ``|mean| / sd``; at least 2. The
    ``seeds_needed`` column asks it for the observed effect; a study (:mod:`agl_lab.studies.reproduce`) for the
    smallest effect it states."""
    from statsmodels.stats.power import TTestPower
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    if mean == 0:
        return math.inf
    if sd == 0:
        return 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        nobs = TTestPower().solve_power(effect_size=abs(mean) / sd, alpha=ALPHA, power=POWER, alternative="two-sided")
    if not np.isfinite(nobs):  # statsmodels' root finder gives up above an effect of ~10 sd: 2 pairs are plenty
        return 2.0
    return float(max(2, math.ceil(float(nobs))))


METHODS: dict[str, Method] = {
    "paired_t": Method(
        _paired_t,
        "Paired by seed: per seed the setting's run minus the baseline's; two-sided paired t-test and 95% t-interval "
        "of the differences (scipy.stats.ttest_rel); seeds_needed = pairs for 80% power at the observed effect "
        "(statsmodels TTestPower).",
        "paired by seed, 95% t-interval",
    ),
    "rliable": Method(
        rliable_compare,
        "rliable (Agarwal et al. 2021): per setting the interquartile mean (IQM) over its runs with a "
        "stratified-bootstrap 95% interval; mean_diff = IQM(setting) − IQM(baseline) with rliable's two-sample "
        "bootstrap 95% interval; poi = probability of improvement P(setting's run > baseline's run) with its 95% "
        "interval; no p-value or power. rliable recommends 5 or more runs per setting.",
        "rliable: IQM difference and probability of improvement, stratified-bootstrap 95% intervals",
    ),
}
