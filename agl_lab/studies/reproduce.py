"""Running and judging the prepared reproductions of reported effects (:mod:`agl_lab.studies.experiments`).

A check passes when its 95% interval lies on the expected side of 0 (a paired comparison with another setting, or
the setting's own runs against 0), or, for ``expect="zero"``, when the metric is within :data:`ZERO_TOL` of 0 at
every step of every run. "Reproduced" means every check passed; a check that did not is reported with its numbers,
never tuned until it passes.

:func:`run_reproduction` runs the settings over a pilot of seeds (Ray in parallel, :func:`agl_lab.run_sweep`), asks
each unresolved check how many pairs would resolve it (``seeds_needed``), extends once to the largest (capped at
``max_seeds``; one extension, so the seed count is not chosen by peeking at p), judges the checks on every seed and
writes ``report.md`` and figures (:mod:`agl_lab.studies.reproduce_report`) and the record that redraws them without
training (:mod:`agl_lab.studies.study_record`: :func:`redraw_reproduction`, ``agl-lab reproduce NAME --report-only``).

A study (an experiment with a ``smallest_effect`` and no claim) asks instead how many pairs a paired t-test needs to
detect that effect at 80% power, given the spread of the pilot's differences (the largest over its comparisons); each
comparison is then reported as resolved (its interval excludes 0) or not, beside that count. ``agl-lab reproduce
NAME``; notebook ``notebooks/05_reproduce_effects.ipynb``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from agl_lab.curves.effects import compare_settings, one_sample, pairs_needed, run_values
from agl_lab.curves.rliable_stats import TooFewRunsWarning
from agl_lab.curves.verdicts import verdict
from agl_lab.studies.experiments import EXPERIMENTS, Check, Experiment
from agl_lab.studies.study_record import machine_meta, packaged_record, read_record, write_record
from agl_lab.studies.sweep import SweepResult, run_sweep, shared_ray

__all__ = ["ZERO_TOL", "Reproduction", "judge", "redraw_reproduction", "run_reproduction", "seeds_asked"]
__all__ += ["seeds_for_effect"]

ZERO_TOL = 1e-9  # |value| at or below this counts as 0 (float rounding of a mass share is ~1e-16)


@dataclass
class Reproduction:
    experiment: Experiment
    sweep: SweepResult
    checks: pd.DataFrame  # one line per check: the effects columns + window, expect, verdict, passed, outcome
    shown: pd.DataFrame  # the same for the shown metrics (passed: NaN, outcome: "")
    pilot_seeds: int
    seeds_asked: float | None  # the largest seeds_needed of the pilot's unresolved checks (None: none unresolved)
    max_seeds: int
    wall_s: float  # this call's wall time
    resumed_runs: int = 0  # runs finished before this call (skipped: rerunning into the same folder)
    figures: dict[str, Path] = field(default_factory=dict)
    # date, commit, machine, versions, which policy played which task, the seed plan: the record's meta.json
    meta: dict = field(default_factory=dict)

    @property
    def is_study(self) -> bool:
        """A study states no claim: its comparisons are measured against its smallest effect."""
        return self.experiment.smallest_effect is not None and not len(self.experiment.checks)

    @property
    def reproduced(self) -> bool:
        return bool(len(self.checks)) and bool(self.checks["passed"].all())

    @property
    def seeds(self) -> list[int]:
        return sorted(int(s) for s in self.sweep.table["seed"].dropna().unique())


def run_reproduction(
    name: str,
    *,
    pilot_seeds: int = 3,
    max_seeds: int = 10,
    out_dir: str | Path | None = None,
    dotlist: Sequence[str] = (),
    executor: str = "ray",
    wandb_mode: str | None = None,
    progress: bool = True,
) -> Reproduction:
    """Run experiment ``name`` (module docstring) into ``out_dir`` (default ``runs/reproduce-<name>/``); write its
    report unless Ctrl-C or SIGTERM stopped it. Rerunning into the same folder skips the finished runs."""
    from agl_lab.studies.reproduce_report import write_report

    experiment = _experiment(name)
    if not 2 <= pilot_seeds <= max_seeds:
        raise ValueError(
            f"need 2 <= pilot seeds <= max seeds (--pilot-seeds, --max-seeds), got {pilot_seeds} and {max_seeds}"
        )
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"reproduce-{name}"
    start, started_at = time.perf_counter(), time.time()

    def sweep(n: int) -> SweepResult:
        return run_sweep(experiment.settings, list(range(n)), sweep_dir=out, dotlist=[*experiment.dotlist, *dotlist],
                         executor=executor, wandb_mode=wandb_mode, progress=progress)  # fmt: skip

    with shared_ray():  # with Ray, one instance for both rounds
        result = sweep(pilot_seeds)
        asked = _asked(experiment, result.table) if len(result.table) else None
        target = pilot_seeds if asked is None or result.stopped else int(min(max_seeds, max(asked, pilot_seeds)))
        if target > pilot_seeds:
            result = sweep(target)
    checks, shown = judge(experiment, result.table)
    done = [Path(c.run_dir) / "cell.json" for c in result.cells.itertuples() if c.status == "done"]
    resumed = sum(path.stat().st_mtime < started_at for path in done)
    reproduction = Reproduction(
        experiment,
        result,
        checks,
        shown,
        pilot_seeds,
        asked,
        max_seeds,
        wall_s=time.perf_counter() - start,
        resumed_runs=resumed,
    )
    if not result.stopped and not result.table.empty:
        reproduction.meta = _meta(reproduction)
        reproduction.figures = write_report(reproduction, out)
        write_record(reproduction, out / "record")
    return reproduction


def redraw_reproduction(name: str, *, record: str | Path | None = None, out_dir: str | Path | None = None):
    """The report of experiment ``name`` written anew from its record (default: the one committed in the package,
    ``data/studies/<name>``) into ``out_dir`` (default ``runs/reproduce-<name>-report/``), without training; the
    checks are judged anew on the recorded table."""
    from agl_lab.studies.reproduce_report import write_report

    experiment = _experiment(name)
    folder = Path(record) if record is not None else packaged_record(name)
    table, cells, meta = read_record(folder, experiment=experiment)
    checks, shown = judge(experiment, table)
    plan = meta.get("seed_plan", {})
    asked = plan.get("seeds_asked")
    reproduction = Reproduction(
        experiment,
        SweepResult(folder, table, cells),
        checks,
        shown,
        pilot_seeds=int(plan.get("pilot_seeds", 0)),
        seeds_asked=None if asked is None else float(asked),
        max_seeds=int(plan.get("max_seeds", 0)),
        wall_s=float(plan.get("wall_s", float("nan"))),
        meta=meta,
    )
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"reproduce-{name}-report"
    reproduction.figures = write_report(reproduction, out)
    return reproduction


def seeds_for_effect(compared: pd.DataFrame, effect: float) -> float:
    """The most pairs any comparison with a baseline needs to detect ``effect`` at 80% power given its spread
    (``sd_diff``); inf when no comparison has a spread yet (fewer than 2 pairs)."""
    paired = compared.loc[compared["baseline"].ne("0") & compared["baseline"].ne("")]
    spreads = paired.get("sd_diff", pd.Series(dtype=float)).astype(float)
    spreads = spreads[np.isfinite(spreads)]
    return max((pairs_needed(effect, sd) for sd in spreads), default=math.inf)


def _asked(experiment: Experiment, table: pd.DataFrame) -> float | None:
    checks, shown = judge(experiment, table)
    if experiment.smallest_effect is not None:
        return seeds_for_effect(pd.concat([checks, shown], ignore_index=True), experiment.smallest_effect)
    return seeds_asked(checks)


def _experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {list(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def _meta(reproduction: Reproduction) -> dict:
    """The record's meta.json (:mod:`agl_lab.studies.study_record`) of a reproduction that just ran."""
    from agl_lab.studies.reproduce_report import played

    configs = [Path(c.run_dir) / "config.yaml" for c in reproduction.sweep.cells.itertuples() if c.status == "done"]
    config = next((path.read_text() for path in configs if path.is_file()), None)
    asked = reproduction.seeds_asked
    return {
        "experiment": reproduction.experiment.name,
        **machine_meta(played=played(reproduction), config_text=config),
        "seed_plan": {
            "pilot_seeds": reproduction.pilot_seeds,
            "seeds_asked": None if asked is None else (asked if math.isfinite(asked) else "inf"),
            "max_seeds": reproduction.max_seeds,
            "wall_s": round(reproduction.wall_s, 1),
            "smallest_effect": reproduction.experiment.smallest_effect,
        },
    }


