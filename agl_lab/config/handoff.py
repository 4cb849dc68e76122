"""Hand an experiment to Agent Lightning's real trainer (verl on Ray, GPUs): overrides, dotlist, launch script.

The lab answers a question on a laptop; the real trainer is the distributed engine. An experiment (a composed
config) is exported as

* ``overrides.yaml`` — only the keys whose values differ from Agent Lightning's defaults (verl's
  ``ppo_trainer`` + Agent Lightning's additions), without agl_lab's ``lab:`` section;
* a dotlist (``key=value`` lines) for Agent Lightning's example training scripts;
* ``launch_<name>.py`` — composes Agent Lightning's own config (``pkg://agentlightning/verl``), turns struct
  mode off, merges the overrides and any command-line dotlist (as the example scripts do), and calls
  ``agentlightning.verl.entrypoint.run_ppo(config, train_dataset, val_dataset)``. With ``--record DIR`` (given at
  export, ``record=``, or to the script) it first hands the config to agl_lab's recorder
  (:func:`agl_lab.training.agl_recorder.record_run`): each step's trained rows go to ``DIR`` and the lab's
  weighting diagnostics into the run's logger.

Exports never hold secrets: ``agentlightning.agl_key`` (and any key named like a secret) is left out and read
at launch from ``$AGL_KEY`` or ``--agl-key``. ``agentlightning`` needs Python >= 3.12 and GPUs, so it is imported
only inside the launch script's ``main`` and by ``agl-lab launch`` when it is importable.
Notebook: ``notebooks/02_config_check.ipynb``.
"""

from __future__ import annotations

import functools
import importlib.util
import pprint
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.compose import shared_base
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.secrets import is_secret_key
from agl_lab.config.tree import leaves, nest
from agl_lab.core.keys import THREE_SETTINGS

__all__ = ["Export", "export_experiment", "launch_blockers", "launch_script", "overrides"]

