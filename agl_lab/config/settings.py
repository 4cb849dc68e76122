"""The settings agl_lab is about, in one place: Agent Lightning's three per-rollout settings and agl_lab's divisor.

Each :class:`Setting` has its config key, the one label every panel and the CLI use, what it does, and the
values a control offers. Agent Lightning's default is read from its config (``conf/agl_trainer.yaml``), never
restated. :func:`setting_overrides` turns a choice of the three into config keys (the normalization through the
catalogue, :mod:`agl_lab.config.modes`) and :func:`configure` writes keys into a config: the one path from settings
to config for the CLI's settings, the panels and the lab. The keys themselves are :mod:`agl_lab.core.keys`'.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo import core_algos

from agl_lab.config.compose import shared_base
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.modes import mode_settings
from agl_lab.core.keys import (
    DIVISOR,
    ESTIMATOR,
    LOSS_MODE,
    MAX_PPO_UPDATE_TIMES,
    ROLLOUT_LEVEL,
)

__all__ = [
    "DEMO_BASELINE",
    "DEMO_SETTINGS",
    "MAX_PPO_UPDATE_TIMES_CHOICES",
    "NORMALIZATION",
    "SETTINGS",
    "Setting",
    "configure",
    "estimator_choices",
    "setting_overrides",
]


# The values of max_ppo_update_times a control offers: None = null (Agent Lightning's default), then 1..8 (the docs
# recommend 2). What the config accepts is the constraints table's rule (agl_lab.config.constraints).
MAX_PPO_UPDATE_TIMES_CHOICES: tuple[int | None, ...] = (None, *range(1, 9))
# The catalogue's concept (agl_lab.LOSS_MODES: policy loss + loss_agg_mode + divisor), as every panel and the CLI
# name it; verl's actor_rollout_ref.actor.policy_loss.loss_mode key is one part of it ("policy loss").
NORMALIZATION = "normalization"
_UNCHANGED: Any = object()  # setting_overrides: a setting not chosen (None is a choice for max_ppo_update_times)


@dataclass(frozen=True)
class Setting:
    """One setting: its key, the label shown for it everywhere, and what it does."""

    key: str
    label: str
    meaning: str

    @property
    def default(self) -> Any:
        """Agent Lightning's default, as its config defines it."""
        return OmegaConf.select(shared_base(), self.key, default=None)  # read only: no copy of the base


SETTINGS: dict[str, Setting] = {
    s.key: s
    for s in (
        Setting(
            ROLLOUT_LEVEL,
            "rollout-level advantage",
            "one advantage per rollout (estimator on each rollout's first row), broadcast to its rows",
        ),
        Setting(
            LOSS_MODE,
            "policy loss",
            "per_rollout_mean: advantage / (rollout tokens × rows), clipped PPO summed over tokens",
        ),
        Setting(
            MAX_PPO_UPDATE_TIMES,
            "max_ppo_update_times",
            "at most this many PPO mini-batch updates per step; surplus rows dropped (null: no cap)",
        ),
        Setting(
            DIVISOR,
            "per_rollout_mean divisor",
            "rows = Agent Lightning v1.0 (total n_rollouts/n_rows); rollouts = Eq. 16 (total 1)",
        ),
        Setting(ESTIMATOR, "advantage estimator", "verl's advantage estimator (GRPO, RLOO, ...)"),
    )
}


def estimator_choices() -> list[str]:
    """verl's advantage estimators, as its registry and enum know them (what ``algorithm.adv_estimator`` accepts)."""
    return sorted({e.value for e in core_algos.AdvantageEstimator} | set(core_algos.ADV_ESTIMATOR_REGISTRY))


def setting_overrides(
    *, rollout_level: bool | None = None, mode: str | None = None, max_ppo_update_times: Any = _UNCHANGED
) -> dict[str, Any]:
    """The config keys (dotted → typed value) for a choice of the three settings: the one path from settings to
    config that the CLI's settings (demo, sweeps, experiments), the panels and the lab take. ``mode`` is a catalogue
    normalization (its keys from :func:`agl_lab.config.modes.mode_settings`); ``max_ppo_update_times=None`` is null;
    a setting not given is left out."""
    keys: dict[str, Any] = {}
    if rollout_level is not None:
        keys[ROLLOUT_LEVEL] = bool(rollout_level)
    if mode is not None:
        keys.update(mode_settings(mode))
    if max_ppo_update_times is not _UNCHANGED:
        keys[MAX_PPO_UPDATE_TIMES] = None if max_ppo_update_times is None else int(max_ppo_update_times)
    return keys


def configure(cfg: DictConfig, overrides: Mapping[str, Any], *, in_place: bool = False) -> DictConfig:
    """``cfg`` with ``overrides`` (dotted key → value, :func:`setting_overrides`' and a panel's own keys) written in:
    a copy, or ``cfg`` itself with ``in_place`` (a panel's own config, edited on every change)."""
    out = cfg if in_place else copy.deepcopy(cfg)
    for key, value in overrides.items():
        OmegaConf.update(out, key, value, merge=False)
    return out


# The settings that matter, side by side (``agl-lab demo``, notebooks 03 and 04): Agent Lightning's defaults,
# plain verl (advantage per row, token-mean loss), and the defaults with the cap the docs recommend.
DEMO_SETTINGS: dict[str, tuple[str, ...]] = {
    name: tuple(format_dotlist(setting_overrides(rollout_level=level, mode=mode, max_ppo_update_times=times)))
    for name, level, mode, times in (
        ("both_on", True, "per_rollout_mean:rows", None),
        ("both_off", False, "token-mean", None),
        ("both_on_cap2", True, "per_rollout_mean:rows", 2),
    )
}
# What the demo's (and a sweep's, when it has it) effects are measured against: plain verl, the settings off.
DEMO_BASELINE = "both_off"
