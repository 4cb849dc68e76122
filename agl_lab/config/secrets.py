"""Secrets never reach a tracker, a run directory, an export or the console.

A key is secret when its last name is ``agl_key``, contains ``api_key``/``apikey``/``password``/``secret``, or
ends in ``token`` (``hf_token``; verl's ``ppo_max_token_len_per_gpu`` is not one). Non-empty values become
``***``; empty ones stay empty, so a reader still sees that no secret was set.

Configs are redacted where they are written (:func:`redact`, :func:`redacted_yaml`), command lines where they are
recorded (:func:`redact_argv`), and the command line masks every secret value it was given (each value of a
``key=a,b`` item too) in everything it prints: :func:`masked_output` passes every line written to ``sys.stdout`` and
``sys.stderr`` during a command — tables, progress bars, warnings, errors, tracebacks — through :func:`mask_secrets`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["MASK", "is_secret_key", "mask_secrets", "masked_output", "redact", "redact_argv", "redacted_yaml"]
__all__ += ["secret_values"]

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


def redacted_yaml(cfg: Any) -> str:
    """A config (``DictConfig`` or plain mapping) as YAML, interpolations resolved, every secret as ``***``.

    A config is resolved once into plain values and dumped as ``OmegaConf.to_yaml`` dumps them (its dumper and
    options, enums by name): the same text as building a config of the redacted values again and dumping that, without
    the rebuild (each short run writes its config; the rebuild was ~40% of that on the lab's ~1,100-line tree)."""
    from omegaconf import OmegaConf

    if not OmegaConf.is_config(cfg):
        return OmegaConf.to_yaml(OmegaConf.create(redact(cfg)))
    import yaml
    from omegaconf._utils import get_omega_conf_dumper

    container = redact(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    return yaml.dump(
        container, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=get_omega_conf_dumper()
    )


# Environment variables that hold keys agl_lab, its trackers or its Ray cluster read (a cluster with token
# authentication: `agl-lab sweep --address`).
SECRET_ENV = ("AGL_KEY", "WANDB_API_KEY", "HF_TOKEN", "OPENAI_API_KEY", "RAY_AUTH_TOKEN")


def secret_values(argv: Iterable[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values in a command line (``key=value`` items with a secret key, ``--agl-key x``) and in
    :data:`SECRET_ENV`: what :func:`mask_secrets` must hide from anything printed."""
    argv = list(argv)
    values = []
    for i, arg in enumerate(argv):
        key, sep, value = arg.partition("=")
        name = key.lstrip("+~-").replace("-", "_")
        if sep and value and is_secret_key(name):
            values.append(value)
        elif key.startswith("--") and not sep and is_secret_key(name) and i + 1 < len(argv):
            values.append(argv[i + 1])
    environ = os.environ if environ is None else environ
    values += [environ[name] for name in SECRET_ENV if environ.get(name)]
    # a value given as a Hydra list or quoted ('[sk-1]', "'sk-1'") also appears without its brackets or quotes, and
    # each value of a sweep item (key=sk-1,sk-2) on its own
    values += [part for v in values for part in v.split(",")]
    values += [v.strip("[]'\" ") for v in values]
    return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret value replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


@contextmanager
def masked_output(secrets: Iterable[str]) -> Iterator[None]:
    """Within the block, everything written to ``sys.stdout`` and ``sys.stderr`` has each of ``secrets`` masked."""
    secrets = list(secrets)
    if not secrets:
        yield
        return
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (_MaskingStream(stream, secrets) for stream in streams)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams


class _MaskingStream:
    """A text stream whose writes are masked; everything else (``isatty``, ``fileno``, ``flush``) is the stream's."""

    def __init__(self, stream: TextIO, secrets: list[str]) -> None:
        self._stream, self._secrets = stream, secrets

    def write(self, text: str) -> int:
        self._stream.write(mask_secrets(text, self._secrets))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