INSTALL_HINT = (
    "Agent Lightning's trainer cannot run here ({reasons}). It needs Python >= 3.12 and GPU machines with verl's GPU "
    "stack: on such a machine run `pip install agentlightning` (plus verl with vLLM, per Agent Lightning's install "
    "docs), then `AGL_KEY=... python {script} data.train_files=... data.val_files=...`."
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
    experiment.pop("lab", None)
    defaults = _default_leaves()
    changed = {
        path: value
        for path, value in leaves(experiment)
        if not is_secret_key(path) and defaults.get(path, _ABSENT) != value
    }
    return nest(changed)


@functools.lru_cache(maxsize=1)
def _default_leaves() -> dict[str, Any]:
    """Agent Lightning's defaults (the shared base, which never changes) as dotted path → unresolved value."""
    return dict(leaves(OmegaConf.to_container(shared_base(), resolve=False)))


def launch_script(nested: Mapping[str, Any], *, name: str, record: str | None = None) -> str:
    """Python source of a launch script that runs this experiment on Agent Lightning's real trainer; ``record``: the
    folder its ``--record`` defaults to (None: no recording unless the script is given ``--record``)."""
    literal = pprint.pformat(nested, indent=4, width=100, sort_dicts=True)
    keys = THREE_SETTINGS  # the three settings the user checks before a run
    return _SCRIPT.format(name=name, overrides=literal, keys=keys, record=record)


def export_experiment(
    cfg: DictConfig, out_dir: str | Path, *, name: str = "experiment", record: str | None = None
) -> Export:
    """Write ``overrides.yaml``, ``dotlist.txt`` and ``launch_<name>.py`` into ``out_dir``; return them too.

    ``record``: a folder the launched run records each step's trained rows into (:func:`launch_script`)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"name {name!r} must be letters, digits, '_', '-' or '.' (it names the launch script)")
    if record is not None and not str(record).strip():
        raise ValueError("record must name a folder (say runs/my_run), not an empty string")
    nested = overrides(cfg)
    script = launch_script(nested, name=name, record=None if record is None else str(record))
    export = Export(overrides=nested, dotlist=format_dotlist(nested), script=script)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overrides.yaml").write_text(yaml.safe_dump(nested, sort_keys=True))
    (out / "dotlist.txt").write_text("\n".join(export.dotlist) + "\n")
    (out / f"launch_{name}.py").write_text(export.script)
    return export


def launch_blockers() -> list[str]:
    """Why Agent Lightning's real trainer cannot run in this environment (empty: it can).

    Importable is not enough: agl_lab's tests install the package on Python 3.11 as an oracle for its math, but its
    trainer needs Python >= 3.12 and GPUs.
    """
    reasons = []
    if importlib.util.find_spec("agentlightning") is None:
        reasons.append("agentlightning is not installed")
    if sys.version_info < (3, 12):
        reasons.append(f"Python {sys.version_info.major}.{sys.version_info.minor} < 3.12")
    import torch

    if not torch.cuda.is_available():
        reasons.append("no GPU")
    return reasons


_ABSENT = object()


_SCRIPT = '''"""Run the agl_lab experiment {name!r} on Agent Lightning's real trainer (verl on Ray, GPUs).

Generated by agl_lab. Usage, on a machine with Python >= 3.12, GPUs and `pip install agentlightning`:

    AGL_KEY=... python launch_{name}.py data.train_files=/path/train.parquet data.val_files=/path/val.parquet

Extra key=value arguments are Hydra overrides merged last. The Agent Lightning key comes from $AGL_KEY or
--agl-key; it is never written into this file. --record DIR records each training step's rows into DIR
(<step>.parquet) and logs agl_lab's weighting diagnostics with the run's metrics: agl_lab's recorder, which needs
agl_lab installed wherever Ray runs the trainer.
"""

import argparse
import os

# The keys that differ from Agent Lightning's defaults (verl ppo_trainer + Agent Lightning's additions).
OVERRIDES = {overrides}
# Where agl_lab's recorder (agl_lab.training.agl_recorder) records each step's rows; None: no recording.
RECORD = {record!r}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agl-key", default=os.environ.get("AGL_KEY", ""), help="default: $AGL_KEY")
    parser.add_argument("--record", default=RECORD, metavar="DIR", help="record each step's rows into DIR")
    parser.add_argument("dotlist", nargs="*", help="Hydra overrides, e.g. trainer.n_gpus_per_node=8")
    args = parser.parse_args(argv)

    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="agentlightning.verl", version_base=None):
        config = compose(config_name="config")
    OmegaConf.set_struct(config, False)
    config = OmegaConf.merge(config, OmegaConf.create(OVERRIDES), OmegaConf.from_dotlist(args.dotlist))
    config.agentlightning.agl_key = args.agl_key
    if args.record:
        from agl_lab.training.agl_recorder import record_run

        config = record_run(config, args.record)
        print(f"recording each training step's rows into {{config.agl_lab.record_dir}} (agl_lab's recorder)")
    for key in {keys}:
        print(f"{{key}} = {{OmegaConf.select(config, key)}}")
    train_dataset = load_dataset(config, "train_files", parser)
    val_dataset = load_dataset(config, "val_files", parser)

    from agentlightning.verl.entrypoint import run_ppo

    run_ppo(config, train_dataset=train_dataset, val_dataset=val_dataset)


def load_dataset(config, key, parser):
    """The task items of data.<key> (parquet or JSON-lines files) as a list of dicts, as run_ppo takes them."""
    from omegaconf import OmegaConf

    files = OmegaConf.select(config, f"data.{{key}}")
    paths = [files] if isinstance(files, str) else list(files or [])
    missing = [path for path in paths if not os.path.isfile(os.path.expanduser(path))]
    if not paths or missing:
        parser.error(f"data.{{key}}: no such file {{missing or paths}}: pass data.{{key}}=/path/items.parquet")
    import pandas as pd

    frames = [
        pd.read_json(os.path.expanduser(p), lines=True) if p.endswith((".jsonl", ".json"))
        else pd.read_parquet(os.path.expanduser(p))
        for p in paths
    ]
    return pd.concat(frames, ignore_index=True).to_dict(orient="records")


if __name__ == "__main__":
    main()
'''
