"""The shape of the model a config names (layers, width, vocabulary), read from its small files before anything loads:
what :mod:`agl_lab.config.feasibility` counts memory and time from. The source comes from
:mod:`agl_lab.config.model_source`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from agl_lab.config.model_source import ModelSource, adapter_base

__all__ = ["model_shape"]


def model_shape(source: ModelSource) -> dict[str, Any] | None:
    """``layers, hidden, intermediate, vocab, tied`` of a loadable source (None for tiny, or when unreadable)."""
    if source.kind == "adapter":
        base = adapter_base(source.path)
        return model_shape(base) if base is not None else None
    if source.kind == "gguf":
        return _gguf_shape(str(source.path), source.path.stat().st_mtime_ns) if source.path.is_file() else None
    if source.kind != "folder":
        return None
    try:
        config = json.loads((source.path / "config.json").read_text())
    except (OSError, ValueError):
        return None  # loading the model will say what is wrong with it
    if not isinstance(config, dict):
        return None
    config = config.get("text_config", config)
    hidden = int(config.get("hidden_size", 0))
    return {
        "layers": int(config.get("num_hidden_layers", 0)),
        "hidden": hidden,
        "intermediate": int(config.get("intermediate_size", 4 * hidden)),
        "vocab": int(config.get("vocab_size", 0)),
        "tied": bool(config.get("tie_word_embeddings", False)),
    }


@functools.lru_cache(maxsize=8)
def _gguf_shape(path: str, mtime_ns: int) -> dict[str, Any] | None:
    """The shape from a GGUF file's metadata (~2 s: the reader parses every tensor's header; cached per file and
    modification time, ``mtime_ns``, so a file written again is read again)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    fields = reader.fields

    def value(name: str) -> Any:
        field = fields.get(name)
        return field.contents() if field is not None else None

    arch = value("general.architecture")
    hidden = value(f"{arch}.embedding_length")
    if hidden is None:
        return None
    tokens = fields.get("tokenizer.ggml.tokens")
    return {
        "layers": int(value(f"{arch}.block_count") or 0),
        "hidden": int(hidden),
        "intermediate": int(value(f"{arch}.feed_forward_length") or 4 * hidden),
        "vocab": int(value(f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else 0)),
        "tied": "output.weight" not in {tensor.name for tensor in reader.tensors},
    }
