"""A whole run's weighting diagnostics, step by step: every catalogue mode on the same rollouts (the counterfactual).

Each step of a run's rows (:mod:`agl_lab.files.run_readers`, one step in memory at a time) is measured as the step
trained it: rows not ``kept`` out; each row's advantage the source's own where it records one for every kept row,
else the config's estimator's (``grpo``/``grpo_vectorized`` in numpy, :mod:`agl_lab.lab.grpo_numpy`; another
outcome estimator through verl's own ``compute_advantage`` on one-token rows; an estimator that reads per-token
rewards cannot run on row rewards: NaN, and ``missing`` says ``advantage``); then every mode's weights on the step's
layout (:func:`agl_lab.core.weights.token_layout`: mini-batches of ``ppo_mini_batch_size × rollout.n`` rows in the
source's order) give :data:`STEP_COLUMNS` (:mod:`agl_lab.lab.row_diagnostics` defines each).

**Token counts never guessed.** A source without them (verl's rollout dump) is measured twice, once with every row
one token and once with random counts: a column equal both ways does not depend on the counts and is reported, one
that differs is NaN and its mode's ``missing`` says ``response_tokens``. So ``seq-mean-token-mean`` and
``session_equal`` keep every column, ``per_rollout_mean`` its solve rate and influence, ``token-mean`` nothing.

**The whole run** (:func:`run_table`): ``trajectories`` and ``rows`` summed over steps, every other column the mean
over steps of the per-step value (each step's weights normalized within its own batch, as the trainer applies them;
the same rule as a lab run's logged ``lab/diagnostics/*``); influence: rollouts summed, the rollout share and the
failure fraction pooled over the run's rollouts, the gradient share the mean over steps of each step's share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from agl_lab.config.diagnostics_settings import DiagnosticsSettings
from agl_lab.core import weights
from agl_lab.core.groups import group_rows
from agl_lab.core.keys import ROLLOUT_LEVEL
from agl_lab.files.run_sessions import total_sessions
from agl_lab.lab.grpo_numpy import FAST_ESTIMATORS, grpo_advantages
from agl_lab.lab.row_diagnostics import COLUMNS, INFLUENCE_COLUMNS, MODE_COLUMNS, RowView

__all__ = ["STEP_COLUMNS", "RunDiagnostics", "diagnose_steps", "run_influence", "run_table", "step_diagnostics"]

STEP_COLUMNS = ["step", *COLUMNS, "missing"]
_SUMMED = ("trajectories", "rows")
# how each kind of source names a row's trajectory and group
_FIELDS = {"batch": ("rollout_id_list", "data_id_list (or uid)"), "rows": ("trajectory", "group")}
_PROBE_SEED = 20260919  # the random token counts of the probe (any fixed draw: a dependent column differs at once)


@dataclass(frozen=True)
class RunDiagnostics:
    """A run measured step by step: :data:`STEP_COLUMNS` per (step, mode) and the influence per (step, mode, class)."""

    steps: pd.DataFrame
    influence_steps: pd.DataFrame  # step + INFLUENCE_COLUMNS
    sessions: dict = field(default_factory=dict)  # how the rows' sessions were read (run_sessions.total_sessions)

    def table(self) -> pd.DataFrame:
        """The whole run, one line per mode (module docstring); ``attrs["influence"]``, ``attrs["steps"]``,
        ``attrs["sessions"]``."""
        table = run_table(self.steps)
        table.attrs["influence"] = run_influence(self.influence_steps)
        table.attrs["steps"] = int(self.steps["step"].nunique(dropna=False)) if len(self.steps) else 0
        table.attrs["sessions"] = self.sessions
        return table


def diagnose_steps(
    frames: Iterable[tuple[int | None, pd.DataFrame]], settings: DiagnosticsSettings, *, modes: Sequence[str]
) -> RunDiagnostics:
    """Every step of ``frames`` (``(step, rows)`` pairs, as :func:`agl_lab.files.run_readers.iter_run_steps` yields
    them) measured with ``settings`` under ``modes``; one step in memory at a time. Each step's numbers are kept as
    plain lines and arrays and the two tables built once at the end (a DataFrame per step and its copies cost as much
    as the step's arithmetic)."""
    lines, influences, sessions = [], [], []
    for step, rows in frames:
        sessions.append(rows.attrs.get("sessions"))
        step_lines, influence = _measure_step(rows, settings, modes=modes)
        lines += [{"step": step, **line} for line in step_lines]
        influences.append({"step": np.full(len(influence["mode"]), step, dtype=object), **influence})
    steps = pd.DataFrame(lines, columns=STEP_COLUMNS)
    influence = pd.DataFrame(
        {
            key: np.concatenate([part[key] for part in influences]) if influences else np.zeros(0, dtype=object)
            for key in ["step", *INFLUENCE_COLUMNS]
        }
    )
    steps["step"] = steps["step"].astype("Int64")
    influence["step"] = influence["step"].astype("Int64")
    return RunDiagnostics(steps, influence, total_sessions(sessions))


def step_diagnostics(
    rows: pd.DataFrame, settings: DiagnosticsSettings, *, modes: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One step's :data:`COLUMNS` + ``missing`` per mode, and its influence by class (module docstring)."""
    lines, influence = _measure_step(rows, settings, modes=modes)
    return pd.DataFrame(lines, columns=[*COLUMNS, "missing"]), pd.DataFrame(influence)[INFLUENCE_COLUMNS]


def _measure_step(
    rows: pd.DataFrame, settings: DiagnosticsSettings, *, modes: Sequence[str]
) -> tuple[list[dict], dict[str, np.ndarray]]:
    """One step's line per mode (:data:`COLUMNS` + ``missing``) and its influence as :data:`INFLUENCE_COLUMNS` arrays
    (a line per mode and class)."""
    kept_rows = rows["kept"].fillna(True).to_numpy(dtype=bool)  # (rows,)
    kept = rows if kept_rows.all() else rows[kept_rows]
    if kept["trajectory"].isna().any():  # the proposals' weights and the trajectories count a trajectory's rows
        raise ValueError(f"the weighting diagnostics needs fields {_what(rows)}: {_FIELDS[_kind(rows)][0]}")
    rollouts = group_rows(kept["trajectory"].to_numpy(), field="trajectory")
    groups = group_rows(kept["group"].to_numpy(), field="group") if kept["group"].notna().all() else None
    tokens = kept["response_tokens"].to_numpy(dtype=np.float64, copy=True)  # writable: torch reads it
    known_tokens = bool(np.isfinite(tokens).all())
    reward = kept["reward"].to_numpy(dtype=np.float64)
    advantage, advantage_missing = _advantages(kept, rows.attrs, settings, rollouts, groups, tokens, known_tokens)
    views = [_view(settings, tokens if known_tokens else np.ones(len(kept)), rollouts, groups, advantage, reward)]
    if not known_tokens:  # the probe: the same rows with random token counts
        probe = np.random.default_rng(_PROBE_SEED).integers(1, 4097, len(kept)).astype(np.float64)
        views.append(_view(settings, probe, rollouts, groups, advantage, reward))
    shared, classes = views[0].batch_columns(), views[0].classes()
    lines, shares = [], []
    for mode in modes:
        columns = [view.mode_columns(mode) for view in views]
        share = [view.class_shares(mode)["gradient_share"] for view in views]
        differs = False
        for key in MODE_COLUMNS:  # what the probe moves depends on the token counts: not reported
            if not all(_close(columns[0][key], other[key]) for other in columns[1:]):
                columns[0][key], differs = np.nan, True
        if not all(np.allclose(share[0], other, rtol=1e-6, atol=1e-9, equal_nan=True) for other in share[1:]):
            share[0], differs = np.full(len(share[0]), np.nan), True
        missing = [name for name, gone in (("response_tokens", differs), ("advantage", advantage_missing)) if gone]
        lines.append({"mode": mode, **shared, **columns[0], "missing": ",".join(missing)})
        shares.append(share[0])
    n_classes = len(classes["rollouts"])
    influence = {
        "mode": np.repeat(np.asarray(modes, dtype=object), n_classes),  # (modes × classes,)
        "rows_per_rollout": np.tile(np.asarray(classes["rows_per_rollout"], dtype=object), len(modes)),
        **{key: np.tile(np.asarray(classes[key]), len(modes)) for key in ("rollouts", "rollout_share")},
        "gradient_share": np.concatenate(shares) if shares else np.zeros(0),
        "failure_fraction": np.tile(np.asarray(classes["failure_fraction"]), len(modes)),
    }
    return lines, influence


def run_table(steps: pd.DataFrame) -> pd.DataFrame:
    """The whole run from :data:`STEP_COLUMNS` (module docstring): one line per mode, in the steps' mode order."""
    lines = []
    for mode, part in steps.groupby("mode", sort=False):
        line = {"mode": mode}
        for column in COLUMNS[1:]:
            values = part[column].to_numpy(dtype=np.float64)
            finite = values[np.isfinite(values)]
            if column in _SUMMED:
                line[column] = int(finite.sum())
            else:
                line[column] = float(finite.mean()) if len(finite) else np.nan
        if "missing" in part.columns:
            line["missing"] = ",".join(sorted({m for v in part["missing"] for m in str(v or "").split(",") if m}))
        lines.append(line)
    return pd.DataFrame(lines, columns=[*COLUMNS, "missing"] if "missing" in steps.columns else COLUMNS)


def run_influence(influence_steps: pd.DataFrame) -> pd.DataFrame:
    """:data:`INFLUENCE_COLUMNS` of the whole run from the per-step influence (module docstring)."""
    if influence_steps.empty:
        return pd.DataFrame(columns=INFLUENCE_COLUMNS)
    frame = influence_steps.assign(
        failed=influence_steps["failure_fraction"].astype(float) * influence_steps["rollouts"].astype(float),
        size=influence_steps["rows_per_rollout"].astype(str).str.rstrip("+").astype(int),
    )
    n_steps = frame["step"].nunique(dropna=False)
    lines = []
    for mode, part in frame.groupby("mode", sort=False):
        total = part.groupby("step", dropna=False)["rollouts"].sum().sum()
        for label, cls in part.groupby("rows_per_rollout", sort=False):
            rollouts = int(cls["rollouts"].sum())
            lines.append(
                {
                    "mode": mode,
                    "rows_per_rollout": label,
                    "rollouts": rollouts,
                    "rollout_share": rollouts / total if total else np.nan,
                    "gradient_share": float(cls["gradient_share"].fillna(0.0).sum()) / n_steps,  # absent: 0 that step
                    "failure_fraction": float(cls["failed"].sum()) / rollouts if rollouts else np.nan,
                    "_size": int(cls["size"].iloc[0]),
                }
            )
    table = pd.DataFrame(lines)
    order = {mode: i for i, mode in enumerate(dict.fromkeys(table["mode"]))}
    table = table.sort_values(["mode", "_size"], key=lambda c: c.map(order) if c.name == "mode" else c)
    return table.drop(columns="_size").reset_index(drop=True)[INFLUENCE_COLUMNS]


def _view(settings, tokens, rollouts, groups, advantage, reward) -> RowView:
    layout = weights.token_layout(
        tokens,
        rollouts.codes,
        mini_batch_rows=settings.mini_batch_rows,
        horizon=settings.loss_scale_factor or 1.0,  # a constant in every row's weight: the columns are ratios
        micro_batch_rows=settings.micro_batch_rows,
        group=None if groups is None else groups.codes,
    )
    advantage = np.where(tokens > 0, advantage, 0.0)  # a row without a trainable token has no advantage mass
    return RowView(layout, advantage, reward)


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 + 1e-6 * abs(b)  # numpy's isclose, on floats


def _advantages(rows, attrs, settings, rollouts, groups, tokens, known_tokens) -> tuple[np.ndarray, bool]:
    """Each kept row's advantage and whether it is missing (NaN)."""
    recorded = rows["advantage"].to_numpy(dtype=np.float64)
    if len(recorded) and np.isfinite(recorded).all():
        return recorded, False
    if groups is None:  # the estimator compares a group's rewards
        raise ValueError(f"the weighting diagnostics needs fields {_what(rows)}: {_FIELDS[_kind(rows)][1]}")
    level = rollouts if settings.rollout_level else None
    reward = rows["reward"].to_numpy(dtype=np.float64)
    if settings.adv_estimator in FAST_ESTIMATORS:
        try:
            values = grpo_advantages(
                reward,
                groups.codes,
                rollouts=level,
                estimator=settings.adv_estimator,
                norm_adv_by_std_in_grpo=settings.norm_adv_by_std_in_grpo,
                score_dtype=attrs.get("score_dtype", "float32"),
                tokens=tokens if known_tokens else None,
            )
        except RuntimeError as exc:  # Agent Lightning's own refusal of these rows: the input's, not a bug
            raise ValueError(
                f"{attrs.get('path', 'the rows')}: {exc}, as Agent Lightning's trainer would refuse them; measure "
                f"them at verl's row level ({ROLLOUT_LEVEL}=false) or fix the rows"
            ) from exc
        return values, False
    from agl_lab.lab.verl_advantage import outcome_advantages  # verl's own estimator (imports verl)

    values = outcome_advantages(rows, settings, score_dtype=attrs.get("score_dtype", "float32"))
    return (values, False) if values is not None else (np.full(len(rows), np.nan), True)


def _kind(rows: pd.DataFrame) -> str:
    return "batch" if rows.attrs.get("source") in ("lab_batch", "verl_pickle") else "rows"


def _what(rows: pd.DataFrame) -> str:
    return "this batch lacks" if _kind(rows) == "batch" else "these rows lack"
