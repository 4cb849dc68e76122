"""The field's weighting diagnostics on one batch: verl PR #7580's table for every catalogue mode, on verl rows.

The columns and their arithmetic are :mod:`agl_lab.lab.row_diagnostics`'s; here they are measured on a
``DataProto``. :func:`batch_diagnostics` takes a batch as given (marked rows out, every other row kept, advantages
from the config's estimator before any loss normalization); :func:`step_diagnostics` the rows a training step trains,
as ``lab/diagnostics/*`` metrics. ``agl_lab.weighting_diagnostics`` takes a batch, a batch file or a run (a run's
rows are measured without verl: :mod:`agl_lab.lab.run_diagnostics`); notebook ``06_weighting_proposals``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_response_mask

from agl_lab.config.modes import LOSS_MODES
from agl_lab.core.pipeline import compute_advantages
from agl_lab.core.row_sums import row_blocks
from agl_lab.core.rows import require_fields
from agl_lab.core.turns import last_turn_values
from agl_lab.core.update_cap import drop_marked_rows
from agl_lab.core.weights import TokenLayout
from agl_lab.lab.loss_scale import token_layout, weighing_mode
from agl_lab.lab.row_diagnostics import COLUMNS, INFLUENCE_COLUMNS, PREFIX, RowView, check_modes

__all__ = [
    "COLUMNS",
    "INFLUENCE_COLUMNS",
    "PREFIX",
    "batch_diagnostics",
    "check_modes",
    "diagnostics_table",
    "influence_by_class",
    "step_diagnostics",
]

_NEEDED = ("rollout_id_list", "data_id_list", ("token_level_scores", "token_level_rewards"))


def batch_diagnostics(batch: DataProto, cfg: DictConfig, *, modes: Sequence[str] | None = None) -> pd.DataFrame:
    """:data:`COLUMNS` for ``batch`` as given, one row per mode (default: every catalogue mode); ``attrs["influence"]``
    holds :func:`influence_by_class`. ``cfg`` gives the estimator and the mini-batch layout; ``batch`` is unchanged.

    A field the diagnostics need (rollout ids: trajectories and the proposals' weights count a rollout's rows; data
    ids: the GRPO groups; the scores) missing is a ValueError naming it.
    """
    modes = check_modes(modes)
    require_fields(batch, _NEEDED, purpose=f"the weighting diagnostics ({', '.join(modes)})")
    work, _ = drop_marked_rows(batch)
    work = DataProto(batch=work.batch.clone(), non_tensor_batch=dict(work.non_tensor_batch), meta_info={})
    work.non_tensor_batch["uid"] = work.non_tensor_batch["data_id_list"]
    if "response_mask" not in work.batch.keys():
        work.batch["response_mask"] = compute_response_mask(work)
    if "token_level_scores" not in work.batch.keys():
        work.batch["token_level_scores"] = work.batch["token_level_rewards"]
    work, _ = compute_advantages(work, cfg, normalize=False)  # the estimator's advantages, before any loss's weights
    return diagnostics_table(work, cfg, modes=modes)


def diagnostics_table(batch: DataProto, cfg: DictConfig, *, modes: Sequence[str]) -> pd.DataFrame:
    """:data:`COLUMNS` for rows that carry ``advantages`` (before step 5), one row per mode."""
    view = _view(batch, cfg)
    shared = view.batch_columns()
    table = pd.DataFrame([{"mode": m, **shared, **view.mode_columns(m)} for m in modes], columns=COLUMNS)
    table.attrs["influence"] = pd.concat([view.influence(m) for m in modes], ignore_index=True)
    return table


def influence_by_class(batch: DataProto, cfg: DictConfig, *, modes: Sequence[str]) -> pd.DataFrame:
    """:data:`INFLUENCE_COLUMNS`: per mode and rows-per-rollout class, shares of rollouts and of gradient mass."""
    view = _view(batch, cfg)
    return pd.concat([view.influence(m) for m in check_modes(modes)], ignore_index=True)


def step_diagnostics(batch: DataProto, cfg: DictConfig, *, layout: TokenLayout | None = None) -> dict[str, float]:
    """A training step's ``lab/diagnostics/*``: the batch columns, every mode's as ``<mode>/<column>``, the run's own
    mode's also unprefixed, and its influence by class as ``class_<k>/<column>``. ``batch``: the rows the step
    trains, with their advantages before step 5 (``compute_advantages(..., normalize=False)``); ``layout``: its
    :func:`agl_lab.lab.loss_scale.token_layout`, when the caller has it (the trainer shares it with the loss scale)."""
    if len(batch) == 0:
        return {}
    view = _view(batch, cfg, layout=layout)
    metrics = {f"{PREFIX}{key}": value for key, value in view.batch_columns().items()}
    own = weighing_mode(cfg)
    for mode in LOSS_MODES:
        columns = view.mode_columns(mode)
        metrics.update({f"{PREFIX}{mode}/{key}": value for key, value in columns.items()})
        if mode == own:
            metrics.update({f"{PREFIX}{key}": value for key, value in columns.items()})
    if own is not None:  # RowView.influence's columns, read without building its table (a DataFrame a step)
        columns = {**view.classes(), **view.class_shares(own)}
        for i, label in enumerate(columns["rows_per_rollout"]):
            for key in INFLUENCE_COLUMNS[3:]:
                metrics[f"{PREFIX}class_{label}/{key}"] = columns[key][i]
    # A value undefined at this step (no solved rollout: no mean_rows_solved; every advantage 0: no cosine) is left
    # out, a gap in the curve as W&B draws one, rather than a NaN every reader of the run would warn about.
    return {key: float(value) for key, value in metrics.items() if math.isfinite(value)}


def _view(batch: DataProto, cfg: DictConfig, *, layout: TokenLayout | None = None) -> RowView:
    """The rows' layout, each row's mean advantage over its trainable tokens, and its reward."""
    layout = token_layout(batch, cfg) if layout is None else layout
    mask, advantages = batch.batch["response_mask"], batch.batch["advantages"]  # (rows, R), (rows, R)
    # Σ A·mask in float64, as if both were cast first: with a bool mask the product in A's dtype is exact (A or a signed
    # 0), so only it is cast; block by block (float64 (rows, R) copies cost more than the rest of the diagnostics).
    sums = torch.cat([_masked_sum(advantages[rows], mask[rows]) for rows in row_blocks(mask)])  # (rows,)
    advantage = sums.numpy() / np.maximum(layout.row_tokens, 1.0)  # (rows,) over the rows' trainable_tokens
    # the row's last turn: on a rollout's last row its outcome, under per-turn rewards and Agent Lightning's alike
    reward = last_turn_values(batch.batch["token_level_scores"], batch.batch["response_mask"]).numpy()  # (rows,)
    return RowView(layout, advantage, reward)


def _masked_sum(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    masked = advantages * mask if mask.dtype == torch.bool else advantages * mask.double()  # (block, R)
    return masked.double().sum(dim=-1)  # (block,)
