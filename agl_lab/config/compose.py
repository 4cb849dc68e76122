"""One OmegaConf tree, composed the way Agent Lightning's training scripts compose theirs.

Order (later wins): verl's packaged ``ppo_trainer`` → Agent Lightning's defaults (``conf/agl_trainer.yaml``)
→ agl_lab's ``lab:`` section (:class:`LabConfig`) → the base's overrides → a YAML file (``config_file``:
:mod:`agl_lab.config.config_file`) → an overrides dict → a Hydra dotlist
(``key.path=value``, ``+key=value`` to add a new key, ``~key`` to delete). Unlike a struct-less
OmegaConf merge, a key that does not exist is an error naming the nearest valid key, and a value of the
wrong type is an error naming the expected type: a misspelt setting must never be silently ignored.

The short-run trainer reads the same keys as Agent Lightning's trainer, so an experiment exports to it
by dropping ``lab:``. Every entrance composes from one of the named :data:`BASES` and says which: ``agl`` (Agent
Lightning's defaults: what ``agl-lab launch`` sends), ``example`` (+ the example overrides: ``agl-lab check``) and
``short-run`` (+ the short-run preset: ``agl-lab train``, ``demo``, ``sweep``, the notebooks' runs).
Notebook: ``notebooks/02_config_check.ipynb``.
"""

from __future__ import annotations

import copy
import functools
import pickle
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agl_lab.config.arguments import mapping, plain, string_list
from agl_lab.config.bases import BASES
from agl_lab.config.config_file import ConfigFileError, changed, read_config_file, resolves_to
from agl_lab.config.key_types import default_value, expected_value, key_problem, type_problem
from agl_lab.config.model_source import is_pretrained
from agl_lab.config.secrets import redact_argv
from agl_lab.config.tree import leaves
from agl_lab.core.keys import ESTIMATOR, LAB

__all__ = ["ConfigError", "base_config", "compose_config", "compose_from", "shared_base", "short_run_config"]
__all__ += ["short_run_overrides"]


class ConfigError(ValueError):
    """A config that cannot be composed; the message has one line per problem, each with its fix."""


@functools.lru_cache(maxsize=1)
def shared_base() -> DictConfig:
    """The composed base (:func:`base_config`), one object shared by every reader: never modify it."""
    from hydra import compose, initialize_config_module  # Hydra, here and in _parse_dotlist only: a command that
    from hydra.core.global_hydra import GlobalHydra  # prints a base's name (agl-lab weighting) never loads it

    from agl_lab.config.lab_config import LabConfig  # here, not at the top: it loads the loss module (torch, verl)

    saved = copy.deepcopy(GlobalHydra.instance()) if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="agl_lab.config.conf", version_base=None):
            cfg = compose(config_name="agl_trainer")
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:  # hand a running Hydra app its state back
            GlobalHydra.instance().initialize(saved.hydra)
    OmegaConf.set_struct(cfg, False)
    cfg.lab = OmegaConf.structured(LabConfig)
    OmegaConf.set_struct(cfg.lab, True)  # its fields are fixed: `+lab.x=1` is an error, not a silent addition
    return cfg


def base_config() -> DictConfig:
    """verl ``ppo_trainer`` + Agent Lightning defaults + ``lab:`` defaults, before any override (a fresh copy)."""
    return pickle.loads(_base_pickled())


@functools.lru_cache(maxsize=1)
def _base_pickled() -> bytes:
    """The shared base, pickled once: unpickling makes a fresh copy in a tenth of ``copy.deepcopy``'s time (3 vs 35
    ms on 2 busy cores; every compose starts from one, and the config form composes on each edit)."""
    return pickle.dumps(shared_base())


def compose_config(
    overrides: Mapping[str, Any] | None = None, dotlist: Sequence[str] = (), config_file: str | PathLike | None = None
) -> DictConfig:
    """Compose the config: base, then ``config_file`` (a YAML file), then ``overrides`` (nested or dotted keys), then
    the Hydra ``dotlist``.

    ``config_file`` is a training script's overrides or a whole resolved config (a run's ``config.yaml``): see
    :mod:`agl_lab.config.config_file`. Raises :class:`ConfigError` listing every unknown key (with the nearest valid
    one; the file's named by the file), every value of the wrong type and every unparsable dotlist item, and
    ``OSError`` for a file that cannot be read; nothing is returned half-applied.
    """
    return _compose({}, overrides, dotlist, config_file)


