"""Secrets never reach a tracker, a run directory, an export or the console.

A key is secret when its last name is ``agl_key``, contains ``api_key``/``apikey``/``password``/``secret``, or
ends in ``token`` (``hf_token``; verl's ``ppo_max_token_len_per_gpu`` is not one). Non-empty values become
``***``; empty ones stay empty, so a reader still sees that no secret was set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "is_secret_key", "redact", "redact_argv"]

MASK = "***"
_SECRET_NAME = re.compile(r"(^agl_key$|api_?key|password|secret|(^|_)token$)", re.IGNORECASE)


def is_secret_key(path: str) -> bool:
    """Whether the last name of a dotted key path names a secret."""
    return bool(_SECRET_NAME.search(str(path).rsplit(".", 1)[-1]))


def redact(value: Any, path: str = "") -> Any:
    """A copy of a plain container (dicts, lists, scalars) with every secret value replaced by ``***``."""
    if isinstance(value, Mapping):
        return {key: redact(item, f"{path}.{key}" if path else str(key)) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(item, path) for item in value)
    if path and is_secret_key(path) and value not in (None, ""):
        return MASK
    return value


def redact_argv(argv: list[str]) -> list[str]:
    """Command-line arguments with secret values masked: ``agentlightning.agl_key=x`` (a Hydra dotlist item, also
    with ``+``/``++``/``~``) and ``--agl-key x`` / ``--agl-key=x``. Trackers record a run's command line."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and is_secret_key(out[-1][2:].replace("-", "_")):
            out.append(MASK)
            continue
        key, sep, value = arg.partition("=")
        name = key.lstrip("+~-").replace("-", "_") if key.startswith("--") else key.lstrip("+~")
        out.append(f"{key}={MASK}" if sep and value and is_secret_key(name) else arg)
    return out
