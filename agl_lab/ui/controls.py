"""Building blocks of the notebooks' widget panels (ipywidgets 8): the settings controls.

The settings controls are built from the catalogues (:mod:`agl_lab.config.settings`, :mod:`agl_lab.config.modes`),
so every panel offers the same choices under the same labels, and read back into config keys by one function,
:func:`control_overrides`. The panels themselves: :class:`agl_lab.ui.weighting_panel.WeightingPanel` (notebook
01), :class:`agl_lab.ui.config_panel.ConfigPanel` (notebook 02) and :class:`agl_lab.ui.training_panel.TrainingPanel`
(notebook 03). Compute and render happen in the package; notebooks only wire and display.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as w
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.modes import LOSS_MODES, mode_from_config
from agl_lab.config.settings import MAX_PPO_UPDATE_TIMES_CHOICES, NORMALIZATION, SETTINGS, setting_overrides
from agl_lab.core.keys import LOSS_AGG_MODE, LOSS_MODE, MAX_PPO_UPDATE_TIMES, MINI_BATCH, ROLLOUT_LEVEL
from agl_lab.lab.synthetic import CALL_PATTERNS, SyntheticKnobs, knob_range

__all__ = [
    "NULL_TIMES",
    "OWN_MODE",
    "WIDE",
    "control_overrides",
    "control_settings",
    "initial_mode",
    "settings_controls",
]

NULL_TIMES = "none"  # the max_ppo_update_times control's value for null (a selection widget cannot hold None)
OWN_MODE = "config"  # the loss-mode control's value for "the config's own loss" (one the catalogue lacks)
WIDE = {"description_width": "initial"}


def settings_controls(cfg: DictConfig, *, modes: Sequence[str], keep_own: bool = False) -> dict[str, w.ValueWidget]:
    """The settings every panel shares, started from ``cfg``: rollout-level advantage, the loss mode (one of
    ``modes``, catalogue names), the update cap, the PPO mini-batch size (prompts) and the seed.

    ``keep_own``: when the config's loss is not in the catalogue (``gspo``, say), offer it as a first option
    (value :data:`OWN_MODE`) and start there, rather than switching the config to another mode.
    """
    times = OmegaConf.select(cfg, MAX_PPO_UPDATE_TIMES)
    times_options = [
        (NULL_TIMES if t is None else str(t), NULL_TIMES if t is None else t) for t in MAX_PPO_UPDATE_TIMES_CHOICES
    ]
    mode_options = [(LOSS_MODES[m].label, m) for m in modes]
    if keep_own and mode_from_config(cfg) not in modes:
        own = f"the config's own ({OmegaConf.select(cfg, LOSS_MODE)}, {OmegaConf.select(cfg, LOSS_AGG_MODE)})"
        mode_options.insert(0, (own, OWN_MODE))
    return {
        "rollout_level": w.Checkbox(
            value=bool(OmegaConf.select(cfg, ROLLOUT_LEVEL)),
            description=SETTINGS[ROLLOUT_LEVEL].label,
            indent=False,
        ),
        "mode": w.Dropdown(
            options=mode_options,
            value=mode_options[0][1] if mode_options[0][1] == OWN_MODE else initial_mode(cfg, modes),
            description=NORMALIZATION,
            style=WIDE,
            layout=w.Layout(width="400px"),  # the longest label fits, so a label is never cut
        ),
        "max_ppo_update_times": w.SelectionSlider(
            options=times_options,
            value=NULL_TIMES if times is None else min(int(times), MAX_PPO_UPDATE_TIMES_CHOICES[-1]),
            description=SETTINGS[MAX_PPO_UPDATE_TIMES].label,
            continuous_update=False,
            style=WIDE,
        ),
        "ppo_mini_batch_size": w.BoundedIntText(
            value=int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size),
            min=1,
            max=100_000,
            description="ppo_mini_batch_size (prompts)",
            style=WIDE,
        ),
        "seed": w.BoundedIntText(value=int(cfg.lab.seed), min=0, max=2**31 - 1, description="seed", style=WIDE),
    }


def control_settings(controls: dict[str, w.ValueWidget]) -> dict[str, Any]:
    """The shared controls' values, typed: rollout_level, mode, max_ppo_update_times (None: no cap), mini-batch,
    seed."""
    times = controls["max_ppo_update_times"].value
    return {
        "rollout_level": bool(controls["rollout_level"].value),
        "mode": controls["mode"].value,
        "max_ppo_update_times": None if times == NULL_TIMES else int(times),
        "ppo_mini_batch_size": int(controls["ppo_mini_batch_size"].value),
        "seed": int(controls["seed"].value),
    }


def control_overrides(controls: dict[str, w.ValueWidget]) -> dict[str, Any]:
    """The shared controls as config keys (dotted → typed value): the three settings and the mini-batch size."""
    s = control_settings(controls)
    own = s["mode"] == OWN_MODE or not LOSS_MODES[s["mode"]].trainable  # then the config's loss stays as it is
    keys = setting_overrides(
        rollout_level=s["rollout_level"],
        mode=None if own else s["mode"],
        max_ppo_update_times=s["max_ppo_update_times"],
    )
    return {**keys, MINI_BATCH: s["ppo_mini_batch_size"]}


def initial_mode(cfg: DictConfig, modes: Sequence[str]) -> str:
    """The config's loss mode if it is among ``modes``, else the first of them (a panel says so)."""
    mode = mode_from_config(cfg)
    return mode if mode in modes else modes[0]


def generator_controls(knobs: SyntheticKnobs) -> dict[str, w.ValueWidget]:
    """A control per synthetic-generator knob, its range from the knob's own metadata (as validated)."""
    controls: dict[str, w.ValueWidget] = {
        "calls": w.Dropdown(options=CALL_PATTERNS, value=knobs.calls, description="calls per rollout", style=WIDE),
        "level": w.ToggleButtons(
            options=("trajectory", "transition"), value=knobs.level, style={"button_width": "90px"}
        ),
    }
    for name in (
        "n_prompts",
        "rollouts_per_prompt",
        "min_calls",
        "max_calls",
        "fail_extra_calls",
        "min_tokens",
        "max_tokens",
    ):
        low, high = knob_range(name)
        controls[name] = w.BoundedIntText(
            value=getattr(knobs, name), min=low, max=high, description=name.replace("_", " "), style=WIDE
        )
    for name in ("success_prob", "partial_credit", "break_prob", "continue_prob"):
        low, high = knob_range(name)
        controls[name] = w.FloatSlider(
            value=getattr(knobs, name),
            min=low,
            max=high,
            step=0.05,
            description=name.replace("_", " "),
            continuous_update=False,
            style=WIDE,
        )
    return controls
