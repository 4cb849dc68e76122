"""An episode's keys and values kept from one call to the next: each turn's prefill encodes only the new tokens.

A multi-turn episode's next prompt is the conversation so far plus the environment's answer
(:mod:`agl_lab.training.conversation`), so a call that prefills the whole prompt again recomputes what the previous
call already computed. Keys and values of a causal model at position ``i`` depend on tokens ``0..i`` only: every
position of the longest common prefix of the new prompt and the tokens the previous call fed through the model can be
taken from that call's cache, whatever follows (a chat template that re-renders the last answer differently, a context
rewrite that keeps the system prompt). The rest is prefilled, one batched forward for all episodes of a round.

The batch is left-padded twice: each row's reused prefix ends at column ``C`` (the longest reused prefix) and its new
tokens at the last column; the attention mask has 0 on both paddings and the position ids count only the real tokens,
so every real token sees exactly its own episode's tokens at their own positions, as with a full prefill::

    row 0 (4 reused, 2 new)   . . c c c c | . n n     C = 6 (the longest reused prefix), S = 3 (the most new)
    row 1 (6 reused, 3 new)   c c c c c c | n n n
    row 2 (nothing to reuse)  . . . . . . | n n n

Greedy responses are the same tokens as with a full prefill, and log-probs equal up to float rounding
(tests/test_kv_reuse.py, on SmolLM2). What it saves: ``docs/real-model.md`` (speed),
``benchmarks/bench_real_model_roofline.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

__all__ = ["KVPrefix", "keep_rows", "prefill", "reusable"]


@dataclass
class KVPrefix:
    """One episode's tokens fed through the model by its last call, and their keys and values, layer by layer."""

    ids: list[int] = field(default_factory=list)
    layers: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # [(kv_heads, len(ids), head_dim)]


def reusable(prefix: KVPrefix | None, prompt: list[int]) -> int:
    """How many first tokens of ``prompt`` ``prefix`` holds: their common prefix, leaving at least one token to feed
    (the last one's logits sample the first new token)."""
    if prefix is None or not prefix.layers:
        return 0
    limit = min(len(prefix.ids), len(prompt) - 1)
    common = 0
    while common < limit and prefix.ids[common] == prompt[common]:
        common += 1
    return common


def prefill(
    model, prompts: list[list[int]], prefixes: list[KVPrefix | None], *, pad: int, device: torch.device
) -> tuple[object, torch.Tensor, torch.Tensor]:
    """One forward over what each prompt adds to its prefix (module docstring); the output head at the last column only.

    Returns the model's output (logits (n, 1, V), its cache), the attention mask over the cache's columns (n, C + S)
    and each row's next position (n, 1).
    """
    n = len(prompts)
    reused = [reusable(prefix, prompt) for prefix, prompt in zip(prefixes, prompts, strict=True)]
    width_c, width_s = max(reused), max(len(p) - k for p, k in zip(prompts, reused, strict=True))
    input_ids = torch.full((n, width_s), pad, dtype=torch.long)  # (n, S), new tokens left-padded
    attention_mask = torch.zeros((n, width_c + width_s), dtype=torch.long)  # (n, C + S)
    for row, (prompt, k) in enumerate(zip(prompts, reused, strict=True)):
        new = len(prompt) - k
        input_ids[row, width_s - new :] = torch.tensor(prompt[k:], dtype=torch.long)
        attention_mask[row, width_c - k : width_c] = 1
        attention_mask[row, width_c + width_s - new :] = 1
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)[:, width_c:]  # (n, S): real tokens counted only
    past = _batched(model, prefixes, reused, width=width_c, device=device) if width_c else None
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past,
        use_cache=True,
        logits_to_keep=1,  # the output head (vocabulary x hidden) only where the next token is sampled
    )
    return out, attention_mask, position_ids[:, -1:] + 1


def keep_rows(
    prefixes: list[KVPrefix], cache, attention_mask: torch.Tensor, fed: list[list[int]], *, batch_rows: list[int]
) -> None:
    """Store the keys and values of the cache's rows ``batch_rows`` (their columns where ``attention_mask``, one row
    each, is 1) in ``prefixes``, one each, for the next call.

    ``fed[k]``: that row's prompt and sampled tokens; the first ``attention_mask[k].sum()`` of them went through the
    model (the last sampled token never does), in the order of its unmasked columns.
    """
    for k, (prefix, row) in enumerate(zip(prefixes, batch_rows, strict=True)):
        columns = attention_mask[k].nonzero().squeeze(-1)  # (L,): the row's real tokens, in order
        prefix.ids = fed[k][: len(columns)]
        # index_select copies: the batch's cache is freed once the call returns
        prefix.layers = [
            (layer.keys[row].index_select(1, columns), layer.values[row].index_select(1, columns))  # (kv_heads, L, d)
            for layer in cache.layers
        ]


def _batched(model, prefixes: list[KVPrefix | None], reused: list[int], *, width: int, device) -> DynamicCache:
    """The rows' reused keys and values as one cache (n, kv_heads, C, head_dim) per layer, each ending at column C;
    zeros where a row has fewer (masked: a zero key or value stays finite under the mask)."""
    source = next(prefix for prefix, k in zip(prefixes, reused, strict=True) if k)
    layers = []
    for layer, (key0, _) in enumerate(source.layers):
        shape = (len(prefixes), key0.shape[0], width, key0.shape[-1])
        keys = torch.zeros(shape, dtype=key0.dtype, device=device)  # (n, kv_heads, C, d)
        values = torch.zeros(shape, dtype=key0.dtype, device=device)  # (n, kv_heads, C, d)
        for row, (prefix, k) in enumerate(zip(prefixes, reused, strict=True)):
            if k:
                keys[row, :, width - k :] = prefix.layers[layer][0][:, :k]
                values[row, :, width - k :] = prefix.layers[layer][1][:, :k]
        layers.append((keys, values))
    return DynamicCache(layers, config=model.config)
