"""What the public functions accept from a notebook: numpy numbers and arrays where Python's are taken, and a
``TypeError`` naming the parameter for anything else.

A notebook's values often come out of numpy or pandas (``np.int64(3)`` from a DataFrame, ``np.arange(3)`` as seeds):
they mean what the Python value means, so they are taken as such (:func:`plain`). A value of the wrong kind is
refused here, by the parameter's name and what it takes, instead of failing deep inside with an internal
``AttributeError`` (``'list' object has no attribute 'items'``) or numpy's "truth value of an array is ambiguous".
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Mapping, Sized
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["integer_list", "mapping", "path", "plain", "string_list"]


def plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays (also inside dicts, lists and tuples) as Python numbers and lists."""
    if isinstance(value, np.ndarray):
        return [plain(item) for item in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping) and not _is_config(value):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain(item) for item in value)
    return value


def mapping(value: Any, *, name: str, what: str, optional: bool = False) -> Mapping[str, Any] | None:
    """``value`` when it is a mapping (a dict, an OmegaConf config); ``None`` too when ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be {what}, got {_kind(value)}")
    return value


def string_list(value: Any, *, name: str, what: str) -> list[str]:
    """A list, tuple or array of strings (numpy strings too) as a list; a single string is refused."""
    if isinstance(value, str | bytes) or not _iterable(value):
        raise TypeError(f"{name} must be {what} (a list of strings), got {_kind(value)}")
    items = [plain(item) for item in value]
    wrong = next((item for item in items if not isinstance(item, str)), None)
    if wrong is not None:
        raise TypeError(f"{name} must be {what} (a list of strings), but it holds {_kind(wrong)}")
    return items


def integer_list(value: Any, *, name: str, what: str) -> list[int]:
    """A list, tuple, range, array or Series of integers (numpy's too) as Python ints; booleans are refused."""
    if isinstance(value, str | bytes | Mapping) or not _iterable(value):
        raise TypeError(f"{name} must be {what} (a list of integers), got {_kind(value)}")
    items = list(np.asarray(value).tolist()) if isinstance(value, np.ndarray) else list(value)
    out = []
    for item in items:
        if isinstance(item, bool | np.bool_) or not isinstance(item, numbers.Integral):
            raise TypeError(f"{name} must be {what} (a list of integers), but it holds {_kind(item)}")
        out.append(int(item))
    return out


def path(value: Any, *, name: str) -> Path:
    """A ``str`` or ``os.PathLike`` as a ``Path``."""
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path (str or pathlib.Path), got {_kind(value)}")
    return Path(value)


def _iterable(value: Any) -> bool:
    return isinstance(value, Iterable) and not (isinstance(value, np.ndarray) and value.ndim == 0)


def _is_config(value: Any) -> bool:
    from omegaconf import OmegaConf

    return OmegaConf.is_config(value)


def _kind(value: Any) -> str:
    """The value's type, and the value itself only when it is a number (any text could be a secret)."""
    if isinstance(value, numbers.Number | np.generic):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, str | bytes):
        return f"a {type(value).__name__}"
    return f"{type(value).__name__}" + (f" of {len(value)} items" if isinstance(value, Sized) else "")
