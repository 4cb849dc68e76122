"""The tiny default policy: a small ``LlamaForCausalLM`` built from a config, with a word-level tokenizer built in code.

``lab.model=tiny`` (the default): ``lab.model_layers`` layers of width ``lab.model_hidden`` (heads = width / 16) over
a vocabulary of the task's words (:meth:`words` of :mod:`agl_lab.training.tasks`' tasks) and three special tokens.
Nothing is downloaded, and the weights come from ``lab.seed`` through a generator of the run's own (never torch's
process-wide one, so runs in threads of one process do not disturb each other). It learns the lock task from scratch
on a laptop CPU in about a minute.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from agl_lab.core.keys import MODEL_HIDDEN

__all__ = ["SPECIAL_TOKENS", "tiny_llama", "word_tokenizer"]

SPECIAL_TOKENS = ("<pad>", "<unk>", "<eos>")  # ids 0, 1, 2 in the tiny tokenizer


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *dict.fromkeys(words)])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def tiny_llama(tokenizer: PreTrainedTokenizerFast, *, layers: int, hidden: int, seed: int) -> LlamaForCausalLM:
    heads = max(1, hidden // 16)
    if hidden % heads:
        raise ValueError(f"{MODEL_HIDDEN} must be a multiple of 16 (or below 16), got {hidden}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.device("meta"):  # no weights yet, and no draw from torch's process-wide generator
        model = LlamaForCausalLM(config)
    model.to_empty(device="cpu")
    _init_weights(model, generator=torch.Generator().manual_seed(seed))
    return model


@torch.no_grad()
def _init_weights(model: LlamaForCausalLM, *, generator: torch.Generator) -> None:
    """The weights ``LlamaForCausalLM(config)`` gets after ``torch.manual_seed(seed)``, from the run's own generator.

    Bit for bit (tests/test_policy.py compares): torch's constructors first draw each layer's default init in the
    order they build it (``normal_`` for the embedding, ``kaiming_uniform_`` for linears), values that transformers
    then overwrites, depth-first, with ``normal_(0, initializer_range)``; norms are ones, the rotary frequencies
    computed. Drawing from a generator of the run's own, not the process-wide one, keeps two runs in one process (the
    training panel's thread, a notebook) from changing each other's weights.
    """
    base, std = model.model, model.config.initializer_range
    for module in base.modules():  # construction order: only the generator's position matters here
        if isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 1.0, generator=generator)
        elif isinstance(module, nn.Linear):
            bound = 1 / math.sqrt(module.in_features)  # kaiming_uniform_(a=sqrt(5)) on (out, in)
            module.weight.uniform_(-bound, bound, generator=generator)
    for module in _children_first(base):
        if isinstance(module, nn.Linear | nn.Embedding):
            module.weight.normal_(0.0, std, generator=generator)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif "RMSNorm" in type(module).__name__:
            module.weight.fill_(1.0)
        elif "RotaryEmbedding" in type(module).__name__:
            inv_freq, _ = module.compute_default_rope_parameters(module.config)
            module.inv_freq.copy_(inv_freq)
            module.original_inv_freq.copy_(inv_freq)
    model.tie_weights()  # lm_head shares the embedding (its own draws come last, so they are not needed)


def _children_first(module: nn.Module) -> Iterator[nn.Module]:
    for child in module.children():
        yield from _children_first(child)
    yield module