def seeds_asked(checks: pd.DataFrame) -> float | None:
    """The most ``seeds_needed`` among the checks that did not pass (inf where one cannot say: an effect of 0, or
    fewer than 2 pairs); None when every check passed. ``zero`` checks ask for nothing: more seeds cannot make an
    exact property hold."""
    unresolved = checks.loc[~checks["passed"].astype(bool) & checks["expect"].ne("zero")]
    if not len(unresolved):
        return None
    return float(unresolved.get("seeds_needed", pd.Series(math.inf)).astype(float).fillna(math.inf).max())


def judge(experiment: Experiment, table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The experiment's checks (with ``passed``) and its shown comparisons, one line each, from a sweep's table.

    A check that cannot be judged (its setting or baseline has no finished run, the metric was never logged) fails,
    with the reason as its verdict.
    """
    return tuple(pd.DataFrame([_judge(c, table) for c in checks]) for checks in (experiment.checks, experiment.shown))


def _judge(check: Check, table: pd.DataFrame) -> dict:
    where = {"window": check.window, "expect": check.expect}
    try:
        return _judged(check, table) | where
    except (ValueError, KeyError) as exc:  # KeyError: the setting has no finished run
        reason = str(exc) if isinstance(exc, ValueError) else f"no finished run of {exc}"
        base = {"setting": check.setting, "baseline": check.baseline or "", "metric": check.metric, "n_pairs": 0}
        passed, outcome = (np.nan, "") if check.expect == "none" else (False, "not judged")
        line = f"{check.setting}: not judged: {reason}"
        return base | where | {"verdict": line, "passed": passed, "outcome": outcome}


def _judged(check: Check, table: pd.DataFrame) -> dict:
    if check.expect == "zero":
        values = table.loc[(table["setting"] == check.setting) & (table["metric"] == check.metric), "value"]
        largest = float(values.abs().max()) if len(values) else math.nan
        runs = table.loc[table["setting"] == check.setting, "seed"].nunique()
        passed = len(values) > 0 and bool(largest <= ZERO_TOL)
        line = (f"{check.setting}: {check.metric} within ±{ZERO_TOL:g} at every step of {runs} runs "
                f"(largest |value| {largest:.2g})")  # fmt: skip
        return {"setting": check.setting, "baseline": "", "metric": check.metric, "n_pairs": runs,
                "mean_diff": largest, "verdict": line, "passed": passed,
                "outcome": "as claimed" if passed else "not zero"}  # fmt: skip
    if check.baseline is None:
        values = run_values(table, metric=check.metric, window=check.window)
        row = {"setting": check.setting, "baseline": "0", "metric": check.metric, **one_sample(values[check.setting])}
    else:
        with warnings.catch_warnings():  # the check's verdict line says "rliable recommends ≥ 5 runs" itself
            warnings.simplefilter("ignore", TooFewRunsWarning)
            effects = compare_settings(
                table, baseline=check.baseline, metric=check.metric, window=check.window, method=check.method
            )
        row = effects.set_index("setting").loc[check.setting].to_dict() | {"setting": check.setting}
    if check.expect == "none":
        return row | {"verdict": verdict(row), "passed": np.nan, "outcome": ""}
    sign = 1 if check.expect == "higher" else -1
    low, high = sorted((sign * row["ci_low"], sign * row["ci_high"]))  # on the claimed side when low > 0
    passed = bool(low > 0)  # NaN compares False: not passed
    outcome = "as claimed" if passed else "opposite to the claim" if high < 0 else "unresolved"
    return row | {"verdict": verdict(row), "passed": passed, "outcome": outcome}
