"""The settings agl_lab is about, in one place: Agent Lightning's three per-rollout settings and agl_lab's divisor.

Each :class:`Setting` has its config key, the one label every panel and the CLI use, what it does, and the
values a control offers. Agent Lightning's default is read from its config (``conf/agl_trainer.yaml``), never
restated. :func:`setting_overrides` turns a choice of the three into config keys (the loss mode through the
mode catalogue, :mod:`agl_lab.config.modes`); the demo's and the sweep notebook's settings are built with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from agl_lab.config.compose import shared_base
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.modes import mode_settings

__all__ = [
    "CAP",
    "CAP_CHOICES",
    "DEMO_BASELINE",
    "DEMO_SETTINGS",
    "DIVISOR",
    "ESTIMATOR",
    "LOSS_AGG_MODE",
    "LOSS_MODE",
    "MINI_BATCH",
    "ROLLOUT_LEVEL",
    "ROLLOUT_N",
    "SETTINGS",
    "Setting",
    "estimator_choices",
    "setting_overrides",
]

ROLLOUT_LEVEL = "algorithm.enable_rollout_level_advantage"
LOSS_MODE = "actor_rollout_ref.actor.policy_loss.loss_mode"
CAP = "agentlightning.max_ppo_update_times"
DIVISOR = "lab.per_rollout_divisor"
ESTIMATOR = "algorithm.adv_estimator"
LOSS_AGG_MODE = "actor_rollout_ref.actor.loss_agg_mode"
MINI_BATCH = "actor_rollout_ref.actor.ppo_mini_batch_size"
ROLLOUT_N = "actor_rollout_ref.rollout.n"

# The update caps a control offers: None = null (no cap, Agent Lightning's default), then 1..8 (the docs recommend
# 2). The config accepts any integer >= 1.
CAP_CHOICES: tuple[int | None, ...] = (None, *range(1, 9))


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
            CAP,
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


def setting_overrides(*, rollout_level: bool, mode: str, cap: int | None) -> dict[str, Any]:
    """The config keys (dotted → typed value) for a choice of the three settings; ``mode`` is a catalogue name."""
    return {ROLLOUT_LEVEL: bool(rollout_level), **mode_settings(mode), CAP: None if cap is None else int(cap)}


# The settings that matter, side by side (``agl-lab demo``, notebooks 03 and 04): Agent Lightning's defaults,
# plain verl (advantage per row, token-mean loss), and the defaults with the cap the docs recommend.
DEMO_SETTINGS: dict[str, tuple[str, ...]] = {
    "both_on": tuple(format_dotlist(setting_overrides(rollout_level=True, mode="per_rollout_mean:rows", cap=None))),
    "both_off": tuple(format_dotlist(setting_overrides(rollout_level=False, mode="token-mean", cap=None))),
    "both_on_cap2": tuple(format_dotlist(setting_overrides(rollout_level=True, mode="per_rollout_mean:rows", cap=2))),
}
# What the demo's (and a sweep's, when it has it) effects are measured against: plain verl, the settings off.
DEMO_BASELINE = "both_off"
