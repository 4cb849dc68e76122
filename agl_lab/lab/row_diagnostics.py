"""The field's weighting diagnostics as arithmetic on rows: verl PR #7580's table, generalised to every catalogue mode.

verl PR #7580 reports, per training run, how far the objective's view of the rewards is from the trajectories'
(the rows of a failing trajectory outnumber a solved one's, so an objective that weighs rows alike sees a lower
solve rate than the trajectories have). Here the same columns, for any rows and every loss mode of
:data:`agl_lab.LOSS_MODES`, from the rows' per-token weights (:mod:`agl_lab.core.weights`) at ratio 1. A row's
weight ``m_i = Σ_t w_t`` is its gradient mass for a unit advantage; a rollout is *solved* when its reward is above 0.

=======================  ===========================================================================================
``trajectories``, ``rows``  rollouts and rows measured
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

:meth:`RowView.influence` gives, per rows-per-rollout class (one per row count the rows have,
:func:`agl_lab.lab.class_stats.row_classes`), the class's share of the rollouts, of the mode's gradient mass, and its
failure fraction (the PR: "N=10 trajectories are 13% of trajectories but 34% of the gradient, 76% of them
failures"). Every column is a ratio, so a constant factor in every row's weight (the mini-batch's row count, the
horizon of ``seq-mean-token-sum-norm``) cancels. This module needs numpy and the weight catalogue only: a batch
(:mod:`agl_lab.lab.diagnostics`) and a run's rows (:mod:`agl_lab.lab.run_diagnostics`) both measure through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agl_lab.config.modes import LOSS_MODES
from agl_lab.core.weights import TokenLayout
from agl_lab.lab.class_stats import row_classes

__all__ = ["COLUMNS", "INFLUENCE_COLUMNS", "MODE_COLUMNS", "PREFIX", "RowView", "check_modes"]

COLUMNS = [
    "mode", "trajectories", "rows", "solve_by_trajectory", "solve_by_row", "gap", "mean_rows_solved",
    "mean_rows_failed", "adv_cosine", "ess_fraction",
]  # fmt: skip
MODE_COLUMNS = ["solve_by_row", "gap", "adv_cosine", "ess_fraction"]  # the columns that depend on the mode
INFLUENCE_COLUMNS = ["mode", "rows_per_rollout", "rollouts", "rollout_share", "gradient_share", "failure_fraction"]
PREFIX = "lab/diagnostics/"


def check_modes(modes: Sequence[str] | None) -> list[str]:
    """``modes`` as a list (None: the whole catalogue); an empty or unknown one is a ValueError naming ``modes``."""
    if isinstance(modes, str):
        raise ValueError(f"modes must be a list of loss modes, got the string {modes!r}: use [{modes!r}]")
    modes = list(LOSS_MODES) if modes is None else list(modes)
    if not modes:
        raise ValueError(f"modes is empty: give at least one loss mode of {list(LOSS_MODES)}, or None for all")
    unknown = [m for m in modes if m not in LOSS_MODES]
    if unknown:
        raise ValueError(f"unknown loss modes {unknown}: choose from {list(LOSS_MODES)}")
    return modes


class RowView:
    """Rows as the diagnostics read them: the layout, each row's advantage and each rollout's outcome."""

    def __init__(self, layout: TokenLayout, advantage: np.ndarray, reward: np.ndarray) -> None:
        self.layout = layout
        self.advantage = np.asarray(advantage, dtype=np.float64)  # (rows,) mean advantage per trainable token
        codes = layout.rollout  # (rows,) dense rollout codes
        self.rows = np.bincount(codes)  # (rollouts,) k
        last = len(codes) - 1 - np.unique(codes[::-1], return_index=True)[1]  # (rollouts,) each rollout's last row
        self.solved = np.asarray(reward)[last] > 0  # (rollouts,): its last row holds its outcome (per-turn rewards too)
        self._weights: dict[str, np.ndarray] = {}

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
        """:data:`INFLUENCE_COLUMNS` for ``mode``, one line per rows-per-rollout class the rows have."""
        return pd.DataFrame({"mode": mode, **self.classes(), **self.class_shares(mode)}, columns=INFLUENCE_COLUMNS)

    def classes(self) -> dict[str, Any]:
        """The mode-free influence columns: each class's label, rollouts, share of rollouts and failure fraction."""
        if not hasattr(self, "_classes"):
            classes, labels = row_classes(self.rows)  # (rollouts,)
            present, self._members = np.unique(classes, return_inverse=True)  # (classes,), (rollouts,)
            count = np.bincount(self._members, minlength=len(present))  # (classes,)
            failed = np.bincount(self._members, weights=~self.solved, minlength=len(present))  # (classes,)
            self._classes = {
                "rows_per_rollout": [labels[int(k)] for k in present],
                "rollouts": count.astype(np.int64),
                "rollout_share": count / max(len(self.rows), 1),
                "failure_fraction": failed / np.maximum(count, 1),
            }
        return self._classes

    def class_shares(self, mode: str) -> dict[str, np.ndarray]:
        """Each class's share of the mode's gradient mass (``gradient_share``)."""
        n_classes = len(self.classes()["rollouts"])
        mass = np.bincount(self.layout.rollout, weights=self.row_mass(mode), minlength=len(self.rows))  # (rollouts,)
        total = float(mass.sum())
        class_mass = np.bincount(self._members, weights=mass, minlength=n_classes)  # (classes,)
        return {"gradient_share": class_mass / total if total > 0 else np.full(n_classes, np.nan)}
