"""A training step's rows, recorded: the run folder ``agl_lab.read_run`` reads, and the step's weighting metrics.

The field diagnoses weighting on the rows a run trained (verl PR #7580 reads a run's ``rollout_data_dir``), but
Agent Lightning 1.0.2's trainer writes no per-step dump. :mod:`agl_lab.training.agl_recorder` records one with what
this module builds. The folder ``DIR``:

* ``recording.json`` — written once: ``format``, ``producer``, ``versions``, ``settings`` (the resolved config's
  three per-rollout settings) and ``columns`` (name → Parquet type);
* ``<global_step>.parquet`` — one per training step (``1.parquet``, ``2.parquet``, …), one line per training row,
  sorted by ``row``; each file is written whole or not at all (:mod:`agl_lab.files.atomic_files`).

========================  ==========  =======================================================================
column                    type        meaning
========================  ==========  =======================================================================
``step``                  int64       the trainer's ``global_steps``
``group``                 string      the row's GRPO group (``uid``: Agent Lightning's ``data_id_list``)
``trajectory``            string      its rollout (``rollout_id_list``)
``row``                   int64       its index among the rows the step's rollout returned (marked rows, cut by
                                      Agent Lightning before the cap, are not training rows: their index is skipped)
``response_tokens``       int64       trainable tokens (``response_mask`` sum)
``reward``                float64     the row's score (``token_level_scores`` sum)
``advantage``             float64     its mean advantage over its trainable tokens as the estimator gave it, before
                                      ``per_rollout_mean``'s normalization; NaN for a row the cap dropped
``kept``                  bool        whether the update cap kept it (the actor trained on it)
========================  ==========  =======================================================================

:func:`step_metrics` gives the step's metrics on the kept rows: verl PR #7580's names where it has one
(:data:`TRAJECTORY_METRICS`) and ``lab/diagnostics/*`` (:func:`agl_lab.lab.diagnostics.step_diagnostics`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from omegaconf import DictConfig, OmegaConf
from verl import DataProto

from agl_lab.config.modes import LOSS_MODES
from agl_lab.core.keys import (
    DIVISOR,
    THREE_SETTINGS,
    TRAJECTORY_LOGICAL_SESSIONS,
    TRAJECTORY_SEGMENTS_PER_SESSION_MEAN,
    TRAJECTORY_STORED_ROWS,
)
from agl_lab.files.atomic_files import write_whole, written_whole
from agl_lab.lab.diagnostics import step_diagnostics
from agl_lab.lab.loss_scale import token_layout, weighing_mode

__all__ = [
    "FORMAT",
    "INFO_FILE",
    "ROW",
    "SCHEMA",
    "TRAJECTORY_METRICS",
    "diagnostics_config",
    "row_means",
    "step_metrics",
    "step_rows",
    "versions",
    "write_info",
    "write_step",
]

FORMAT = "agl_lab recording 1"
INFO_FILE = "recording.json"
ROW = "agl_lab_row"  # the non-tensor column that tags each rollout row with its index, through the drops
SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("group", pa.string()),
        ("trajectory", pa.string()),
        ("row", pa.int64()),
        ("response_tokens", pa.int64()),
        ("reward", pa.float64()),
        ("advantage", pa.float64()),
        ("kept", pa.bool_()),
    ]
)
# verl PR #7580's per-step names (a session = a rollout, a segment = one of its rows), on the rows the actor gets
TRAJECTORY_METRICS = {
    "stored_rows": TRAJECTORY_STORED_ROWS,
    "logical_sessions": TRAJECTORY_LOGICAL_SESSIONS,
    "segments": TRAJECTORY_SEGMENTS_PER_SESSION_MEAN,
    "weight_mean": "training/trajectory/loss_weight/mean",
    "weight_min": "training/trajectory/loss_weight/min",
    "weight_max": "training/trajectory/loss_weight/max",
}


def step_rows(rows: DataProto, kept: DataProto | None, advantages: torch.Tensor | None, *, step: int) -> pd.DataFrame:
    """The step's :data:`SCHEMA` table: every row of ``rows`` but the marked ones, ``kept`` ones with their advantage.

    ``rows``: what the step's rollout returned, each row tagged with its index in :data:`ROW`, with ``uid``.
    ``kept``: the rows the actor got (None: the step trained nothing), carrying the same tags; ``advantages``: their
    advantages before any loss normalization, in ``kept``'s order, ``(kept, R)``.
    """
    n = len(rows)
    index = np.asarray(rows.non_tensor_batch[ROW], dtype=np.int64)  # (n,)
    if not np.array_equal(index, np.arange(n)):
        raise ValueError(f"non_tensor_batch[{ROW!r}] must number the step's rows 0..{n - 1} in order")
    advantage = np.full(n, np.nan)  # (n,)
    trained = np.zeros(n, dtype=bool)  # (n,)
    if kept is not None and len(kept):
        at = np.asarray(kept.non_tensor_batch[ROW], dtype=np.int64)  # (kept,) each kept row's index in rows
        if advantages is None or advantages.shape[0] != len(at):
            raise ValueError(f"advantages must hold one line per kept row ({len(at)})")
        advantage[at] = row_means(advantages, kept.batch["response_mask"])
        trained[at] = True
    marked = rows.batch["is_drop_mask"].bool().numpy() if "is_drop_mask" in rows.batch.keys() else np.zeros(n, bool)
    if (trained & marked).any():
        raise ValueError("a row marked is_drop_mask reached the actor: the kept rows do not come from these rows")
    frame = pd.DataFrame(
        {
            "step": np.full(n, step, dtype=np.int64),
            "group": np.asarray(rows.non_tensor_batch["uid"]).astype(str),
            "trajectory": np.asarray(rows.non_tensor_batch["rollout_id_list"]).astype(str),
            "row": index,
            "response_tokens": rows.batch["response_mask"].sum(dim=-1).numpy().astype(np.int64),
            "reward": rows.batch["token_level_scores"].double().sum(dim=-1).numpy(),
            "advantage": advantage,
            "kept": trained,
        }
    )
    return frame[~marked].reset_index(drop=True)


def row_means(advantages: torch.Tensor, response_mask: torch.Tensor) -> np.ndarray:
    """(rows,) each row's mean advantage over its trainable tokens (0 for a row without one), in float64."""
    mask = response_mask.double()  # (rows, R)
    return ((advantages.double() * mask).sum(dim=-1) / mask.sum(dim=-1).clamp_min(1.0)).numpy()


