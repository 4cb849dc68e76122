"""A panel's settings as the command line that reruns them, and a finished run's settings read back into a panel.

"Copy as command" in the notebooks' curve panels (:class:`agl_lab.ui.curve_view.CurveView`) shows the
``agl-lab train key=value ...`` line for what the panel shows: only the keys that differ from what ``agl-lab train``
composes by itself (the ``short-run`` base), as Hydra dotlist items quoted for a POSIX shell, so the line pasted into
a terminal trains the same run. A run's ``config.yaml`` holds every setting, the curves' own ones included
(``lab.curve_smoothing``, ``lab.curve_overlay``), so :func:`run_config` is all a panel needs to restore them.
Notebooks: ``03_short_training_runs``, ``04_reproduce_curves``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agl_lab.config.compose import short_run_config
from agl_lab.config.dotlist import hydra_value
from agl_lab.config.tree import leaves
from agl_lab.core.keys import EXPERIMENT_NAME, RUN_DIR, SEED

__all__ = ["run_config", "train_command", "train_commands", "train_dotlist"]

# Chosen per run, never worth rerunning with: a fresh run directory is the point of running again.
_PER_RUN = (RUN_DIR,)


def train_command(cfg: DictConfig, view: Mapping[str, Any] | None = None, *, base: DictConfig | None = None) -> str:
    """``agl-lab train k=v ...``: the line that composes ``cfg`` with the curve panel's keys ``view`` set on it
    (:meth:`CurveView.settings`); ``base``: what the command starts from, default ``agl_lab.short_run_config()``."""
    if view:
        cfg = cfg.copy()
        for key, value in view.items():
            OmegaConf.update(cfg, key, value, merge=False)
    return shlex.join(["agl-lab", "train", *train_dotlist(cfg, base=base)])


def train_commands(
    settings: Mapping[str, Sequence[str]], view: Mapping[str, Any], *, seeds: Sequence[int], dotlist: Sequence[str] = ()
) -> str:
    """One ``agl-lab train`` line per setting and seed, as a sweep trains its cells (``settings``: name → dotlist
    items, e.g. ``DEMO_SETTINGS``; ``view``: the curve panel's own keys, :meth:`CurveView.settings`)."""
    extra = [f"{key}={hydra_value(value)}" for key, value in view.items()]
    lines = []
    for name, items in settings.items():
        for seed in seeds:
            cell = [*items, *dotlist, f"{SEED}={seed}", f"{EXPERIMENT_NAME}={name}", *extra]
            lines.append(train_command(short_run_config(dotlist=cell)))
    return "\n".join(lines)


def train_dotlist(cfg: DictConfig, *, base: DictConfig | None = None) -> list[str]:
    """The dotlist items that turn ``base`` (default ``short_run_config()``) into ``cfg``, in the config's order."""
    base = short_run_config() if base is None else base
    theirs = dict(leaves(base))  # unresolved: a key that follows another by interpolation follows it here too
    return [f"{key}={hydra_value(value)}" for key, value in leaves(cfg)
            if key not in _PER_RUN and (key not in theirs or theirs[key] != value)]  # fmt: skip


def run_config(run_dir: str | Path) -> DictConfig:
    """A finished run's resolved config (its ``config.yaml``), to restore a panel from."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no config.yaml: pick a run directory (runs/<run> or a sweep's cell)")
    return OmegaConf.load(path)
