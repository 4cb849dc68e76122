"""``agl_lab.weighting_diagnostics``: the field's weighting diagnostics of a batch, a batch file or a training run.

The columns are verl PR #7580's, generalised to every catalogue mode (:mod:`agl_lab.lab.diagnostics` defines each).
A *batch* (a ``DataProto`` of rows, or a path :func:`agl_lab.lab.batch_io.load_batch` reads, such as
``data/sample_batch``) is measured as given, with the config's estimator and mini-batch layout (default: the
``short-run`` base). A *run directory* (``metrics.jsonl``) gives the table from the ``lab/diagnostics/*`` its steps
logged, measured on the rows each step trained: ``trajectories`` and ``rows`` summed over the steps, every other
column the mean over steps of the per-step value (each step's weights are normalized within its own batch; the PR
pools a run's trajectories, which is the same for ``solve_by_trajectory`` when every step has as many rollouts);
``attrs["influence"]`` holds the run's own mode's influence by class, likewise averaged (a class a step lacked counts
as a share of 0 there). ``agl-lab weighting PATH`` prints it (:mod:`agl_lab.cli_weighting`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from verl import DataProto

from agl_lab.config.compose import compose_from
from agl_lab.config.modes import weighing_mode
from agl_lab.curves.history import read_run_dir
from agl_lab.lab.batch_io import META_FILE, BatchFileError, load_batch
from agl_lab.lab.diagnostics import COLUMNS, INFLUENCE_COLUMNS, PREFIX, batch_diagnostics, check_modes

__all__ = ["BATCH_BASE", "run_diagnostics", "weighting_diagnostics"]

BATCH_BASE = "short-run"  # the config a batch is measured with when none is given (the lab trainer's layout)
_SUMMED = ("trajectories", "rows")


def weighting_diagnostics(
    source: DataProto | str | os.PathLike,
    *,
    modes: Sequence[str] | None = None,
    cfg: DictConfig | None = None,
    trusted: bool = False,
) -> pd.DataFrame:
    """One row per mode (default: the whole catalogue), columns ``mode, trajectories, rows, solve_by_trajectory,
    solve_by_row, gap, mean_rows_solved, mean_rows_failed, adv_cosine, ess_fraction``; ``attrs["influence"]``: the
    influence by rows-per-rollout class (module docstring).

    ``cfg``: the composed config a batch is measured with (default: base ``short-run``); ``trusted``: load a pickled
    verl dump. A path that is neither a batch nor a run is a :class:`BatchFileError` (FileNotFoundError when nothing
    is there); an unknown mode a ValueError listing the catalogue; a batch lacking a field a ValueError naming it.
    """
    modes = check_modes(modes)
    if isinstance(source, DataProto):
        return batch_diagnostics(source, cfg if cfg is not None else compose_from(BATCH_BASE), modes=modes)
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"no batch or run at {path}: give a batch (save_batch's folder, or a verl dump with "
                                "--trusted) or a run directory (metrics.jsonl)")  # fmt: skip
    if path.is_dir() and (path / "metrics.jsonl").exists():
        return run_diagnostics(path, modes=modes)
    if path.is_dir() and not (path / META_FILE).exists():
        raise BatchFileError(
            f"{path} is neither a batch (no {META_FILE}: save one with agl_lab.lab.batch_io.save_batch) nor a run "
            "directory (no metrics.jsonl: agl-lab train writes one)"
        )
    batch = load_batch(path, trusted=trusted)
    return batch_diagnostics(batch, cfg if cfg is not None else compose_from(BATCH_BASE), modes=modes)


def run_diagnostics(path: str | os.PathLike, *, modes: Sequence[str] | None = None) -> pd.DataFrame:
    """The table of a run directory from its logged ``lab/diagnostics/*`` (module docstring)."""
    path = Path(path)
    modes = check_modes(modes)
    history = read_run_dir(path)
    wide = history.pivot_table(index="step", columns="metric", values="value", aggfunc="mean")
    if f"{PREFIX}trajectories" not in wide.columns:
        raise ValueError(
            f"{path} logged no {PREFIX}* metrics (a run from before agl_lab logged them, or every step was skipped): "
            "train it again, or give a batch"
        )
    shared = {
        column: float(wide[f"{PREFIX}{column}"].sum()) if column in _SUMMED else _mean(wide, f"{PREFIX}{column}")
        for column in ("trajectories", "rows", "solve_by_trajectory", "mean_rows_solved", "mean_rows_failed")
    }
    for column in _SUMMED:
        shared[column] = int(shared[column])
    lines = []
    for mode in modes:
        columns = {c: _mean(wide, f"{PREFIX}{mode}/{c}") for c in ("solve_by_row", "gap", "adv_cosine", "ess_fraction")}
        lines.append({"mode": mode, **shared, **columns})
    table = pd.DataFrame(lines, columns=COLUMNS)
    table.attrs["influence"] = _run_influence(wide, own=_own_mode(path))
    table.attrs["steps"] = len(wide)
    return table


def _run_influence(wide: pd.DataFrame, *, own: str | None) -> pd.DataFrame:
    """The own mode's per-class influence averaged over steps (a class absent from a step: shares 0 there)."""
    labels = sorted({c[len(PREFIX) + 6 :].split("/")[0] for c in wide.columns if c.startswith(f"{PREFIX}class_")})
    lines = []
    for label in labels:
        column = f"{PREFIX}class_{label}/"
        share = wide[f"{column}rollout_share"].fillna(0.0)
        lines.append({
            "mode": own,
            "rows_per_rollout": label,
            "rollouts": int(round(float((share * wide[f"{PREFIX}trajectories"]).sum()))),
            "rollout_share": float(share.mean()),
            "gradient_share": float(wide[f"{column}gradient_share"].fillna(0.0).mean()),
            "failure_fraction": _mean(wide, f"{column}failure_fraction"),
        })  # fmt: skip
    order = sorted(range(len(labels)), key=lambda i: int(labels[i].rstrip("+")))
    return pd.DataFrame([lines[i] for i in order], columns=INFLUENCE_COLUMNS)


def _own_mode(path: Path) -> str | None:
    config = path / "config.yaml"
    return weighing_mode(OmegaConf.load(config)) if config.exists() else None


def _mean(wide: pd.DataFrame, column: str) -> float:
    if column not in wide.columns:
        return np.nan
    values = wide[column].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else np.nan
