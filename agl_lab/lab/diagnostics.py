"""The field's weighting diagnostics on one batch: verl PR #7580's table, generalised to every catalogue mode.

verl PR #7580 reports, per training run, how far the objective's view of the rewards is from the trajectories'
(the rows of a failing trajectory outnumber a solved one's, so an objective that weighs rows alike sees a lower
solve rate than the trajectories have). Here the same columns, for any batch and every loss mode of
:data:`agl_lab.LOSS_MODES`, from the rows' per-token weights (:mod:`agl_lab.core.weights`) at ratio 1. A row's
weight ``m_i = Σ_t w_t`` is its gradient mass for a unit advantage; a rollout is *solved* when its reward is above 0.

=======================  ===========================================================================================
``trajectories``, ``rows``  rollouts and rows in the batch
``solve_by_trajectory``  solved rollouts ÷ rollouts (the ground truth)
``solve_by_row``         the solve rate the mode's objective sees: ``Σ m_i·solved_i ÷ Σ m_i`` over rows (equal row
                         weights, verl's seq-mean-token-mean, give the PR's "solve % by row")
``gap``                  solve_by_trajectory − solve_by_row (the PR: +10.5 to +13.8 points, −6.4 in a collapse)
``mean_rows_solved``     rows per solved rollout, and per failed one (``mean_rows_failed``); the PR's "mean N"
``adv_cosine``           cosine between the rows' weighted advantages ``m_i·A_i`` and their unweighted ``A_i`` (the
                         PR's cos(adv_w, adv_u) under 1/N: 0.73–0.75); 1 when the mode weighs every row alike
``ess_fraction``         Kish's effective sample size of the row weights, ``(Σ m)² ÷ Σ m²``, ÷ rows (the PR's ESS
                         under 1/N: 53–60%); 1 when every row weighs the same
=======================  ===========================================================================================

:func:`influence_by_class` gives, per rows-per-rollout class (1..6+, :func:`agl_lab.lab.class_stats.row_classes`),
the class's share of the rollouts, of the mode's gradient mass, and its failure fraction (the PR: "N=10 trajectories
are 13% of trajectories but 34% of the gradient, 76% of them failures"). :func:`batch_diagnostics` computes both on
a batch as given (marked rows out, every other row kept, advantages from the config's estimator before any loss
normalization); :func:`step_diagnostics` on the rows a training step trains, as ``lab/diagnostics/*`` metrics.
``agl_lab.weighting_diagnostics`` takes a batch, a batch file or a run; notebook ``06_weighting_proposals``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_response_mask

from agl_lab.config.modes import LOSS_MODES, weighing_mode
from agl_lab.core.pipeline import compute_advantages
from agl_lab.core.rows import require_fields
from agl_lab.core.turns import last_turn_values
from agl_lab.core.update_cap import drop_marked_rows
from agl_lab.core.weights import TokenLayout
from agl_lab.lab.class_stats import row_classes
from agl_lab.lab.loss_scale import token_layout

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

COLUMNS = [
    "mode", "trajectories", "rows", "solve_by_trajectory", "solve_by_row", "gap", "mean_rows_solved",
    "mean_rows_failed", "adv_cosine", "ess_fraction",
]  # fmt: skip
INFLUENCE_COLUMNS = ["mode", "rows_per_rollout", "rollouts", "rollout_share", "gradient_share", "failure_fraction"]
PREFIX = "lab/diagnostics/"
_BATCH_COLUMNS = COLUMNS[1:3] + ["solve_by_trajectory", "mean_rows_solved", "mean_rows_failed"]
_MODE_COLUMNS = ["solve_by_row", "gap", "adv_cosine", "ess_fraction"]
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
    view = _View.of(batch, cfg)
    shared = view.batch_columns()
    table = pd.DataFrame([{"mode": m, **shared, **view.mode_columns(m)} for m in modes], columns=COLUMNS)
    table.attrs["influence"] = pd.concat([view.influence(m) for m in modes], ignore_index=True)
    return table


def influence_by_class(batch: DataProto, cfg: DictConfig, *, modes: Sequence[str]) -> pd.DataFrame:
    """:data:`INFLUENCE_COLUMNS`: per mode and rows-per-rollout class, shares of rollouts and of gradient mass."""
    view = _View.of(batch, cfg)
    return pd.concat([view.influence(m) for m in check_modes(modes)], ignore_index=True)


def step_diagnostics(batch: DataProto, cfg: DictConfig) -> dict[str, float]:
    """A training step's ``lab/diagnostics/*``: the batch columns, every mode's as ``<mode>/<column>``, the run's own
    mode's also unprefixed, and its influence by class as ``class_<k>/<column>``. ``batch``: the rows the step
    trains, with their advantages before step 5 (``compute_advantages(..., normalize=False)``)."""
    if len(batch) == 0:
        return {}
    view = _View.of(batch, cfg)
    metrics = {f"{PREFIX}{key}": value for key, value in view.batch_columns().items()}
    own = weighing_mode(cfg)
    for mode in LOSS_MODES:
        columns = view.mode_columns(mode)
        metrics.update({f"{PREFIX}{mode}/{key}": value for key, value in columns.items()})
        if mode == own:
            metrics.update({f"{PREFIX}{key}": value for key, value in columns.items()})
    if own is not None:
        for line in view.influence(own).to_dict("records"):
            for key in INFLUENCE_COLUMNS[3:]:
                metrics[f"{PREFIX}class_{line['rows_per_rollout']}/{key}"] = line[key]
    # A value undefined at this step (no solved rollout: no mean_rows_solved; every advantage 0: no cosine) is left
    # out, a gap in the curve as W&B draws one, rather than a NaN every reader of the run would warn about.
    return {key: float(value) for key, value in metrics.items() if math.isfinite(value)}


def check_modes(modes: Sequence[str] | None) -> list[str]:
    """``modes`` as a list (None: the whole catalogue); an unknown one is a ValueError listing the catalogue."""
    modes = list(LOSS_MODES) if modes is None else list(modes)
    unknown = [m for m in modes if m not in LOSS_MODES]
    if unknown:
        raise ValueError(f"unknown loss modes {unknown}: choose from {list(LOSS_MODES)}")
    return modes


class _View:
    """A batch as the diagnostics read it: the layout, each row's advantage and each rollout's outcome."""

    def __init__(self, layout: TokenLayout, advantage: np.ndarray, reward: np.ndarray) -> None:
        self.layout = layout
        self.advantage = advantage  # (rows,) each row's mean advantage over its trainable tokens
        codes = layout.rollout  # (rows,) dense rollout codes
        self.rows = np.bincount(codes)  # (rollouts,) k
        last = len(codes) - 1 - np.unique(codes[::-1], return_index=True)[1]  # (rollouts,) each rollout's last row
        self.solved = reward[last] > 0  # (rollouts,): its last turn holds its outcome (per-turn rewards too)
        self._weights: dict[str, np.ndarray] = {}

    @classmethod
    def of(cls, batch: DataProto, cfg: DictConfig) -> _View:
        layout = token_layout(batch, cfg)
        mask = batch.batch["response_mask"].double()  # (rows, R)
        tokens = mask.sum(dim=-1).clamp_min(1.0)  # (rows,)
        advantage = ((batch.batch["advantages"].double() * mask).sum(dim=-1) / tokens).numpy()  # (rows,)
        reward = last_turn_values(batch.batch["token_level_scores"], batch.batch["response_mask"]).numpy()  # (rows,)
        return cls(layout, advantage, reward)

    def row_mass(self, mode: str) -> np.ndarray:
        """(rows,) Σ over a row's trainable tokens of the mode's per-token weight (cached per mode)."""
        if mode not in self._weights:
            self._weights[mode] = LOSS_MODES[mode].weight(self.layout) * self.layout.row_tokens
        return self._weights[mode]

    def batch_columns(self) -> dict[str, Any]:
        solved_rows, failed_rows = self.rows[self.solved], self.rows[~self.solved]
        return {
            "trajectories": len(self.rows),
            "rows": int(self.rows.sum()),
            "solve_by_trajectory": float(self.solved.mean()) if len(self.rows) else np.nan,
            "mean_rows_solved": float(solved_rows.mean()) if len(solved_rows) else np.nan,
            "mean_rows_failed": float(failed_rows.mean()) if len(failed_rows) else np.nan,
        }

    def mode_columns(self, mode: str) -> dict[str, float]:
        mass = self.row_mass(mode)  # (rows,)
        total, squares = float(mass.sum()), float((mass**2).sum())
        solved = self.solved[self.layout.rollout]  # (rows,)
        weighted = mass * self.advantage  # (rows,) adv_w; adv_u is self.advantage
        norms = float(np.linalg.norm(weighted) * np.linalg.norm(self.advantage))
        by_row = float(mass @ solved) / total if total > 0 else np.nan
        return {
            "solve_by_row": by_row,
            "gap": float(self.solved.mean()) - by_row if len(self.rows) else np.nan,
            "adv_cosine": float(weighted @ self.advantage) / norms if norms > 0 else np.nan,
            "ess_fraction": total**2 / squares / len(mass) if squares > 0 else np.nan,
        }

    def influence(self, mode: str) -> pd.DataFrame:
        classes, labels = row_classes(self.rows)  # (rollouts,)
        mass = np.bincount(self.layout.rollout, weights=self.row_mass(mode), minlength=len(self.rows))  # (rollouts,)
        total = float(mass.sum())
        lines = []
        for k in np.unique(classes):
            members = classes == k
            lines.append({
                "mode": mode,
                "rows_per_rollout": labels[int(k)],
                "rollouts": int(members.sum()),
                "rollout_share": float(members.mean()),
                "gradient_share": float(mass[members].sum()) / total if total > 0 else np.nan,
                "failure_fraction": float((~self.solved[members]).mean()),
            })  # fmt: skip
        return pd.DataFrame(lines, columns=INFLUENCE_COLUMNS)
