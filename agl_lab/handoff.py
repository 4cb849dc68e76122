"""Hand an experiment to Agent Lightning's real trainer (verl on Ray, GPUs): overrides, dotlist, launch script.

The lab answers a question on a laptop; the real trainer is the distributed engine. An experiment (a composed
config) is exported as

* ``overrides.yaml`` — only the keys whose values differ from Agent Lightning's defaults (verl's
  ``ppo_trainer`` + Agent Lightning's additions), without agl_lab's ``lab:`` section;
* a dotlist (``key=value`` lines) for Agent Lightning's example training scripts;
* ``launch_<name>.py`` — composes Agent Lightning's own config (``pkg://agentlightning/verl``), turns struct
  mode off, merges the overrides and any command-line dotlist (as the example scripts do), and calls
  ``agentlightning.verl.entrypoint.run_ppo(config, train_dataset, val_dataset)``.

Exports never hold secrets: ``agentlightning.agl_key`` (and any key named like a secret) is left out and read
at launch from ``$AGL_KEY`` or ``--agl-key``. ``agentlightning`` needs Python >= 3.12 and GPUs, so it is imported
only inside the launch script's ``main`` and by ``agl-lab launch`` when it is importable.
Notebook: ``notebooks/02_config_check.ipynb``.
"""

from __future__ import annotations

import importlib.util
import pprint
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from agl_lab.config import base_config
from agl_lab.secrets import is_secret_key

__all__ = ["Export", "agentlightning_available", "export_experiment", "format_dotlist", "launch_script", "overrides"]

INSTALL_HINT = (
    "agentlightning is not importable here. It needs Python >= 3.12 and GPU machines with verl's GPU stack: "
    "on such a machine run `pip install agentlightning` (plus verl with vLLM, per Agent Lightning's install docs), "
    "then `AGL_KEY=... python {script} data.train_files=... data.val_files=...`."
)


@dataclass(frozen=True)
class Export:
    overrides: dict[str, Any]  # nested dict of the keys that differ from Agent Lightning's defaults
    dotlist: list[str]  # the same as key=value items
    script: str  # the launch script's source


def overrides(cfg: DictConfig) -> dict[str, Any]:
    """The keys of ``cfg`` that differ from Agent Lightning's defaults, nested, without ``lab:`` and secrets.

    Values are compared unresolved, so verl's interpolations (``${oc.select:...}``) stay interpolations.
    """
    experiment = OmegaConf.to_container(cfg, resolve=False)
    defaults = OmegaConf.to_container(base_config(), resolve=False)
    experiment.pop("lab", None)
    return _diff(experiment, defaults, "")


def format_dotlist(nested: Mapping[str, Any]) -> list[str]:
    """``key.path=value`` items in Hydra's override grammar; keys new to the defaults get Hydra's ``+``."""
    defaults = base_config()
    items = []
    for path, value in _leaves(nested, ""):
        known = OmegaConf.select(defaults, path, default=_ABSENT) is not _ABSENT
        items.append(f"{'' if known else '+'}{path}={_hydra_value(value)}")
    return items


def launch_script(nested: Mapping[str, Any], *, name: str) -> str:
    """Python source of a launch script that runs this experiment on Agent Lightning's real trainer."""
    literal = pprint.pformat(nested, indent=4, width=100, sort_dicts=True)
    return _SCRIPT.format(name=name, overrides=literal)


def export_experiment(cfg: DictConfig, out_dir: str | Path, *, name: str = "experiment") -> Export:
    """Write ``overrides.yaml``, ``dotlist.txt`` and ``launch_<name>.py`` into ``out_dir``; return them too."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"name {name!r} must be letters, digits, '_', '-' or '.' (it names the launch script)")
    nested = overrides(cfg)
    export = Export(overrides=nested, dotlist=format_dotlist(nested), script=launch_script(nested, name=name))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overrides.yaml").write_text(yaml.safe_dump(nested, sort_keys=True))
    (out / "dotlist.txt").write_text("\n".join(export.dotlist) + "\n")
    (out / f"launch_{name}.py").write_text(export.script)
    return export


def agentlightning_available() -> bool:
    """Whether Agent Lightning's verl entrypoint can be imported in this environment."""
    return importlib.util.find_spec("agentlightning") is not None


_ABSENT = object()


def _diff(experiment: Any, defaults: Any, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in experiment.items():
        child = f"{path}.{key}" if path else str(key)
        if is_secret_key(child):
            continue
        default = defaults.get(key, _ABSENT) if isinstance(defaults, Mapping) else _ABSENT
        if isinstance(value, Mapping) and isinstance(default, Mapping) and value:
            nested = _diff(value, default, child)
            if nested:
                out[key] = nested
        elif value != default:
            out[key] = value
    return out


def _leaves(nested: Mapping[str, Any], path: str):
    for key, value in nested.items():
        child = f"{path}.{key}" if path else str(key)
        if isinstance(value, Mapping) and value:
            yield from _leaves(value, child)
        else:
            yield child, value


_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:-]*")
_RESERVED = {"true", "false", "null", "none", "nan", "inf", "-inf"}


def _hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_SCRIPT = '''"""Run the agl_lab experiment {name!r} on Agent Lightning's real trainer (verl on Ray, GPUs).

Generated by agl_lab. Usage, on a machine with Python >= 3.12, GPUs and `pip install agentlightning`:

    AGL_KEY=... python launch_{name}.py data.train_files=/path/train.parquet data.val_files=/path/val.parquet

Extra key=value arguments are Hydra overrides merged last. The Agent Lightning key comes from $AGL_KEY or
--agl-key; it is never written into this file.
"""

import argparse
import os

# The keys that differ from Agent Lightning's defaults (verl ppo_trainer + Agent Lightning's additions).
OVERRIDES = {overrides}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agl-key", default=os.environ.get("AGL_KEY", ""), help="default: $AGL_KEY")
    parser.add_argument("dotlist", nargs="*", help="Hydra overrides, e.g. trainer.n_gpus_per_node=8")
    args = parser.parse_args(argv)

    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from agentlightning.verl.entrypoint import run_ppo

    with initialize_config_module(config_module="agentlightning.verl", version_base=None):
        config = compose(config_name="config")
    OmegaConf.set_struct(config, False)
    config = OmegaConf.merge(config, OmegaConf.create(OVERRIDES), OmegaConf.from_dotlist(args.dotlist))
    config.agentlightning.agl_key = args.agl_key
    for key in (
        "algorithm.enable_rollout_level_advantage",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
        "agentlightning.max_ppo_update_times",
    ):
        print(f"{{key}} = {{OmegaConf.select(config, key)}}")
    run_ppo(config, train_dataset=None, val_dataset=None)


if __name__ == "__main__":
    main()
'''
