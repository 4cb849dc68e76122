"""Config edits as a Hydra dotlist: ``key.path=value`` items in Hydra's override grammar.

What Agent Lightning's example training scripts take on their command line, what the hand-off writes to
``dotlist.txt``, what the panels show under their controls, and how the demo's settings are spelt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from agl_lab.config.compose import shared_base
from agl_lab.config.tree import leaves

__all__ = ["format_dotlist", "hydra_value"]

_ABSENT = object()


def format_dotlist(nested: Mapping[str, Any]) -> list[str]:
    """``key.path=value`` items in Hydra's override grammar; keys new to the defaults get Hydra's ``+``."""
    defaults = shared_base()
    items = []
    for path, value in leaves(nested):
        known = OmegaConf.select(defaults, path, default=_ABSENT) is not _ABSENT
        items.append(f"{'' if known else '+'}{path}={hydra_value(value)}")
    return items


_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:-]*")
_RESERVED = {"true", "false", "null", "none", "nan", "inf", "-inf"}


def hydra_value(value: Any) -> str:
    """``value`` as Hydra's override grammar reads it (null, true/false, numbers, [lists], {maps}, quoted text)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
