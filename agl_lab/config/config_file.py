"""A config file in: the YAML a user already has, read before the overrides dict and the dotlist.

``agl-lab check --config FILE.yaml`` and ``compose_config(config_file=...)`` take either of the two files a user of
Agent Lightning has at hand:

* the overrides of a training script (a nested mapping of the keys it changes, as Agent Lightning's example scripts
  build their ``config`` dict; ``agl-lab launch`` and ``export_experiment`` write one as ``overrides.yaml``);
* a whole resolved config, as a run dumps it (an agl_lab run's ``config.yaml``: every key, ``lab:`` included, secrets
  written ``***``; or Hydra's ``.hydra/config.yaml``).

Composition (:mod:`agl_lab.config.compose`) takes the file's values after the base and before the overrides dict and
the dotlist, with the checks every other way in gets (an unknown key names the nearest one, and the file). This module
reads the file: a file that is missing or unreadable is an ``OSError`` naming it (exit 5), one that is not UTF-8 YAML
holding a mapping a :class:`ConfigError` (exit 2), before anything is composed. It also says which of the file's values
change the config (:func:`changed`): a resolved dump repeats every default, and keeping those would cut the links
verl's config makes between keys (``${oc.select:...}``) and bury what the file changes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf._utils import get_yaml_loader
from omegaconf.errors import OmegaConfBaseException

from agl_lab.config.secrets import MASK, is_secret_key
from agl_lab.config.tree import leaves

__all__ = ["EXAMPLE_CONFIG_FILE", "ConfigFileError", "changed", "read_config_file", "resolves_to", "same"]

EXAMPLE_CONFIG_FILE = Path(__file__).with_name("conf") / "script_overrides.yaml"  # a script's overrides (notebook 02)

_ABSENT = object()
_EXAMPLE = "e.g. `algorithm: {adv_estimator: grpo}`: an Agent Lightning script's overrides or a run's config.yaml"


class ConfigFileError(ValueError):
    """A config file whose text is not a YAML mapping of config keys (composition raises it as its ConfigError)."""


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping in the YAML file at ``path``, read as OmegaConf reads YAML (``1e-6`` is a number).

    Raises ``FileNotFoundError``/``IsADirectoryError``/``PermissionError`` naming the file when it cannot be read, and
    :class:`ConfigFileError` when it is not UTF-8 text, not YAML (the line of the first problem) or not a mapping.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"config_file must be the path of a YAML file (str or Path), got {type(path).__name__}")
    if not os.fspath(path):
        raise ConfigFileError(f"config_file is an empty path: give the path of a YAML file ({_EXAMPLE})")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config file {path} does not exist: give the path of a YAML file ({_EXAMPLE})")
    if path.is_dir():
        raise IsADirectoryError(f"config file {path} is a folder: give the YAML file in it (a run's config.yaml)")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path} is not a UTF-8 text file (byte {exc.start}): give a YAML file") from exc
    try:
        values = yaml.load(text, Loader=get_yaml_loader())  # OmegaConf's loader: a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigFileError(f"{path} is not YAML: {problem}{where}") from exc
    if values is None:
        raise ConfigFileError(f"{path} is empty: a config file holds a mapping of config keys ({_EXAMPLE})")
    if not isinstance(values, dict):
        raise ConfigFileError(f"{path} holds a {type(values).__name__}, not a mapping of config keys ({_EXAMPLE})")
    return values


def changed(cfg: DictConfig, edits: Iterable[tuple[str, Any, str]]) -> tuple[list, list[list]]:
    """The file's leaf edits that change ``cfg``: those at plain keys, and, in groups, those at or under a key ``cfg``
    sets by interpolation (``rollout.mtp: ${oc.select:actor_rollout_ref.model.mtp,null}``). A dump holds such a key
    resolved: a group is to be applied only where a value differs from what the interpolation gives once the plain
    edits are in (:func:`resolves_to`), and then whole (setting one key under an interpolated section would replace
    the section by that key alone). A secret written ``***`` (how agl_lab writes them) is left out: a mask is never
    the secret, which is given at launch (``$AGL_KEY``)."""
    held = dict(leaves(OmegaConf.to_container(cfg, resolve=False)))  # an interpolation as written: "${...}"
    linked_keys = {path for path, value in held.items() if isinstance(value, str) and "${" in value}
    plain: list = []
    linked: dict[str, list] = {}
    for edit in edits:
        path, value, _mode = edit
        current = held.get(path, _ABSENT)
        if (is_secret_key(path) and value == MASK) or (current is not _ABSENT and same(current, value)):
            continue
        parts = path.split(".")
        link = next((p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in linked_keys), None)
        if link is None:
            plain.append(edit)
        else:
            linked.setdefault(link, []).append(edit)
    return plain, list(linked.values())


def resolves_to(cfg: DictConfig, path: str, value: Any) -> bool:
    """Whether the interpolation at ``path`` of ``cfg`` resolves to ``value``."""
    try:
        resolved = OmegaConf.select(cfg, path)
    except OmegaConfBaseException:  # an interpolation that does not resolve gives no value: the file's stands
        return False
    if OmegaConf.is_config(resolved):
        resolved = OmegaConf.to_container(resolved, resolve=True)
    return same(resolved, value)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same kind (``True`` is not ``1``)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)
