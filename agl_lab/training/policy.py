"""The policy of a short run: a causal LM and its tokenizer, sampling responses and scoring them.

By default a tiny ``LlamaForCausalLM`` (``lab.model_layers`` layers of width ``lab.model_hidden``) is built
from a config, with a word-level tokenizer over the task's words built in code: nothing is downloaded,
the weights come from ``lab.seed`` through a generator of the run's own (never torch's process-wide one, so runs in
threads of one process do not disturb each other), and it learns the default task on a laptop CPU. A local Hugging Face
causal-LM folder with its tokenizer (``lab.model_path``, else ``actor_rollout_ref.model.path`` when that is a local
directory; :mod:`agl_lab.training.local_model`) goes through the same code: ``from_pretrained`` instead of a config.
A finished run's ``policy/`` folder is such a directory. ``lab.device: auto`` picks CUDA when torch sees a GPU, else
the CPU.

Sampling and scoring read verl's rollout keys (``temperature``, ``top_k``, ``top_p``): log-probs are taken
on logits divided by the temperature, as verl's actor does, so old and new log-probs match the sampler.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import verl.utils.torch_functional as verl_F
from omegaconf import DictConfig
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import nn
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

from agl_lab.core.keys import DEVICE, MODEL_HIDDEN
from agl_lab.files.atomic_files import written_whole
from agl_lab.training.local_model import check_model_folder, load_local_model

__all__ = ["SPECIAL_TOKENS", "Policy", "build_policy", "generate", "resolve_device", "score"]

SPECIAL_TOKENS = ("<pad>", "<unk>", "<eos>")  # ids 0, 1, 2 in the tiny tokenizer


@dataclass
class Policy:
    """A causal LM, its tokenizer and the device it runs on; ``source`` says where it came from."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    source: str

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def save(self, path: Path) -> None:
        """``save_pretrained`` model and tokenizer: the folder loads back as ``lab.model_path``. Written whole or not
        at all (a temporary folder renamed to ``path``): a stopped save never leaves a folder that cannot load."""
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a "Writing model shards" bar would land after the CLI's last line
        try:
            with written_whole(path) as partial:
                self.model.save_pretrained(partial)
                self.tokenizer.save_pretrained(partial)
        finally:
            if bars:
                hf_logging.enable_progress_bar()


def build_policy(cfg: DictConfig, *, words: list[str]) -> Policy:
    """The tiny default policy over ``words`` (the task's vocabulary), or the local model the config names."""
    lab = cfg.lab
    device = resolve_device(lab.device)
    path = check_model_folder(cfg)
    if path is not None:
        model, tokenizer = load_local_model(cfg, path)
        source = str(path)
    else:
        tokenizer = _word_tokenizer(words)
        model = _tiny_llama(tokenizer, layers=lab.model_layers, hidden=lab.model_hidden, seed=lab.seed)
        source = f"tiny LlamaForCausalLM ({lab.model_layers} layers, hidden {lab.model_hidden}, vocab {len(tokenizer)})"
    return Policy(model=model.to(device), tokenizer=tokenizer, device=device, source=source)


def resolve_device(name: str) -> torch.device:
    """``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``; other names are passed to torch as they are."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"{DEVICE}={name!r} is not a torch device: use auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{DEVICE}={name!r} but torch sees no CUDA device: use {DEVICE}=auto or cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ValueError(
            f"{DEVICE}={name!r} but torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}: use {DEVICE}="
            f"auto, cuda or cuda:N with N < {count}"
        )
    return device


@torch.no_grad()
def generate(
    policy: Policy,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator,
) -> list[list[int]]:
    """Sample one response per prompt (token ids, up to and including EOS), batched with a KV cache."""
    model, device, pad = policy.model, policy.device, policy.pad_token_id
    model.eval()
    lengths = torch.tensor([len(p) for p in prompts])
    width = int(lengths.max())
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # (n, P), left-padded
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
    attention_mask = (torch.arange(width)[None, :] >= (width - lengths)[:, None]).long()  # (n, P)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)  # (n, P)

    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
    next_position = position_ids[:, -1:] + 1  # (n, 1)
    finished = torch.zeros(len(prompts), dtype=torch.bool, device=device)  # (n,)
    tokens = []
    for t in range(max_new_tokens):
        alive = ~finished  # (n,)
        token = _sample(out.logits[:, -1], temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        token = torch.where(alive, token, pad)  # (n,)
        tokens.append(token)
        finished |= token == policy.eos_token_id
        if bool(finished.all()) or t == max_new_tokens - 1:
            break
        attention_mask = torch.cat([attention_mask, alive.long()[:, None]], dim=-1)  # (n, P + t + 1)
        out = model(
            input_ids=token[:, None],
            attention_mask=attention_mask,
            position_ids=next_position,
            past_key_values=out.past_key_values,
            use_cache=True,
        )
        next_position = next_position + 1
    sampled = torch.stack(tokens, dim=-1).cpu()  # (n, new)
    return [_until_eos(row, policy.eos_token_id) for row in sampled.tolist()]


def score(
    policy: Policy,
    *,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of the last ``response_length`` tokens of each row, as verl's actor takes them.

    Inputs are (rows, P + R) in verl's row layout; returns (rows, R) tensors. Gradients flow unless the caller
    disables them.
    """
    logits = policy.model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).logits  # (rows, P + R, V)
    # position t predicts token t + 1, so the response's logits start one column before it
    logits = logits[:, -response_length - 1 : -1].float() / temperature  # (rows, R, V)
    responses = input_ids[:, -response_length:]  # (rows, R)
    log_prob = verl_F.logprobs_from_logits(logits, responses)  # (rows, R)
    entropy = verl_F.entropy_from_logits(logits) if with_entropy else None  # (rows, R)
    return log_prob, entropy


def _sample(
    logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float, generator: torch.Generator
) -> torch.Tensor:
    """One token per row from (n, V) logits; temperature 0 is greedy, as in verl's rollout config."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature  # (n, V)
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (n, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (n, V)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token once the tokens before it already cover top_p (the most likely token always stays)
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    probs = logits.softmax(dim=-1)  # (n, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (n,)


def _until_eos(row: list[int], eos: int) -> list[int]:
    # a row is padded only after its EOS, so a row without EOS is all sampled tokens
    return row[: row.index(eos) + 1] if eos in row else row


def _word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *dict.fromkeys(words)])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>")


def _tiny_llama(tokenizer: PreTrainedTokenizerFast, *, layers: int, hidden: int, seed: int) -> LlamaForCausalLM:
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
