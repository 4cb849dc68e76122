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

No dropout, no bias (verl's settings). The optimizer gets the adapter's parameters only
(:func:`agl_lab.training.actor.build_optimizer_and_scheduler`), and a reference policy for a KL term is the frozen
initial policy, as without LoRA.

The saved policy (``policy/`` of a run, :meth:`agl_lab.training.policy.Policy.save`): with an adapter on a base that
loads from a file (a packaged model, a folder, a ``.gguf`` file), the adapter alone (``adapter_config.json``,
``adapter_model.safetensors``: 19 MB for SmolLM2-135M at r = 16 on all linear layers, against 540 MB for the model)
and the tokenizer, with ``base_model_name_or_path`` naming that base (a packaged model by its ``lab.model`` name, else
an absolute path); ``lab.model_path=<run>/policy`` loads the base and merges the adapter into it. On the tiny policy,
whose base weights come from a seed rather than a file, the merged model is saved instead.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from agl_lab.core.keys import LORA_RANK

__all__ = ["apply_lora", "has_adapter", "save_adapter_or_merged"]


def apply_lora(model, cfg: DictConfig):
    """``model`` with a LoRA adapter when ``lora_rank`` > 0 (module docstring), else ``model`` itself."""
    settings = cfg.actor_rollout_ref.model
    rank = int(settings.get("lora_rank", 0) or 0)
    if rank <= 0:
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
