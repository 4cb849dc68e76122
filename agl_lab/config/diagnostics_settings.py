"""What the weighting diagnostics read from a config: the advantage estimator and the actor update's layout.

The diagnostics of a run or a batch file (:mod:`agl_lab.lab.run_diagnostics`) need eight values of the composed
config, not the config: composing imports verl (Ray, tensordict: seconds), and the values of a base come from the
YAML files composition reads anyway. :func:`base_settings` reads them there without Hydra or verl: verl's flattened
``ppo_trainer`` (``verl/trainer/config/_generated_ppo_trainer.yaml``, found without importing verl), then Agent
Lightning's additions (``conf/agl_trainer.yaml``), then the base's own overrides; ``tests/test_diagnostics_settings.py``
holds them equal to :func:`agl_lab.config.compose.compose_from`'s for every base, so a verl whose packaged defaults
move fails there rather than measuring silently with stale ones. Anything else (a ``key=value`` item, a whole config)
goes through :meth:`DiagnosticsSettings.from_config` on the composed config.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.tree import nest
from agl_lab.core.keys import (
    ESTIMATOR,
    GAMMA,
    LAM,
    LOSS_SCALE_FACTOR,
    MICRO_BATCH,
    MINI_BATCH,
    NORM_ADV_BY_STD,
    ROLLOUT_LEVEL,
    ROLLOUT_N,
)

__all__ = ["DiagnosticsSettings", "base_settings"]

_CONF = Path(__file__).with_name("conf")
_HYDRA = ("hydra", "defaults")  # composition's own keys in a config file, not config
_KEYS = {  # field -> config key (None: verl's default when the key is null or absent)
    "adv_estimator": ESTIMATOR,
    "norm_adv_by_std_in_grpo": NORM_ADV_BY_STD,
    "rollout_level": ROLLOUT_LEVEL,
    "gamma": GAMMA,
    "lam": LAM,
    "rollout_n": ROLLOUT_N,
    "ppo_mini_batch_size": MINI_BATCH,
    "micro_batch_rows": MICRO_BATCH,
    "loss_scale_factor": LOSS_SCALE_FACTOR,
}


@dataclass(frozen=True)
class DiagnosticsSettings:
    """The estimator and the update's layout the diagnostics measure with (``cfg``: the config they came from)."""

    adv_estimator: str
    norm_adv_by_std_in_grpo: bool
    rollout_level: bool  # algorithm.enable_rollout_level_advantage: one advantage per rollout (Agent Lightning)
    gamma: float
    lam: float
    rollout_n: int
    ppo_mini_batch_size: int
    micro_batch_rows: int | None  # ppo_micro_batch_size_per_gpu; None: one micro-batch per mini-batch
    loss_scale_factor: float | None
    base: str = "short-run"  # what verl's estimator is configured with when the numbers need it (composed then)
    cfg: DictConfig | None = field(default=None, compare=False, repr=False)

    @property
    def mini_batch_rows(self) -> int:
        """Rows per PPO mini-batch: ``ppo_mini_batch_size × rollout.n`` (verl counts prompts, rows are rollouts)."""
        return self.ppo_mini_batch_size * self.rollout_n

    @classmethod
    def from_config(cls, cfg: DictConfig, *, base: str = "short-run") -> DiagnosticsSettings:
        """The settings of a composed config (kept for verl's estimators without a numpy path)."""
        return cls(**_values(cfg), base=base, cfg=cfg)

    def config(self) -> DictConfig:
        """The composed config these settings came from (composed from ``base`` when they came from YAML)."""
        if self.cfg is not None:
            return self.cfg
        from agl_lab.config.compose import compose_from

        return compose_from(self.base)


@functools.cache
def base_settings(base: str = "short-run") -> DiagnosticsSettings:
    """A base's settings read from its YAML files (module docstring), as composing ``base`` gives them."""
    from agl_lab.config.bases import BASES

    if base not in BASES:
        raise ValueError(f"unknown base {base!r}: choose from {list(BASES)}")
    verl_defaults = _verl_defaults()
    if verl_defaults is None:  # a verl without its flattened config: compose (imports verl)
        from agl_lab.config.compose import compose_from

        return DiagnosticsSettings.from_config(compose_from(base), base=base)
    layers = [verl_defaults, {k: v for k, v in _yaml(_CONF / "agl_trainer.yaml").items() if k not in _HYDRA}]
    if BASES[base].yaml is not None:
        layers.append(_yaml(BASES[base].yaml))
    merged: dict[str, Any] = copy.deepcopy(layers[0])  # the cached verl defaults stay as read
    for layer in layers[1:]:
        _merge(merged, layer)
    picked = {key: _select(merged, key) for key in _KEYS.values()}
    if any(isinstance(v, str) and "${" in v for v in picked.values()):  # an interpolation: let OmegaConf resolve it
        return DiagnosticsSettings(**_values(OmegaConf.create(merged)), base=base)
    return DiagnosticsSettings(**_values(OmegaConf.create(nest(picked))), base=base)


def _values(cfg: DictConfig) -> dict[str, Any]:
    values = {name: OmegaConf.select(cfg, key, default=None) for name, key in _KEYS.items()}
    missing = [_KEYS[name] for name in ("adv_estimator", "rollout_n", "ppo_mini_batch_size") if values[name] is None]
    if missing:
        raise ValueError(f"the config sets no {', '.join(missing)}: the diagnostics need the estimator and layout")
    return {
        "adv_estimator": str(values["adv_estimator"]),
        "norm_adv_by_std_in_grpo": bool(True if values["norm_adv_by_std_in_grpo"] is None else values[
            "norm_adv_by_std_in_grpo"]),
        "rollout_level": bool(values["rollout_level"]),
        "gamma": float(1.0 if values["gamma"] is None else values["gamma"]),
        "lam": float(1.0 if values["lam"] is None else values["lam"]),
        "rollout_n": int(values["rollout_n"]),
        "ppo_mini_batch_size": int(values["ppo_mini_batch_size"]),
        "micro_batch_rows": None if values["micro_batch_rows"] is None else int(values["micro_batch_rows"]),
        "loss_scale_factor": None if values["loss_scale_factor"] is None else float(values["loss_scale_factor"]),
    }  # fmt: skip


@functools.lru_cache(maxsize=1)
def _verl_defaults() -> dict[str, Any] | None:
    spec = importlib.util.find_spec("verl")  # a top-level package's spec: verl/__init__.py does not run
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    return _yaml(path) if path.is_file() else None


def _yaml(path: Path) -> dict[str, Any]:
    # libyaml when present: verl's flattened config takes 0.3 s to parse in pure Python, 0.02 s in C
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader) or {}


def _merge(into: dict[str, Any], layer: dict[str, Any]) -> None:
    """``layer`` over ``into`` as OmegaConf.merge merges mappings: a mapping recursed into, any other value replaced
    (by a copy: ``into`` never shares a mapping with a layer)."""
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _select(tree: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree
