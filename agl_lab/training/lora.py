"""LoRA through verl's own keys: low-rank adapters on the policy (peft), and the saved policy that loads back.

verl's keys under ``actor_rollout_ref.model`` (its ``ppo_trainer`` config; the same in Agent Lightning's), read as
verl's FSDP workers read them:

=====================  ================  =============================================================================
key                    verl's default    effect here
=====================  ================  =============================================================================
``lora_rank``          0                 0 = full fine-tuning; r > 0 = a rank-r LoRA adapter on ``target_modules``,
                                         only the adapter trains (the base weights are frozen)
``lora_alpha``         16                the adapter's scale is ``lora_alpha / lora_rank``
``target_modules``     ``all-linear``    the modules that get adapters: ``all-linear`` (every linear layer but the
                                         output head) or a list of names (``[q_proj, v_proj]``)
``exclude_modules``    null              names left out of ``target_modules``
``lora_adapter_path``  null              a saved adapter to start from (trainable), instead of a fresh one
=====================  ================  =============================================================================

``lora_rank`` < 0 is LoRA off, as in verl (the doctor says so). ``target_modules`` and ``exclude_modules`` take a
string or a list of names, as verl's config does. No dropout, no bias (verl's settings). The adapter's initial weights
come from ``lab.seed`` (:mod:`agl_lab.training.seeding`: peft draws ``lora_A`` from torch's global generator). The
optimizer gets the adapter's parameters only (:func:`agl_lab.training.actor.build_optimizer_and_scheduler`), and the
reference policy of a KL term is the base model with the adapter disabled, as verl's (``ref_in_actor``:
:func:`agl_lab.training.train_step._reference_policy`), also for an adapter loaded from ``lora_adapter_path``.

The saved policy (``policy/`` of a run, :meth:`agl_lab.training.policy.Policy.save`): with an adapter on a base that
loads from a file (a packaged model, a folder, a ``.gguf`` file), the adapter alone (``adapter_config.json``,
``adapter_model.safetensors``: 19 MB for SmolLM2-135M at r = 16 on all linear layers, against 540 MB for the model)
and the tokenizer, with ``base_model_name_or_path`` naming that base (a packaged model by its ``lab.model`` name, else
an absolute path); ``lab.model_path=<run>/policy`` loads the base with the adapter on it: trainable when
``lora_rank`` > 0 (the pretrained preset, which such a run gets: training continues the saved adapter, as verl's
``lora_adapter_path``), merged into the base when ``lora_rank`` = 0 (:mod:`agl_lab.training.local_model`). On the
tiny policy, whose base weights come from a seed rather than a file, the merged model is saved instead.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from agl_lab.core.keys import LORA_ADAPTER_PATH, LORA_RANK, MODEL_PATH_LAB

__all__ = ["apply_lora", "has_adapter", "save_adapter_or_merged"]


def apply_lora(model, cfg: DictConfig):
    """``model`` with a LoRA adapter when ``lora_rank`` > 0 (module docstring), else ``model`` itself."""
    settings = cfg.actor_rollout_ref.model
    rank = int(settings.get("lora_rank", 0) or 0)
    if rank <= 0:
        return model
    if has_adapter(model):  # a run's saved adapter, loaded trainable (lab.model_path): training continues it
        if settings.get("lora_adapter_path"):
            raise ValueError(
                f"{LORA_ADAPTER_PATH}={settings.lora_adapter_path!r}, but {MODEL_PATH_LAB} names a saved adapter "
                f"already, which training continues: set {LORA_ADAPTER_PATH}=null, or {MODEL_PATH_LAB} to a model"
            )
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    if settings.get("lora_adapter_path"):
        return PeftModel.from_pretrained(model, str(settings.lora_adapter_path), is_trainable=True)
    targets = settings.get("target_modules", "all-linear")
    targets = targets if isinstance(targets, str) else [str(name) for name in targets]
    excluded = settings.get("exclude_modules")
    excluded = excluded if excluded is None or isinstance(excluded, str) else [str(name) for name in excluded]
    lora = LoraConfig(
        r=rank,
        lora_alpha=int(settings.get("lora_alpha", 16)),
        target_modules=targets,
        exclude_modules=excluded,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return get_peft_model(model, lora)
    except ValueError as exc:  # peft: a target module that the model does not have
        raise ValueError(f"{LORA_RANK}={rank}: peft cannot add the adapters ({exc}): fix target_modules") from exc


def has_adapter(model) -> bool:
    """Whether ``model`` carries a peft adapter."""
    return hasattr(model, "peft_config")


def save_adapter_or_merged(model, folder: Path, *, base: str | None) -> None:
    """Save an adapter-carrying ``model`` into ``folder``: the adapter naming ``base``, or merged when ``base`` is None
    (module docstring). The live model is left as it is."""
    if base is not None:
        for config in model.peft_config.values():
            config.base_model_name_or_path = base
        # save_embedding_layers=False: "auto" would look the base up on the Hugging Face Hub (a network call)
        model.save_pretrained(folder, save_embedding_layers=False)
        return
    import copy

    copy.deepcopy(model).merge_and_unload().save_pretrained(folder)
