"""A policy from a local Hugging Face model folder: which folder the config names, what it must hold, and loading it.

``lab.model_path`` (else ``actor_rollout_ref.model.path`` when that is a local folder) names a folder saved with
``save_pretrained``: a causal language model (``config.json`` and its weights) and the tokenizer it was trained with.
Any architecture ``AutoModelForCausalLM`` loads will do (Qwen2, Llama, a finished run's ``policy/``, ...); nothing is
downloaded. The task's prompts go through that tokenizer, and through its chat template when it has one
(:mod:`agl_lab.training.conversation`), so the policy sees what it would see behind a chat endpoint.

:func:`check_model_folder` reads only small files (``config.json``, the tokenizer's names), so every entrance runs it
before a run or a sweep creates anything (:func:`agl_lab.training.preflight.check_trainable`): a folder that is not a
causal LM, or that lacks its tokenizer, is one error naming the key and the fix, not a traceback from transformers
after the first cells trained.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from agl_lab.core.keys import MODEL_PATH, MODEL_PATH_LAB

__all__ = ["TOKENIZER_FILES", "check_model_folder", "load_local_model", "local_model_path"]

# A folder holds a tokenizer when it has one of these (what AutoTokenizer builds one from); tokenizer_config.json
# alone only configures one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def local_model_path(cfg: DictConfig) -> Path | None:
    """``lab.model_path`` (must exist), else ``actor_rollout_ref.model.path`` if it is a local directory, else None."""
    if cfg.lab.model_path:
        path = Path(cfg.lab.model_path).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(
                f"{MODEL_PATH_LAB}={cfg.lab.model_path!r} is not a directory: give a local Hugging Face model folder "
                "(config.json + weights), e.g. a finished run's policy/ folder, or null for the tiny default policy"
            )
        return path
    verl_path = cfg.actor_rollout_ref.model.get("path")
    if verl_path and Path(str(verl_path)).expanduser().is_dir():
        return Path(str(verl_path)).expanduser()
    return None


def check_model_folder(cfg: DictConfig) -> Path | None:
    """The local model folder the config names (None: the tiny default policy), after checking it holds a causal LM
    and its tokenizer; raises ``FileNotFoundError`` (a missing file) or ``ValueError`` (not a causal LM)."""
    path = local_model_path(cfg)
    if path is None:
        return None
    key = MODEL_PATH_LAB if cfg.lab.model_path else MODEL_PATH
    where = f"{key}={str(path)!r}"
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"{where} has no config.json, so it is no Hugging Face model folder: give a folder written by "
            "save_pretrained (config.json, weights and tokenizer), e.g. a finished run's policy/ folder"
        )
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where}: its config.json cannot be read ({exc}): save the model again") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{where}: its config.json is not a JSON object: save the model again")
    _check_causal_lm(config, where=where)
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{where} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): the task's prompts go through the "
            "model's own tokenizer; save it beside the model (tokenizer.save_pretrained(folder)), or give a folder "
            "that has one"
        )
    return path


def load_local_model(cfg: DictConfig, path: Path):
    """``(model, tokenizer)`` from the checked folder, in float32 (the lab's updates and log-probs are fp32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trust = bool(cfg.actor_rollout_ref.model.get("trust_remote_code", False))
    key = MODEL_PATH_LAB if cfg.lab.model_path else MODEL_PATH
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
    if tokenizer.eos_token_id is None:
        raise ValueError(
            f"{key}={str(path)!r}: its tokenizer has no eos_token, so no response could end: set eos_token in the "
            "folder's tokenizer_config.json (a chat model's end-of-turn token, e.g. <|im_end|>)"
        )
    if tokenizer.pad_token_id is None:  # many chat models ship without one; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=trust)
    return model, tokenizer


def _check_causal_lm(config: dict, *, where: str) -> None:
    """Refuse a config that transformers would not load as a causal LM, or whose saved head is another task's."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if "AutoModelForCausalLM" in (config.get("auto_map") or {}):
        return  # its own code (trust_remote_code) declares a causal LM
    model_type = config.get("model_type")
    architectures = [str(name) for name in config.get("architectures") or []]
    causal = {name for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() for name in _names(value)}
    what = f"a {architectures[0]} (model_type {model_type})" if architectures else f"model_type {model_type!r}"
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or (architectures and not set(architectures) & causal):
        raise ValueError(
            f"{where} holds {what}, not a causal language model: the policy is loaded with AutoModelForCausalLM; "
            "give the folder of a ...ForCausalLM model (its config.json 'architectures' names one, e.g. "
            "Qwen2ForCausalLM or LlamaForCausalLM)"
        )


def _names(value) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)
