"""Walking a config tree: its leaves as dotted paths, its key paths, and back from dotted keys to a nested dict.

The one walker every part of agl_lab uses on a config (the composer's key suggestions, the doctor's type
checks, the hand-off's diff against Agent Lightning's defaults, the short-run preset's merge), for an
OmegaConf ``DictConfig`` and a plain nested mapping alike. An empty mapping is a leaf (``env_map: {}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["INTERPOLATION", "leaves", "nest", "paths"]


class _Interpolation:
    def __repr__(self) -> str:
        return "INTERPOLATION"


# What leaves() gives for a ``${...}`` value of a DictConfig: it is resolved (and checked) separately.
INTERPOLATION = _Interpolation()


def leaves(node: DictConfig | Mapping[str, Any], *, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, value)`` of every leaf, in the tree's order.

    In a ``DictConfig`` values are raw (unresolved): an interpolation comes back as :data:`INTERPOLATION`, a list
    or a null section as plain Python.
    """
    out: list[tuple[str, Any]] = []
    if isinstance(node, DictConfig):
        for key in node.keys():
            path = f"{prefix}{key}"
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_none() and len(child):
                out.extend(leaves(child, prefix=f"{path}."))
            elif OmegaConf.is_interpolation(node, str(key)):
                out.append((path, INTERPOLATION))
            elif isinstance(child, DictConfig | ListConfig) and not child._is_none():
                out.append((path, OmegaConf.to_container(child)))
            else:
                out.append((path, child._value()))
        return out
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.extend(leaves(value, prefix=f"{path}."))
        else:
            out.append((path, value))
    return out


def paths(node: DictConfig, *, prefix: str = "") -> list[str]:
    """Every key path of ``node``, sections included (``algorithm``, ``algorithm.gamma``, ...)."""
    out = []
    for key in node.keys():
        path = f"{prefix}{key}"
        child = node._get_node(key)
        out.append(path)
        if isinstance(child, DictConfig) and not child._is_none() and len(child):
            out.extend(paths(child, prefix=f"{path}."))
    return out


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "a.c": 2}`` → ``{"a": {"b": 1, "c": 2}}``; nested values merge key by key."""
    out: dict[str, Any] = {}
    for path, value in dotted.items():
        *parents, last = str(path).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        if isinstance(value, Mapping) and isinstance(node.get(last), dict):
            node[last].update(nest(dict(leaves(value))))
        else:
            node[last] = value
    return out
