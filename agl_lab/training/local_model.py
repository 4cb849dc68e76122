"""Loading the policy a config names (:mod:`agl_lab.config.model_source`): a folder, a GGUF file or a saved adapter.

Everything loads in float32 (the lab's updates and log-probs are fp32; on CUDA the forward passes run under bf16
autocast, :mod:`agl_lab.training.policy`). The task's prompts go through the model's own tokenizer, and through its
chat template when it has one (:mod:`agl_lab.training.conversation`), so the policy sees what it would see behind a
chat endpoint.

* A Hugging Face folder: ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained``.
* A GGUF file (``lab.model=smollm2-135m-instruct``, or ``lab.model_path=FILE.gguf``): transformers dequantizes it
  through the ``gguf`` package (~16 s for SmolLM2-135M on 2 cores). The result is kept as a Hugging Face folder in the
  cache (:func:`cache_dir`, ``$AGL_LAB_CACHE`` or ``~/.cache/agl_lab``; 540 MB for SmolLM2-135M), named by the file's
  content (its sha256, worked out once per path, size and modification time and remembered in ``gguf/sha256.json``)
  and the versions of transformers and gguf that converted it (two environments with different transformers, e.g.
  verl 0.9.1's and 0.8.0's, keep one folder each); later loads read that (~1 s). It is written whole or not at all, so
  runs starting side by side (a sweep's cells) may each write it: the first rename wins, the others read it. A cached
  folder that does not load (a weights file cut short) is made again once, with a warning; if that does not load
  either, the error names the folder to delete.
* A LoRA adapter folder a run saved (``adapter_config.json``): its base model as above, the adapter applied with peft.
  With ``lora_rank`` > 0 (the pretrained preset's 16) training continues that adapter, loaded trainable with its own
  rank, alpha and modules, as verl loads ``lora_adapter_path`` (``PeftModel.from_pretrained(..., is_trainable=True)``
  in its FSDP engine): the run goes on where the saved one stopped, and its KL reference is the base with the adapter
  disabled, as verl's. A merge plus a fresh adapter would restart the adapter at zero and make the saved run's policy
  the KL reference. With ``lora_rank`` = 0 the adapter is merged into the base and every weight trains.

End of a response: a chat model's turn ends with its end-of-turn token, which the model's generation config names.
transformers' GGUF conversion gives SmolLM2's tokenizer ``<|im_start|>`` as its EOS although the file says
``<|im_end|>`` (id 2): the tokenizer's EOS is set to the generation config's, so sampling stops where a chat server
would.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

from omegaconf import DictConfig

from agl_lab.config.model_source import ModelSource, adapter_base
from agl_lab.files.atomic_files import write_whole, written_whole

__all__ = ["cache_dir", "load_model"]


def load_model(cfg: DictConfig, source: ModelSource):
    """``(model, tokenizer)`` from a checked ``source`` (not ``tiny``), in float32."""
    if source.kind == "adapter":
        return _with_adapter(cfg, source, trainable=int(cfg.actor_rollout_ref.model.get("lora_rank", 0) or 0) > 0)
    if source.kind == "gguf":
        return _from_gguf(source.path, where=source.where)
    trust = bool(cfg.actor_rollout_ref.model.get("trust_remote_code", False))
    return _from_folder(source.path, trust=trust, where=source.where)


def _with_adapter(cfg: DictConfig, source: ModelSource, *, trainable: bool):
    """The adapter's base with the adapter on it: trainable (a peft model; ``lora_rank`` > 0), else merged into the
    base (module docstring). A base that is itself a saved adapter is merged."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    base = adapter_base(source.path)
    model, _ = _with_adapter(cfg, base, trainable=False) if base.kind == "adapter" else load_model(cfg, base)
    model = PeftModel.from_pretrained(model, source.path, is_trainable=trainable)
    model = model if trainable else model.merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(source.path)
    return model, _finish_tokenizer(tokenizer, model, where=source.where)


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


def _from_gguf(file: Path, *, where: str):
    """The model of a GGUF file from its cached folder; a cached folder that does not load (a truncated weights file)
    is deleted and made again, once (module docstring)."""
    folder = _dequantized(file)
    try:
        return _from_folder(folder, trust=False, where=where)
    except Exception as exc:  # safetensors, json and transformers each raise their own on a damaged file
        warnings.warn(f"the cached copy of {file} in {folder} does not load ({exc}): making it again", stacklevel=3)
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise OSError(f"{where}: its cached copy {folder} is damaged and cannot be removed ({exc}): delete it") from exc
    folder = _dequantized(file)
    try:
        return _from_folder(folder, trust=False, where=where)
    except Exception as exc:
        raise OSError(
            f"{where}: its cached copy {folder} does not load even when made again ({exc}): delete that folder and "
            "run again"
        ) from exc


def _dequantized(file: Path) -> Path:
    """The cached Hugging Face folder of a GGUF file, made on first use (module docstring)."""
    from importlib.metadata import version

    versions = f"transformers{version('transformers')}-gguf{version('gguf')}"
    folder = cache_dir() / "gguf" / f"{file.stem}-{_content_sha256(file)[:16]}-{versions}"
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        with written_whole(folder) as partial:
            _convert(file, partial)
    except OSError:
        if not (folder / "config.json").is_file():  # not another process's copy that got there first
            raise
    return folder


def _convert(file: Path, folder: Path) -> None:
    """Dequantize ``file`` through transformers and ``gguf`` into ``folder`` (float32 weights and the tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Converting and de-quantizing GGUF tensors" would bury the run's own bar
    try:
        tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
        model = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype=torch.float32)
        tokenizer = _finish_tokenizer(tokenizer, model, where=str(file))
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _content_sha256(file: Path) -> str:
    """sha256 of ``file``'s bytes (~0.3 s for 98 MB), remembered in ``<cache>/gguf/sha256.json`` per path, size and
    modification time, so later loads read one small file instead."""
    stat = file.stat()
    sidecar = cache_dir() / "gguf" / "sha256.json"
    key = f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    try:
        known = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if isinstance(known.get(key), str):
        return known[key]
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    known[key] = digest.hexdigest()
    try:  # a lost race with another process costs that process one more hash, nothing else
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        write_whole(sidecar, json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only cache: the hash is computed again next time
    return known[key]
