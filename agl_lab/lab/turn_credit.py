"""Per-turn credit in the weighting lab: each advantage estimator on one batch, side by side, as the loss modes are.

The catalogue's per-turn estimators (:mod:`agl_lab.core.turn_estimators`: ``mt_grpo``, ``mt_grpo_fix``,
``turn_grpo``) read per-turn rewards placed on each call (``per_turn``); rollout-level GRPO, Agent Lightning's
default, reads one reward per rollout, its return (``summed``: :mod:`agl_lab.core.turn_rewards`). So a batch with
per-turn rewards is studied as two row sets of the same episodes, one per placement (:func:`rows_by_placement`),
and each estimator runs on its own through the trainer's steps: :func:`weighting_by_estimator` gives each one's
:class:`~agl_lab.lab.weighting.Weighting` (every rollout's mass under every loss mode),
:func:`diagnostics_by_estimator` verl PR #7580's diagnostics table with an ``estimator`` column, and
:func:`mass_by_estimator` draws each one's masses by rows per rollout. Notebook:
``notebooks/01_per_rollout_weighting.ipynb``, section 7.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure
from omegaconf import DictConfig, OmegaConf
from verl import DataProto

from agl_lab.core.keys import ESTIMATOR, ROLLOUT_LEVEL
from agl_lab.lab import weight_figures
from agl_lab.lab.diagnostics import batch_diagnostics
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from agl_lab.lab.weighting import Weighting, analyze_weighting

__all__ = ["ESTIMATORS", "diagnostics_by_estimator", "estimator_config", "mass_by_estimator", "rows_by_placement",
           "weighting_by_estimator"]  # fmt: skip

# name shown -> (algorithm.adv_estimator, rollout-level advantage, the placement of the rewards it reads)
ESTIMATORS = {
    "mt_grpo": ("mt_grpo", False, "per_turn"),
    "mt_grpo_fix": ("mt_grpo_fix", False, "per_turn"),
    "turn_grpo": ("turn_grpo", False, "per_turn"),
    "grpo (rollout-level)": ("grpo", True, "summed"),
}


def rows_by_placement(knobs: SyntheticKnobs) -> dict[str, DataProto]:
    """The synthetic episodes of ``knobs`` as rows under each placement of their turn rewards (per_turn, summed)."""
    if knobs.turn_rewards == "off":
        raise ValueError("SyntheticKnobs.turn_rewards is off: set it to per_turn (or summed) to study per-turn credit")
    return {p: synthetic_rows(dataclasses.replace(knobs, turn_rewards=p))[0] for p in ("per_turn", "summed")}


def estimator_config(cfg: DictConfig, name: str) -> DictConfig:
    """A copy of ``cfg`` with estimator ``name``'s ``algorithm.adv_estimator`` and rollout-level setting."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}: choose from {list(ESTIMATORS)}")
    estimator, rollout_level, _ = ESTIMATORS[name]
    out = copy.deepcopy(cfg)
    OmegaConf.update(out, ESTIMATOR, estimator)
    OmegaConf.update(out, ROLLOUT_LEVEL, rollout_level)
    return out


def weighting_by_estimator(
    rows: Mapping[str, DataProto], cfg: DictConfig, *, estimators: Sequence[str] = tuple(ESTIMATORS), **kwargs
) -> dict[str, Weighting]:
    """Each estimator's weighting analysis on the rows of its placement (``kwargs``: :func:`analyze_weighting`'s)."""
    out = {}
    for name in estimators:
        _, rollout_level, placement = ESTIMATORS[name]
        out[name] = analyze_weighting(_rows(rows, placement), estimator_config(cfg, name),
                                      rollout_levels=(rollout_level,), **kwargs)[0]  # fmt: skip
    return out


def diagnostics_by_estimator(
    rows: Mapping[str, DataProto],
    cfg: DictConfig,
    *,
    modes: Sequence[str] | None = None,
    estimators: Sequence[str] = tuple(ESTIMATORS),
) -> pd.DataFrame:
    """verl PR #7580's diagnostics (:func:`~agl_lab.lab.diagnostics.batch_diagnostics`) under each estimator: one
    row per (estimator, mode); ``attrs["influence"]`` per (estimator, mode, rows-per-rollout class)."""
    tables, influence = [], []
    for name in estimators:
        placement = ESTIMATORS[name][2]
        table = batch_diagnostics(_rows(rows, placement), estimator_config(cfg, name), modes=modes)
        influence.append(table.attrs["influence"].assign(estimator=name))
        table.attrs = {}
        tables.append(table.assign(estimator=name))
    out = pd.concat(tables, ignore_index=True)
    out = out[["estimator", *[c for c in out.columns if c != "estimator"]]]
    out.attrs["influence"] = pd.concat(influence, ignore_index=True)
    return out


def mass_by_estimator(weightings: Mapping[str, Weighting], *, mode: str = "per_rollout_mean:rows") -> Figure:
    """Every rollout's mass under ``mode`` against its rows, one panel per estimator (shared y axis)."""
    figure = Figure(figsize=(5 * len(weightings), 4), layout="constrained")
    axes = figure.subplots(1, len(weightings), sharey=True, squeeze=False)[0]
    for ax, (name, weighting) in zip(axes, weightings.items(), strict=True):
        weight_figures.mass_vs_rows(weighting.rollouts, mode=mode, rollout_level=ESTIMATORS[name][1], ax=ax)
        ax.set_title(f"{name}: mass under {mode}", fontsize=11)
    return figure


def _rows(rows: Mapping[str, DataProto], placement: str) -> DataProto:
    if placement not in rows:
        raise ValueError(f"no rows with turn rewards placed {placement!r}: give rows_by_placement(...)'s dict")
    return rows[placement]
