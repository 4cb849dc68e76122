"""How much of a step's gradient mass the rollouts split into several rows carry, against how many they are.

Measured on the rows the actor trains on (after drops), for the config's loss mode, from the same per-token weights
as ``lab/loss_scale`` (:mod:`agl_lab.core.weights` through :func:`agl_lab.lab.loss_scale.token_layout`): a rollout's
mass is the summed weight of its trained tokens for a unit advantage, at ratio 1. Logged by the trainer each step:

* ``lab/multi_row_rollout_share`` — the share of trained rollouts that have 2 or more trained rows;
* ``lab/multi_row_mass_share`` — their share of the step's total mass;
* ``lab/multi_row_overweight`` — mass share − rollout share: 0 when every rollout weighs the same (``per_rollout_mean``,
  whose divisor makes each rollout's mass 1/N), above 0 when a rollout split into more rows weighs more (verl's
  ``seq-mean-token-mean``: k rows weigh k times; ``token-mean``: by tokens, and more rows mean more calls).

The mass metrics are left out for a loss verl's registry lacks (no weights) and on a step without mass. ``agl-lab
reproduce row-split`` (:mod:`agl_lab.studies.reproduce`) compares them over seeds; notebook 01 shows the same
weights per rows-per-rollout class on one batch.
"""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig
from verl import DataProto

from agl_lab.config.modes import LOSS_MODES
from agl_lab.core.keys import MULTI_ROW_MASS_SHARE, MULTI_ROW_OVERWEIGHT, MULTI_ROW_ROLLOUT_SHARE
from agl_lab.core.weights import TokenLayout
from agl_lab.lab.loss_scale import token_layout, weighing_mode

__all__ = ["multi_row_mass"]


def multi_row_mass(batch: DataProto, cfg: DictConfig, *, layout: TokenLayout | None = None) -> dict[str, float]:
    """The step's ``lab/multi_row_*`` metrics (module docstring) for ``batch``, the rows that reach the update.

    ``layout``: :func:`agl_lab.lab.loss_scale.token_layout` of ``batch``, when the caller has it."""
    if len(batch) == 0:
        return {}
    layout = token_layout(batch, cfg) if layout is None else layout
    rows = np.bincount(layout.rollout)  # (rollouts,) trained rows of each rollout (codes are dense)
    multi = rows >= 2  # (rollouts,)
    metrics = {MULTI_ROW_ROLLOUT_SHARE: float(multi.mean())}
    mode = weighing_mode(cfg)
    if mode is None:
        return metrics
    mass = np.bincount(layout.rollout, weights=LOSS_MODES[mode].weight(layout) * layout.row_tokens)  # (rollouts,)
    total = float(mass.sum())
    if not total > 0:
        return metrics
    metrics[MULTI_ROW_MASS_SHARE] = float(mass[multi].sum()) / total
    metrics[MULTI_ROW_OVERWEIGHT] = metrics[MULTI_ROW_MASS_SHARE] - metrics[MULTI_ROW_ROLLOUT_SHARE]
    return metrics
