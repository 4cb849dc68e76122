"""The loss-mode catalogue: every normalization agl_lab can weigh, with the config keys that select it.

A *loss mode* is how a PPO mini-batch's loss adds up its tokens' policy-gradient terms, which decides how much
each rollout weighs. Each :class:`LossMode` has its name (``token-mean``, ``per_rollout_mean:rows``, …), a
one-line label (the one the panels, the CLI and the figures show), the per-token weight formula, its source,
the function computing the weights (:mod:`agl_lab.core.weights`), and the config keys that select it in
Agent Lightning's trainer (none for a mode the trainer cannot run). Adding a mode is one entry here plus its
weight function. Exported as ``agl_lab.LOSS_MODES``. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from agl_lab.core import weights
from agl_lab.core.loss import CISPO_PER_ROLLOUT_MEAN_LOSS_MODE, PER_ROLLOUT_MEAN_LOSS_MODE

__all__ = ["LOSS_MODES", "LossMode", "mode_from_config", "mode_settings", "trainable_modes"]

_LOSS_MODE_KEY = "actor_rollout_ref.actor.policy_loss.loss_mode"
_AGG_KEY = "actor_rollout_ref.actor.loss_agg_mode"
_DIVISOR_KEY = "lab.per_rollout_divisor"
_VERL_AGG = "https://github.com/volcengine/verl/blob/v0.9.1/verl/trainer/ppo/core_algos.py (agg_loss)"
_AGL = "https://github.com/microsoft/agent-lightning/blob/main/agentlightning/verl/per_rollout_loss.py"
_AGL_CISPO = (
    "https://pypi.org/project/agentlightning/1.0.2/ (wheel: agentlightning/verl/per_rollout_loss.py, "
    "compute_policy_loss_cispo_per_rollout_mean; trainer.py normalizes the advantages for both per-rollout modes)"
)


@dataclass(frozen=True)
class LossMode:
    """One loss normalization: how it weighs tokens, who defines it, and how to select it in the trainer."""

    name: str
    label: str  # short, one line: what every panel, figure and the CLI show
    family: str  # who defines it
    formula: str  # the per-token weight w = ∂L/∂ℓ (see agl_lab.core.weights for the symbols)
    source: str  # documentation or code
    weight: Callable[[weights.TokenLayout], np.ndarray] = field(repr=False)
    settings: Mapping[str, Any] = field(default_factory=dict)  # dotted config keys → values; empty: not trainable

    @property
    def trainable(self) -> bool:
        """Whether Agent Lightning's trainer (and the lab trainer) can train with this mode."""
        return bool(self.settings)


def _verl(name: str, label: str, formula: str, weight) -> LossMode:
    return LossMode(
        name, label, "verl loss_agg_mode", formula, _VERL_AGG, weight, {_LOSS_MODE_KEY: "vanilla", _AGG_KEY: name}
    )


def _per_rollout(divisor: str, label: str, formula: str, weight, *, loss_mode=PER_ROLLOUT_MEAN_LOSS_MODE, source=_AGL):
    return LossMode(
        f"{loss_mode}:{divisor}",
        label,
        "Agent Lightning",
        formula,
        source,
        weight,
        {_LOSS_MODE_KEY: loss_mode, _DIVISOR_KEY: divisor},
    )


LOSS_MODES: dict[str, LossMode] = {
    m.name: m
    for m in (
        _per_rollout(
            "rows",
            "per_rollout_mean ÷ rows (Agent Lightning v1.0)",
            "w = 1 / (T · N): rollout tokens × trained rows",
            weights.per_rollout_mean_rows,
        ),
        _per_rollout(
            "rollouts",
            "per_rollout_mean ÷ rollouts (Eq. 16)",
            "w = 1 / (T · R): rollout tokens × trained rollouts",
            weights.per_rollout_mean_rollouts,
        ),
        # CISPO's per-token gradient is −sg(clip(ratio))·Â·∇log π on the same normalized advantages, so at ratio 1
        # (a step's first update) its weight is per_rollout_mean's; off ratio 1 it is scaled by the clipped ratio,
        # never zeroed. Agent Lightning 1.0.2 has only the rows divisor.
        _per_rollout(
            "rows",
            "cispo_per_rollout_mean ÷ rows (Agent Lightning 1.0.2)",
            "w = 1 / (T · N) at ratio 1 (× sg(clip(ratio)) off it): rollout tokens × trained rows",
            weights.per_rollout_mean_rows,
            loss_mode=CISPO_PER_ROLLOUT_MEAN_LOSS_MODE,
            source=_AGL_CISPO,
        ),
        _verl("token-mean", "verl token-mean", "w = 1 / N_b: tokens in the mini-batch", weights.token_mean),
        _verl(
            "seq-mean-token-sum",
            "verl seq-mean-token-sum",
            "w = 1 / G: rows per mini-batch",
            weights.seq_mean_token_sum,
        ),
        _verl(
            "seq-mean-token-mean",
            "verl seq-mean-token-mean",
            "w = 1 / (n · G): row tokens × rows per mini-batch",
            weights.seq_mean_token_mean,
        ),
        _verl(
            "seq-mean-token-sum-norm",
            "verl seq-mean-token-sum-norm",
            "w = 1 / (G · H): rows per mini-batch × loss_scale_factor (or response width)",
            weights.seq_mean_token_sum_norm,
        ),
        _verl("token-sum", "verl token-sum", "w = 1", weights.token_sum),
    )
}


def mode_settings(mode: str) -> dict[str, Any]:
    """The config keys (dotted → value) that select catalogue mode ``mode`` in Agent Lightning's trainer."""
    entry = _entry(mode)
    if not entry.trainable:
        raise ValueError(f"loss mode {mode!r} ({entry.family}) is not one Agent Lightning's trainer can train with")
    return dict(entry.settings)


def mode_from_config(cfg: DictConfig) -> str | None:
    """The catalogue mode a composed config trains with, or None when no entry matches (say, ``gspo``)."""
    for name, entry in LOSS_MODES.items():
        if entry.trainable and all(
            OmegaConf.select(cfg, key, default=None) == value for key, value in entry.settings.items()
        ):
            return name
    return None


def trainable_modes() -> list[str]:
    """The catalogue modes a training run can use, in catalogue order."""
    return [name for name, entry in LOSS_MODES.items() if entry.trainable]


def _entry(mode: str) -> LossMode:
    if mode not in LOSS_MODES:
        near = difflib.get_close_matches(str(mode), list(LOSS_MODES), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"unknown loss mode {mode!r}{hint}: choose from {list(LOSS_MODES)}")
    return LOSS_MODES[mode]
