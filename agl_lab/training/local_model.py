"""Loading the policy a config names (:mod:`agl_lab.config.model_source`): a folder, a GGUF file or a saved adapter.

Everything loads in float32 (the lab's updates and log-probs are fp32; on CUDA the forward passes run under bf16
autocast, :mod:`agl_lab.training.policy`). The task's prompts go through the model's own tokenizer, and through its
chat template when it has one (:mod:`agl_lab.training.conversation`), so the policy sees what it would see behind a
chat endpoint.

* A Hugging Face folder: ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained``.
* A GGUF file (``lab.model=smollm2-135m-instruct``, or ``lab.model_path=FILE.gguf``): transformers dequantizes it
  through the ``gguf`` package (~16 s for SmolLM2-135M on 2 cores). The result is kept as a Hugging Face folder in the
  cache (:func:`cache_dir`, ``$AGL_LAB_CACHE`` or ``~/.cache/agl_lab``; 540 MB for SmolLM2-135M), one per file, size and
  modification time, and later loads read that (~1 s). It is written whole or not at all, so runs starting side by
  side (a sweep's cells) may each write it: the first rename wins, the others read it.
* A LoRA adapter folder a run saved (``adapter_config.json``): its base model as above, the adapter applied with peft
  and merged into it; training then goes on from the merged weights (with a fresh adapter when ``lora_rank`` > 0).

End of a response: a chat model's turn ends with its end-of-turn token, which the model's generation config names.
transformers' GGUF conversion gives SmolLM2's tokenizer ``<|im_start|>`` as its EOS although the file says
``<|im_end|>`` (id 2): the tokenizer's EOS is set to the generation config's, so sampling stops where a chat server
would.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig

from agl_lab.config.model_source import ModelSource, adapter_base
from agl_lab.files.atomic_files import written_whole

__all__ = ["cache_dir", "load_model"]


def load_model(cfg: DictConfig, source: ModelSource):
    """``(model, tokenizer)`` from a checked ``source`` (not ``tiny``), in float32."""
    if source.kind == "adapter":
        from peft import PeftModel
        from transformers import AutoTokenizer

        model, _ = load_model(cfg, adapter_base(source.path))
        model = PeftModel.from_pretrained(model, source.path).merge_and_unload()
        tokenizer = AutoTokenizer.from_pretrained(source.path)
        return model, _finish_tokenizer(tokenizer, model, where=source.where)
    folder = _dequantized(source.path) if source.kind == "gguf" else source.path
    trust = bool(cfg.actor_rollout_ref.model.get("trust_remote_code", False)) and source.kind == "folder"
    return _from_folder(folder, trust=trust, where=source.where)


def cache_dir() -> Path:
    """Where dequantized GGUF models are kept: ``$AGL_LAB_CACHE``, else ``$XDG_CACHE_HOME/agl_lab`` or
    ``~/.cache/agl_lab``."""
    if os.environ.get("AGL_LAB_CACHE"):
        return Path(os.environ["AGL_LAB_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "agl_lab"


def _from_folder(folder: Path, *, trust: bool, where: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, trust_remote_code=trust)
    return model, _finish_tokenizer(tokenizer, model, where=where)


def _finish_tokenizer(tokenizer, model, *, where: str):
    """EOS = the generation config's end-of-turn token (module docstring); a pad token where there is none."""
    generation = getattr(model, "generation_config", None)
    ends = getattr(generation, "eos_token_id", None)
    ends = [ends] if isinstance(ends, int) else list(ends or [])
    if ends and tokenizer.eos_token_id not in ends:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(ends[0])
    if tokenizer.eos_token_id is None:
        raise ValueError(
            f"{where}: its tokenizer has no eos_token, so no response could end: set eos_token in the folder's "
            "tokenizer_config.json (a chat model's end-of-turn token, e.g. <|im_end|>)"
        )
    if tokenizer.pad_token_id is None:  # many chat models ship without one; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token
    # transformers ignores the clean-up for a BPE tokenizer (it would strip spaces before punctuation) and says so on
    # every decode; the GGUF conversion asks for it
    from tokenizers.models import BPE

    if isinstance(getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None), BPE):
        tokenizer.clean_up_tokenization_spaces = False
    return tokenizer


def _dequantized(file: Path) -> Path:
    """The cached Hugging Face folder of a GGUF file, made on first use (module docstring)."""
    stat = file.stat()
    folder = cache_dir() / "gguf" / f"{file.stem}-{stat.st_size}-{stat.st_mtime_ns}"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    folder.parent.mkdir(parents=True, exist_ok=True)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Converting and de-quantizing GGUF tensors" would bury the run's own bar
    try:
        tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
        model = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype=torch.float32)
        tokenizer = _finish_tokenizer(tokenizer, model, where=str(file))
        try:
            with written_whole(folder) as partial:
                model.save_pretrained(partial)
                tokenizer.save_pretrained(partial)
        except OSError:
            if not (folder / "config.json").is_file():  # not another process's copy that got there first
                raise
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return folder