def compose_from(
    base: str,
    overrides: Mapping[str, Any] | None = None,
    dotlist: Sequence[str] = (),
    config_file: str | PathLike | None = None,
) -> DictConfig:
    """``compose_config`` starting from the named base (a key of :data:`BASES`): its overrides, then yours (the file,
    the overrides dict, the dotlist).

    A base with a pretrained preset (``short-run``: ``conf/pretrained.yaml``, then ``conf/pretrained_<task>.yaml`` for
    the task's difficulty) puts it between its overrides and yours when the result's policy is a pretrained model
    (:func:`agl_lab.config.model_source.is_pretrained`: ``lab.model``, a ``.gguf`` file, or a run's saved adapter on
    one): composed again then, once for each layer, to learn which model and which task you chose."""
    if base not in BASES:
        raise ConfigError(f"unknown base {base!r}: choose one of {', '.join(BASES)}")
    ours = dict(leaves(BASES[base].overrides()))
    cfg = _compose(ours, overrides, dotlist, config_file)
    preset = BASES[base].pretrained_yaml
    if preset is None or not is_pretrained(cfg):
        return cfg
    ours = {**ours, **_yaml_leaves(preset)}
    cfg = _compose(ours, overrides, dotlist, config_file)
    task_layer = preset.with_name(f"{preset.stem}_{cfg.lab.task}.yaml")
    if not task_layer.is_file():
        return cfg
    return _compose({**ours, **_yaml_leaves(task_layer)}, overrides, dotlist, config_file)


def _yaml_leaves(path: PathLike) -> dict[str, Any]:
    return dict(leaves(OmegaConf.to_container(OmegaConf.load(path))))


def _compose(base_overrides: Mapping[str, Any], overrides: Any, dotlist: Any, config_file: Any) -> DictConfig:
    """Base, the base's overrides, the file, ``overrides``, ``dotlist``: each edit checked, every problem listed."""
    overrides, dotlist = _arguments(overrides, dotlist)
    try:
        from_file = read_config_file(config_file) if config_file is not None else {}
    except ConfigFileError as exc:
        raise ConfigError(f"config has problems:\n  - {exc}") from exc
    base = shared_base()
    cfg = base_config()
    problems: list[str] = []
    edits = _edit(cfg, base, list(_flatten(base_overrides)), problems)
    if from_file:
        plain, linked = changed(cfg, _flatten(from_file))
        edits += _edit(cfg, base, plain, problems, source=f"{config_file}: ")
        for group in linked:  # a dump repeats what the interpolations give: those stay interpolations
            if not all(resolves_to(cfg, path, value) for path, value, _ in group):
                edits += _edit(cfg, base, group, problems, source=f"{config_file}: ")
    edits += _edit(cfg, base, list(_flatten(overrides or {})) + _parse_dotlist(dotlist), problems)
    if not problems and not all(mode != "delete" and _plain(value) for _, value, mode in edits):
        try:  # interpolations (``${...}``) resolve; see _plain for why plain edits cannot break them
            OmegaConf.to_container(cfg, resolve=True)
        except OmegaConfBaseException as exc:
            problems.append(f"{_short(exc)}: fix the interpolation (${{...}}) or set a plain value")
    if problems:
        raise ConfigError("config has problems:\n" + "\n".join(f"  - {p}" for p in problems))
    return cfg


def _edit(cfg: DictConfig, base: DictConfig, edits: list, problems: list[str], source: str = "") -> list:
    """Apply ``edits`` (path, value, mode) to ``cfg``; each that cannot be applied adds a problem (after ``source``,
    the file it came from) instead. Returns the edits."""
    for path, value, mode in edits:
        if mode == "error":
            problems.append(value)
            continue
        if mode in ("change", "add"):  # `+key=value` too: only keys verl or Agent Lightning read (key_problem)
            problem = key_problem(path, base) or type_problem(path, value, base)
            if problem:
                problems.append(source + problem)
                continue
            value = _coerce(path, value, base)
        try:
            _apply(cfg, path, value, mode)
        except (OmegaConfBaseException, KeyError) as exc:
            fixed = " (the lab: section has fixed fields, see agl_lab.LabConfig)" if path.startswith(f"{LAB}.") else ""
            problems.append(f"{source}{path}: {_short(exc)}{fixed}")
    return edits


def short_run_overrides() -> dict[str, Any]:
    """The short-run sizes (``conf/short_run.yaml``) as a nested overrides dict."""
    return BASES["short-run"].overrides()


