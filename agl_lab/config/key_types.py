"""Which keys a config has, and the type each takes, so that every key and every value is checked.

:func:`key_problem` says why a path is not a key (with the nearest valid key), :func:`type_problem` why a value does
not fit the key's type: composition and the doctor both ask them. A key's type is its
default's. Where verl's config dataclass (the section's ``_target_``) declares the field, the declaration wins:
``entropy_coeff: 0`` is a float field, and ``ppo_micro_batch_size_per_gpu: null`` an integer one. Null defaults in
sections without a dataclass (``trainer.*``, ``data.*``, ``agentlightning.*``) take their type from
:data:`NULL_DEFAULT_TYPES`; a null default listed nowhere takes any value (``agentlightning.hooks``). Without this a
null-default key was never checked: ``trainer.total_training_steps=abc`` reached the hand-off's ``overrides.yaml``.
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from agl_lab.config.secrets import MASK, is_secret_key
from agl_lab.config.tree import paths
from agl_lab.core.keys import (
    AGENT_CLASS,
    ASYNC_TRAIN_BATCH,
    DATA_SEED,
    DATA_TOKENIZER,
    DEFAULT_HDFS_DIR,
    GEN_BATCH,
    K8S_JOB_TEMPLATE,
    LORA_EXCLUDE_MODULES,
    LORA_TARGET_MODULES,
    MAX_ACTOR_CKPT,
    MAX_CRITIC_CKPT,
    MAX_PPO_UPDATE_TIMES,
    MODEL_PATH_LAB,
    REF_LOG_PROB_MICRO,
    REF_LOG_PROB_MICRO_GLOBAL,
    RESUME_FROM_PATH,
    ROLLOUT_DATA_DIR,
    RUN_DIR,
    STEPS,
    VAL_BATCH,
    VALIDATION_DATA_DIR,
)

__all__ = ["NULL_DEFAULT_TYPES", "STRING_OR_LIST_KEYS", "declared_fields", "default_value", "expected_value"]
__all__ += ["key_problem", "type_problem"]

# Keys whose default is null in a section without a config dataclass, and the type Agent Lightning / verl read them as.
NULL_DEFAULT_TYPES: dict[str, type] = {
    STEPS: int,
    MAX_ACTOR_CKPT: int,
    MAX_CRITIC_CKPT: int,
    ROLLOUT_DATA_DIR: str,
    VALIDATION_DATA_DIR: str,
    RESUME_FROM_PATH: str,
    DEFAULT_HDFS_DIR: str,
    DATA_TOKENIZER: str,
    GEN_BATCH: int,
    VAL_BATCH: int,
    DATA_SEED: int,
    REF_LOG_PROB_MICRO_GLOBAL: int,
    REF_LOG_PROB_MICRO: int,
    "critic.enable": bool,
    "reward_model.enable": bool,
    "custom_reward_function.path": str,
    "custom_reward_function.name": str,
    "ray_kwargs.ray_init.num_cpus": int,
    MAX_PPO_UPDATE_TIMES: int,
    ASYNC_TRAIN_BATCH: int,
    AGENT_CLASS: str,
    K8S_JOB_TEMPLATE: str,
    MODEL_PATH_LAB: str,
    RUN_DIR: str,
}

# Keys that take a string or a list of strings, as verl's FSDP engine hands them to peft's LoraConfig
# (verl/workers/config/model.py: target_modules "all-linear" or ["q_proj", "k_proj"]; exclude_modules likewise).
STRING_OR_LIST_KEYS = frozenset({LORA_TARGET_MODULES, LORA_EXCLUDE_MODULES})

# One value of each checkable type, in the order a union is read: a field declared `int | float` takes any number.
_PROTOTYPES: tuple[tuple[type, Any], ...] = ((bool, False), (float, 0.0), (int, 0), (str, ""), (list, []), (dict, {}))


def default_value(base: DictConfig, path: str) -> Any:
    """The default at ``path`` as plain Python (sections and lists as containers); None where absent or null."""
    node = OmegaConf.select(base, path, default=None, throw_on_missing=False)
    if isinstance(node, DictConfig | ListConfig):
        return OmegaConf.to_container(node)
    return node


def expected_value(base: DictConfig, path: str) -> Any:
    """A value of the type ``path`` takes (its default, or a prototype like ``0`` or ``""``); None: any value goes."""
    default = default_value(base, path)
    if isinstance(default, str) and "${" in default:
        return None  # an interpolation: resolved (and checked) with the whole config
    declared = _declared_types(base, path)
    if default is None:
        table = NULL_DEFAULT_TYPES.get(path)
        return _prototype(declared or ((table,) if table else ()))
    if isinstance(default, int) and not isinstance(default, bool) and float in declared:
        return float(default)  # verl's YAML writes `top_p: 1` for a float field
    return default


def type_problem(path: str, value: Any, base: DictConfig) -> str | None:
    """Why ``value`` does not fit the type of ``path`` in ``base``, or None if it fits (or the key is open).

    The type is the default's, or what verl's config dataclass declares (:mod:`agl_lab.config.key_types`): a float
    field written as an integer in verl's YAML (``entropy_coeff: 0``, ``top_p: 1``) takes any number, and a key whose
    default is null is checked against its declared type. A secret's value is never echoed.
    """
    if path in STRING_OR_LIST_KEYS:
        return _string_or_list_problem(path, value)
    expected = expected_value(base, path)
    if isinstance(expected, bool):
        ok, name = isinstance(value, bool), "a boolean (true/false)"
    elif isinstance(expected, int):
        ok, name = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(expected, float):
        ok, name = isinstance(value, int | float) and not isinstance(value, bool), "a number"
    elif isinstance(expected, str):
        ok, name = isinstance(value, str | int | float) and not isinstance(value, bool), "a string"
    elif isinstance(expected, list | ListConfig):
        ok, name = isinstance(value, list | tuple | ListConfig), "a list, e.g. [a,b]"
    elif isinstance(expected, dict | DictConfig):
        ok, name = isinstance(value, Mapping | DictConfig), "a mapping, e.g. {a:1}"
    else:
        return None
    if value is None or ok:
        return None
    shown = MASK if is_secret_key(path) else repr(value)
    return f"{path} must be {name}, got {shown} ({type(value).__name__})"


def _string_or_list_problem(path: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, list | tuple | ListConfig) and all(isinstance(name, str) for name in value):
        return None
    return f"{path} must be a string or a list of strings (e.g. all-linear or [q_proj,v_proj]), got {value!r}"


def declared_fields(section: DictConfig) -> set[str]:
    """The fields verl's config dataclass for ``section`` (its ``_target_``) declares; empty without one."""
    target = section.get("_target_") if isinstance(section, DictConfig) else None
    return {name for name in _field_types(str(target)) if not name.startswith("_")} if target else set()


