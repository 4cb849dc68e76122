"""``agl_lab.weighting_diagnostics``: the field's weighting diagnostics of a batch, a batch file or a training run.

The columns are verl PR #7580's, generalised to every catalogue mode (:mod:`agl_lab.lab.row_diagnostics` defines
each). Sources:

* a batch (a ``DataProto`` of rows) is measured as given through verl (:mod:`agl_lab.lab.diagnostics`), with the
  config's estimator and mini-batch layout (default: the ``short-run`` base);
* a run or a batch file (anything :func:`agl_lab.read_run` reads: verl's ``trainer.rollout_data_dir``, per-step
  tables, ``data/sample_batch``, a verl ``save_to_disk`` file with ``trusted=True``) step by step, every mode on the
  same rollouts, without loading torch's trainer stack, Ray or verl for GRPO (:mod:`agl_lab.lab.run_diagnostics`);
* an agl_lab run directory (``metrics.jsonl``) from the ``lab/diagnostics/*`` its steps logged, measured on the rows
  each step trained; a step logged twice is refused by name (which of two lines is the run's is not for the reader
  to guess).

``by_step=True`` gives ``step, mode`` and the columns per step; otherwise the whole run (``trajectories`` and ``rows``
summed over steps, every other column the mean over steps of the per-step value: :func:`agl_lab.lab.run_diagnostics.
run_table`), with ``attrs["influence"]`` (the influence by rows-per-rollout class; a lab run's: its own mode's) and
``attrs["steps"]``. Tables from rows also carry ``missing``: what the source lacks for a mode's numbers (token
counts in verl's dump), never guessed. ``agl-lab weighting PATH`` prints and draws it (:mod:`agl_lab.cli.weighting`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.diagnostics_settings import DiagnosticsSettings, base_settings
from agl_lab.files.outcome_rules import DEFAULT_OUTCOME, check_outcome
from agl_lab.files.run_readers import iter_run_steps
from agl_lab.lab.loss_scale import weighing_mode
from agl_lab.lab.row_diagnostics import INFLUENCE_COLUMNS, MODE_COLUMNS, PREFIX, check_modes
from agl_lab.lab.run_diagnostics import STEP_COLUMNS, RunDiagnostics, diagnose_steps

__all__ = ["BATCH_BASE", "diagnose_run", "is_lab_run", "weighting_diagnostics"]

BATCH_BASE = "short-run"  # the config a batch is measured with when none is given (the lab trainer's layout)
_BATCH_COLUMNS = ("trajectories", "rows", "solve_by_trajectory", "mean_rows_solved", "mean_rows_failed")


def weighting_diagnostics(
    source: Any,
    *,
    modes: Sequence[str] | None = None,
    by_step: bool = False,
    steps: Any = None,
    cfg: DictConfig | None = None,
    trusted: bool = False,
    trajectory_column: str | None = None,
    group_column: str | None = None,
    outcome: str = DEFAULT_OUTCOME,
) -> pd.DataFrame:
    """One line per mode (default: the whole catalogue), or per step and mode with ``by_step`` (module docstring).

    ``steps``: which steps of a run (``"1-100"``, a list, a pair: :func:`agl_lab.files.run_readers.parse_steps`);
    ``cfg``: the composed config to measure with (default: base ``short-run``); ``trusted``: unpickle a verl dump;
    ``trajectory_column``/``group_column``: which field of a verl dump holds a row's trajectory or group;
    ``outcome``: how a session's outcome is read from rows whose scores differ, in a run or a batch file
    (:data:`~agl_lab.files.outcome_rules.OUTCOMES`; a ``DataProto`` is measured as given, as the trainer would take
    it, and an agl_lab run as it trained). An empty
    or unknown ``modes`` is a ValueError naming it; a path that is none of the sources a :class:`BatchFileError`
    (FileNotFoundError when nothing is there); rows lacking a field a ValueError naming it.
    """
    modes = check_modes(modes)
    check_outcome(outcome)
    if _is_data_proto(source):
        return _batch(source, modes=modes, by_step=by_step, cfg=cfg)
    run = diagnose_run(
        source,
        modes=modes,
        steps=steps,
        cfg=cfg,
        trusted=trusted,
        trajectory_column=trajectory_column,
        group_column=group_column,
        outcome=outcome,
    )
    if not by_step:
        return run.table()
    table = run.steps.copy()
    table.attrs["influence"] = run.influence_steps
    table.attrs["sessions"] = run.sessions
    return table


def diagnose_run(
    source: str | os.PathLike,
    *,
    modes: Sequence[str] | None = None,
    steps: Any = None,
    cfg: DictConfig | None = None,
    trusted: bool = False,
    trajectory_column: str | None = None,
    group_column: str | None = None,
    outcome: str = DEFAULT_OUTCOME,
) -> RunDiagnostics:
    """Every step of the run (or batch file) at ``source``, read one at a time and measured under ``modes``; an
    agl_lab run directory from its logged diagnostics (``cfg`` does not apply: it was measured as it trained)."""
    modes = check_modes(modes)
    check_outcome(outcome)
    if is_lab_run(source):
        if cfg is not None:
            raise ValueError("cfg configures how rows are measured; an agl_lab run was measured as it trained")
        return _lab_run(Path(source), modes=modes, steps=steps)
    settings = DiagnosticsSettings.from_config(cfg) if cfg is not None else base_settings(BATCH_BASE)
    frames = iter_run_steps(
        source,
        steps=steps,
        trajectory_column=trajectory_column,
        group_column=group_column,
        trusted=trusted,
        outcome=outcome,
    )
    return diagnose_steps(frames, settings, modes=modes)


def is_lab_run(source: Any) -> bool:
    """Whether ``source`` is an agl_lab run directory without recorded rows (its diagnostics are in its metrics)."""
    if not isinstance(source, str | os.PathLike):
        return False
    path = Path(source)
    return (path / "metrics.jsonl").is_file() and not any(path.glob("[0-9]*.*"))


def _is_data_proto(source: Any) -> bool:
    # checked by name: a path must not load verl to learn it is not a DataProto
    return type(source).__name__ == "DataProto" and type(source).__module__.startswith("verl")


def _batch(batch: Any, *, modes: list[str], by_step: bool, cfg: DictConfig | None) -> pd.DataFrame:
    from agl_lab.config.compose import compose_from
    from agl_lab.lab.diagnostics import batch_diagnostics

    table = batch_diagnostics(batch, cfg if cfg is not None else compose_from(BATCH_BASE), modes=modes)
    table["missing"] = ""  # a batch holds every field the diagnostics read, or is refused naming the one it lacks
    if by_step:
        step = (batch.meta_info or {}).get("global_steps")
        influence = table.attrs["influence"]
        table = table.assign(step=pd.array([step] * len(table), dtype="Int64"), missing="")[STEP_COLUMNS]
        table.attrs["influence"] = influence.assign(step=pd.array([step] * len(influence), dtype="Int64"))
    return table


def _lab_run(path: Path, *, modes: list[str], steps: Any) -> RunDiagnostics:
    """The steps of an agl_lab run from its logged ``lab/diagnostics/*``, as :data:`STEP_COLUMNS`."""
    from agl_lab.curves.history import read_run_dir
    from agl_lab.files.run_readers import parse_steps

    history = read_run_dir(path, validation=False)  # training steps only: no held-out evaluation at step 0
    doubled = history[history.duplicated(["step", "metric"], keep=False)]
    if len(doubled):
        raise ValueError(
            f"{path / 'metrics.jsonl'} logs step(s) {sorted(set(doubled['step'].astype(int)))[:10]} more than once "
            "(a resumed or concatenated run?): keep one line per step, then read it again"
        )
    wide = history.pivot(index="step", columns="metric", values="value")
    wide = wide[[parse_steps(steps)(int(step)) for step in wide.index]]
    if f"{PREFIX}trajectories" not in wide.columns:
        raise ValueError(
            f"{path} logged no {PREFIX}* metrics (a run from before agl_lab logged them, or every step was skipped): "
            "train it again, or give a batch"
        )
    lines = []
    for step, values in wide.iterrows():
        shared = {c: values.get(f"{PREFIX}{c}", float("nan")) for c in _BATCH_COLUMNS}
        for mode in modes:
            lines.append(
                {
                    "step": step,
                    "mode": mode,
                    **shared,
                    "missing": "",
                    **{c: values.get(f"{PREFIX}{mode}/{c}", float("nan")) for c in MODE_COLUMNS},
                }
            )
    table = pd.DataFrame(lines, columns=STEP_COLUMNS)
    table["step"] = table["step"].astype("Int64")
    for column in ("trajectories", "rows"):
        table[column] = table[column].astype("Int64")
    return RunDiagnostics(table, _lab_influence(wide, own=_own_mode(path)))


def _lab_influence(wide: pd.DataFrame, *, own: str | None) -> pd.DataFrame:
    """The own mode's influence per step from ``lab/diagnostics/class_<k>/*`` (step + INFLUENCE_COLUMNS)."""
    labels = {c[len(PREFIX) + 6 :].split("/")[0] for c in wide.columns if c.startswith(f"{PREFIX}class_")}
    lines = []
    for step, values in wide.iterrows():
        for label in labels:
            share = values.get(f"{PREFIX}class_{label}/rollout_share")
            if share is None or pd.isna(share):
                continue  # the class was absent from this step
            lines.append(
                {
                    "step": step,
                    "mode": own,
                    "rows_per_rollout": label,
                    "rollouts": int(round(float(share) * float(values[f"{PREFIX}trajectories"]))),
                    "rollout_share": float(share),
                    "gradient_share": values.get(f"{PREFIX}class_{label}/gradient_share", float("nan")),
                    "failure_fraction": values.get(f"{PREFIX}class_{label}/failure_fraction", float("nan")),
                }
            )
    return pd.DataFrame(lines, columns=["step", *INFLUENCE_COLUMNS])


def _own_mode(path: Path) -> str | None:
    config = path / "config.yaml"
    return weighing_mode(OmegaConf.load(config)) if config.exists() else None