def short_run_config(
    overrides: Mapping[str, Any] | None = None, dotlist: Sequence[str] = (), config_file: str | PathLike | None = None
) -> DictConfig:
    """``compose_from("short-run", ...)``: the lab trainer's preset under your ``config_file``, ``overrides`` and
    ``dotlist``.

    What an Agent Lightning example script passes as its overrides dict, sized so that the tiny default policy
    learns the default task in about a minute on 2 CPU cores.
    """
    return compose_from("short-run", overrides, dotlist, config_file)


def _arguments(overrides: Any, dotlist: Any) -> tuple[Mapping[str, Any] | None, list[str]]:
    """The two ways in as Python values (numpy's taken as Python's); a TypeError naming the parameter otherwise."""
    overrides = mapping(overrides, name="overrides", what="a mapping of config keys to values", optional=True)
    if isinstance(dotlist, str):  # one item given alone
        dotlist = [dotlist]
    return overrides, string_list(dotlist, name="dotlist", what="Hydra overrides like 'key.path=value'")


def _coerce(path: str, value: Any, base: DictConfig) -> Any:
    """Numbers given for string settings (experiment names, ...) become strings, as Hydra would store them."""
    expected = expected_value(base, path)
    if isinstance(expected, str) and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(expected, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _plain(value: Any) -> bool:
    """Whether ``value`` holds no interpolation. Setting or adding plain values keeps every interpolation of the
    base resolvable: they are ``${oc.select:key,default}`` or plain references, which take any value that is there
    (a merge never removes a key). Only a deletion or a new ``${...}`` can break one, so only those pay for resolving
    the whole config again (most of composing's time, which a live form pays on every change)."""
    if isinstance(value, Mapping):
        return all(_plain(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return not (isinstance(value, str) and "${" in value)


def _apply(cfg: DictConfig, path: str, value: Any, mode: str) -> None:
    if mode == "delete":
        default = default_value(shared_base(), path)
        if default is not None and default != {}:  # null and empty defaults may go: readers take them as unset
            what = "section" if isinstance(default, dict) else "key"
            example = f"e.g. {ESTIMATOR}=grpo" if what == "section" else f"{path}=..."
            raise KeyError(f"cannot delete it: verl's trainer and agl_lab read this {what}; set it instead ({example})")
        parent_path, _, key = path.rpartition(".")
        parent = OmegaConf.select(cfg, parent_path) if parent_path else cfg
        if not isinstance(parent, DictConfig) or key not in parent:
            raise KeyError(f"cannot delete {path!r}: no such key")
        del parent[key]
        return
    OmegaConf.update(cfg, path, value, merge=True)


def _flatten(overrides: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any, str]]:
    """Leaf edits of a nested overrides dict; dotted keys (``"algorithm.adv_estimator"``) are paths too."""
    base = shared_base()
    for key, value in overrides.items():
        path = f"{prefix}{key}"
        mapping_in = isinstance(value, Mapping | DictConfig)  # only then is the base looked up (a dump's ~900 leaves)
        if mapping_in and isinstance(known := OmegaConf.select(base, path, default=None), DictConfig) and len(known):
            yield from _flatten(value, prefix=f"{path}.")
        else:
            if isinstance(value, DictConfig | ListConfig):
                value = OmegaConf.to_container(value)
            yield path, plain(value), "change"  # np.int64(3) from a notebook is 3


def _parse_dotlist(dotlist: Sequence[str]) -> list[tuple[str, Any, str]]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    edits: list[tuple[str, Any, str]] = []
    for item in dotlist:
        try:
            (override,) = parser.parse_overrides([item])
        except HydraException as exc:
            first_line = str(exc).splitlines()[0]
            first_line = first_line.replace(item, _shown(item))  # a secret's value is never echoed
            edits.append((_shown(item), f"{first_line}: write key.path=value (quote values with spaces)", "error"))
            continue
        if override.is_sweep_override():  # key=a,b or range(3): several values, one config cannot hold them
            shown = _shown(item)  # a secret's value is never echoed
            edits.append((shown, f"{shown}: several values (a sweep) are accepted only by `agl-lab sweep`", "error"))
        elif override.is_delete():
            edits.append((override.key_or_group, None, "delete"))
        elif override.is_add() or override.is_force_add():
            edits.append((override.key_or_group, override.value(), "add"))
        else:  # a {a:1} value is checked key by key, like an overrides dict
            edits.extend(_flatten({override.key_or_group: override.value()}))
    return edits


def _short(exc: Exception) -> str:
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)  # str(KeyError) adds quotes
    return str(text).splitlines()[0]


def _shown(item: str) -> str:
    """A dotlist item as it may be printed: a secret's value masked."""
    return redact_argv([item])[0]