def key_problem(path: str, base: DictConfig) -> str | None:
    """Why ``path`` is not a key of ``base`` (with the nearest valid key), or None if it is one.

    Sections that are empty dicts or null in ``base`` (``agentlightning.local.env_map``, hooks, ...) are open:
    anything below them is accepted. So is a field that verl's config dataclass for the section declares but its YAML
    leaves out (``algorithm.gdpo_reward_keys``): verl reads it, so ``+algorithm.gdpo_reward_keys=[a,b]`` adds it.
    """
    parts = path.split(".")
    node: Any = base
    for depth, part in enumerate(parts):
        if not isinstance(node, DictConfig) or len(node) == 0:
            return None
        # not ``part in node``: that is False for keys whose value is ??? (MISSING); no access check: lab: is struct
        child = node._get_node(part, validate_access=False)
        if child is None:
            if depth == len(parts) - 1 and part in declared_fields(node):
                return None
            prefix = ".".join(parts[:depth])
            return f"unknown key {path!r}{_nearest(path, prefix, node, base)}"
        node = child
        if node is not None and node._is_none():
            return None
    return None


def _prototype(allowed: tuple[type, ...]) -> Any:
    for kind, value in _PROTOTYPES:
        if kind in allowed:
            return value
    return None


def _declared_types(base: DictConfig, path: str) -> tuple[type, ...]:
    parent_path, _, key = path.rpartition(".")
    parent = OmegaConf.select(base, parent_path, default=None) if parent_path else base
    target = parent.get("_target_") if isinstance(parent, DictConfig) else None
    return _field_types(str(target)).get(key, ()) if target else ()


@functools.cache
def _field_types(target: str) -> dict[str, tuple[type, ...]]:
    """Field name -> the plain types its annotation allows (``Optional[list[int]]`` -> ``(list, NoneType)``)."""
    from hydra.utils import get_class  # here: Hydra loads only when a config is composed or checked

    try:
        hints = typing.get_type_hints(get_class(target))
    except Exception:  # not importable here (an optional engine's config): fall back to the YAML default's type
        return {}
    out = {}
    for name, hint in hints.items():
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        out[name] = tuple(typing.get_origin(arg) or arg for arg in (typing.get_args(hint) if union else (hint,)))
    return out


def _nearest(path: str, prefix: str, node: DictConfig, base: DictConfig) -> str:
    """' (did you mean ...?)' for a misspelt key: a path below the deepest valid prefix, else a key with that name."""
    relative = path[len(prefix) + 1 :] if prefix else path
    candidates = [*paths(node), *sorted(declared_fields(node))]  # what the YAML holds, and what verl also reads
    match = difflib.get_close_matches(relative, candidates, n=1, cutoff=0.6)
    if match:
        return f" (did you mean {(f'{prefix}.' if prefix else '') + match[0]!r}?)"
    last = path.rsplit(".", 1)[-1]
    same_name = [c for c in paths(base) if c.rsplit(".", 1)[-1] == last]
    if same_name:
        return f" (did you mean {same_name[0]!r}?)"
    return "; see `agl-lab check --show-config` for the valid keys"
