"""``compare_settings(..., method="rliable")``: rliable's statistics of a setting against the baseline, over runs.

Agarwal et al. 2021 (*Deep RL at the Edge of the Statistical Precipice*, the ``rliable`` package) recommend, for few
runs, the interquartile mean (IQM: the mean of the middle 50% of runs) with stratified-bootstrap confidence intervals,
and the probability of improvement P(X > Y) (Mann-Whitney U ÷ (m·n)) with its own interval. Per setting the row holds:

=====================================  ============================================================================
``iqm``, ``iqm_low``, ``iqm_high``     the setting's IQM over its runs and rliable's 95% interval (stratified
                                       bootstrap over runs; one task: the metric)
``baseline_iqm`` (+ ``_low``/``_high``) the same for the baseline
``mean_diff``, ``ci_low``, ``ci_high``  IQM(setting) − IQM(baseline), each resampled independently (rliable's
                                       two-sample bootstrap) and its 95% interval
``poi``, ``poi_low``, ``poi_high``      P(a setting's run beats a baseline's run) and its 95% interval
``sd_diff``, ``p_value``, ``seeds_needed`` NaN: rliable gives intervals, not tests or power
=====================================  ============================================================================

Runs are the seeds both settings have (compare_settings pairs them, so both methods read the same runs); rliable
needs no pairing. Fewer than 2: NaN, and the verdict says "need ≥ 2 seeds per setting"; fewer than
:data:`RECOMMENDED_RUNS` (5): the verdict says rliable recommends 5 or more. The bootstrap draws from numpy's global
generator (rliable's own resampling does), so it runs seeded with :data:`SEED` and the global state is put back.

Installing it here: rliable 1.2.0 (PyPI's newest, as its repository's head) requires ``arch<8``. arch 8.0 refuses the
``random_state`` keyword rliable passes (it takes it for data: ``TypeError: Only NumPy arrays and pandas DataFrames
...``), and arch 7.2, the newest below 8, fails to import under pandas 3 (its ``arch.univariate`` calls pandas'
private ``deprecate_kwarg`` with the pandas-2 signature: ``TypeError: deprecate_kwarg() missing 1 required positional
argument: 'new_arg_name'``). rliable needs only ``arch.bootstrap``, which imports under pandas 3; so :func:`_rliable`
imports arch's package the normal way and, only when that fails for this reason, loads ``arch`` as a bare package
(its subpackages, not its ``__init__`` and so not ``arch.univariate``). rliable's own functions then run unchanged.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types
import warnings
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["RECOMMENDED_RUNS", "REPS", "SEED", "TooFewRunsWarning", "rliable_compare"]

REPS = 2000  # bootstrap resamples per interval (rliable's default is 50,000: ~25 s per setting on a laptop core)
SEED = 0
RECOMMENDED_RUNS = 5  # Agarwal et al. 2021: IQM and its intervals are meant for 5 runs or more, ideally 10+


class TooFewRunsWarning(UserWarning):
    """rliable's statistics were computed on fewer runs than it recommends."""


def rliable_compare(setting: pd.Series | np.ndarray, baseline: pd.Series | np.ndarray) -> dict[str, float]:
    """The statistics columns (module docstring) for one setting's runs against the baseline's."""
    a, b = np.asarray(setting, dtype=float), np.asarray(baseline, dtype=float)
    both = np.isfinite(a) & np.isfinite(b)  # the seeds both have; compare_settings reports the rest
    a, b = a[both], b[both]
    n = len(a)
    nan = float("nan")
    out: dict[str, float] = {"n_pairs": n, "mean_diff": nan, "sd_diff": nan, "ci_low": nan, "ci_high": nan}
    out |= {"p_value": nan, "seeds_needed": nan}
    out |= dict.fromkeys(("iqm", "iqm_low", "iqm_high", "baseline_iqm", "baseline_iqm_low", "baseline_iqm_high"), nan)
    out |= dict.fromkeys(("poi", "poi_low", "poi_high"), nan)
    if n == 1:
        out["mean_diff"] = float(a[0] - b[0])
    if n < 2:
        return out
    if n < RECOMMENDED_RUNS:
        warnings.warn(
            f"rliable's IQM and probability of improvement on {n} runs per setting: it recommends "
            f"{RECOMMENDED_RUNS} or more",
            TooFewRunsWarning,
            stacklevel=3,
        )
    out |= _estimates(a.tobytes(), b.tobytes())
    return out


@functools.lru_cache(maxsize=256)
def _estimates(setting: bytes, baseline: bytes) -> dict[str, float]:
    """rliable's points and intervals for two runs' arrays (float64 bytes). Cached: the bootstrap is seeded, so the
    same runs give the same numbers, and a reproduction's report asks for each setting's against the baseline once
    per check that shows it (a few dozen times over its rounds, each seconds of bootstrap)."""
    a, b = np.frombuffer(setting).copy(), np.frombuffer(baseline).copy()
    out: dict[str, float] = {}
    library, metrics = _rliable()
    x, y = a[:, None], b[:, None]  # (runs, 1 task)

    def iqm(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores)])

    def iqm_difference(scores_x: np.ndarray, scores_y: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores_x) - metrics.aggregate_iqm(scores_y)])

    state = np.random.get_state()
    try:
        np.random.seed(SEED)
        points, intervals = library.get_interval_estimates({"setting": x, "baseline": y}, iqm, reps=REPS)
        diff, diff_ci = library.get_interval_estimates({"diff": (x, y)}, iqm_difference, reps=REPS)
        poi, poi_ci = library.get_interval_estimates({"poi": (x, y)}, metrics.probability_of_improvement, reps=REPS)
    finally:
        np.random.set_state(state)
    for prefix, key in (("", "setting"), ("baseline_", "baseline")):
        out[f"{prefix}iqm"] = float(np.ravel(points[key])[0])
        out[f"{prefix}iqm_low"], out[f"{prefix}iqm_high"] = map(float, np.ravel(intervals[key]))
    out["mean_diff"] = float(np.ravel(diff["diff"])[0])
    out["ci_low"], out["ci_high"] = map(float, np.ravel(diff_ci["diff"]))
    out["poi"] = float(poi["poi"])
    out["poi_low"], out["poi_high"] = map(float, np.ravel(poi_ci["poi"]))
    return out


def _rliable() -> tuple[Any, Any]:
    """rliable's ``library`` and ``metrics`` modules (module docstring: why arch may load as a bare package)."""
    try:
        importlib.import_module("arch.bootstrap")
    except TypeError as exc:
        if "deprecate_kwarg" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "arch" or m.startswith("arch.")]:
            del sys.modules[name]  # the half-imported package
        spec = importlib.util.find_spec("arch")
        bare = types.ModuleType("arch")
        bare.__path__ = list(spec.submodule_search_locations)  # subpackages import; arch/__init__.py does not run
        bare.__spec__ = spec
        sys.modules["arch"] = bare
    except ImportError as exc:
        raise ImportError(
            "method='rliable' needs the rliable package: pip install rliable (agl_lab's pyproject lists it)"
        ) from exc
    return importlib.import_module("rliable.library"), importlib.import_module("rliable.metrics")