def write_step(folder: str | Path, frame: pd.DataFrame) -> Path:
    """Write ``frame`` (one step's :func:`step_rows`) to ``folder/<step>.parquet`` whole or not at all."""
    steps = frame["step"].unique()
    if len(steps) != 1:
        raise ValueError(f"a step file holds one step; got steps {sorted(steps.tolist())}")
    path = Path(folder) / f"{int(steps[0])}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False)
    with written_whole(path) as partial:
        pq.write_table(table, partial)
    return path


def write_info(folder: str | Path, cfg: DictConfig, *, producer: str, versions: dict[str, str | None]) -> Path:
    """Write ``folder/recording.json`` unless the folder already has one of the same settings (a resumed run).

    A folder recording a run of other settings is refused (ValueError): two runs' steps would mix.
    """
    path = Path(folder) / INFO_FILE
    settings = {key: OmegaConf.select(cfg, key, default=None) for key in THREE_SETTINGS}
    if path.exists():
        before = json.loads(path.read_text()).get("settings")
        if before != settings:
            raise ValueError(
                f"{path.parent} already holds a recording of a run with settings {before}, not {settings}: "
                "record this run into a new folder"
            )
        return path
    info = {
        "format": FORMAT,
        "producer": producer,
        "versions": versions,
        "settings": settings,
        "columns": {field.name: str(field.type) for field in SCHEMA},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, json.dumps(info, indent=2) + "\n")
    return path


def diagnostics_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` as the diagnostics read it: Agent Lightning's config has no ``lab.per_rollout_divisor``, and its
    trainer divides ``per_rollout_mean`` by rows, so that is what an absent divisor means (``cfg`` unchanged)."""
    if OmegaConf.select(cfg, DIVISOR, default=None) is not None:
        return cfg
    view = copy.deepcopy(cfg)
    OmegaConf.update(view, DIVISOR, "rows", force_add=True)  # struct mode or not
    return view


def step_metrics(kept: DataProto, cfg: DictConfig) -> dict[str, float]:
    """The step's weighting metrics on the rows the actor gets (``kept``, with ``advantages`` before step 5).

    verl PR #7580's names: ``stored_rows`` (rows), ``logical_sessions`` (their rollouts), ``segments_per_session/
    mean`` (rows ÷ rollouts) and ``loss_weight/{mean,min,max}``: each row's gradient mass under the run's loss mode
    relative to a row-equal objective, rescaled to mean 1 over the batch as the PR's revision 2 rescales its
    weights (per_rollout_mean: ``N·T_i / (R·T_rollout)``; absent for a loss verl's registry lacks). Then
    ``lab/diagnostics/*``. ``cfg``: :func:`diagnostics_config`.
    """
    if len(kept) == 0:
        return {}
    ids = pd.Index(np.asarray(kept.non_tensor_batch["rollout_id_list"]).astype(str))
    sessions = int(ids.nunique())
    metrics: dict[str, float] = {
        TRAJECTORY_METRICS["stored_rows"]: float(len(kept)),
        TRAJECTORY_METRICS["logical_sessions"]: float(sessions),
        TRAJECTORY_METRICS["segments"]: len(kept) / sessions,
    }
    mode = weighing_mode(cfg)
    if mode is not None:
        layout = token_layout(kept, cfg)
        mass = LOSS_MODES[mode].weight(layout) * layout.row_tokens  # (rows,) gradient mass per unit advantage
        if mass.mean() > 0:
            weight = mass / mass.mean()  # (rows,)
            metrics[TRAJECTORY_METRICS["weight_mean"]] = float(weight.mean())
            metrics[TRAJECTORY_METRICS["weight_min"]] = float(weight.min())
            metrics[TRAJECTORY_METRICS["weight_max"]] = float(weight.max())
    metrics.update(step_diagnostics(kept, cfg))
    return metrics


def versions(*packages: str) -> dict[str, Any]:
    """Each package's installed version (None when it is not installed)."""
    from importlib import metadata

    found: dict[str, Any] = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found
