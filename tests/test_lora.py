"""LoRA through verl's keys on the tiny policy: the initial adapter from lab.seed alone, the KL reference as verl's (the
base with the adapter disabled), the list forms of target_modules / exclude_modules, and a negative rank said aloud."""

import pytest
import torch

import agl_lab
from agl_lab.config.doctor import diagnose
from agl_lab.training.actor import compute_log_probs
from agl_lab.training.policy import build_policy
from agl_lab.training.preflight import check_trainable
from agl_lab.training.tasks import task_from_config
from agl_lab.training.train_step import RunState
from conftest import TINY_RUN

LORA = ("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8")


def adapter_weights(policy) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in policy.model.named_parameters() if "lora_" in name}


def test_the_initial_adapter_comes_from_lab_seed_whatever_torchs_global_generator_drew_before():
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, *LORA])
    words = task_from_config(cfg).words()
    torch.manual_seed(1)
    first = adapter_weights(build_policy(cfg, words=words))
    torch.manual_seed(2)
    torch.rand(100)
    state = torch.get_rng_state()
    second = adapter_weights(build_policy(cfg, words=words))
    assert torch.equal(torch.get_rng_state(), state)  # the caller's generator is left where it was
    assert first.keys() == second.keys() and any("lora_A" in name for name in first)
    assert all(torch.equal(first[name], second[name]) for name in first)
    other = adapter_weights(
        build_policy(agl_lab.short_run_config(dotlist=[*TINY_RUN, *LORA, "lab.seed=1"]), words=words)
    )
    assert not all(torch.equal(first[name], other[name]) for name in first if "lora_A" in name)


def test_with_a_loaded_adapter_the_kl_reference_is_the_base_model_as_in_verl(tmp_path, monkeypatch):
    """verl sets ref_in_actor for a LoRA run and computes the reference log-probs with the adapter disabled."""
    import agl_lab.training.train_step as train_step

    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, *LORA])
    words = task_from_config(cfg).words()
    trained = build_policy(cfg, words=words)
    with torch.no_grad():  # an adapter that moved: lora_B away from its zero start
        generator = torch.Generator().manual_seed(0)
        for name, value in trained.model.named_parameters():
            if "lora_B" in name:
                value.copy_(torch.randn(value.shape, generator=generator))
    trained.model.save_pretrained(tmp_path / "adapter", save_embedding_layers=False)

    with_kl = (
        "actor_rollout_ref.actor.use_kl_loss=true",
        f"actor_rollout_ref.model.lora_adapter_path={tmp_path}/adapter",
    )
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, *LORA, *with_kl, "trainer.total_training_steps=1"])
    _, actor = check_trainable(cfg)
    run = RunState(cfg, actor=actor, total_steps=1)
    seen = []
    real = train_step.compute_advantages
    monkeypatch.setattr(
        train_step, "compute_advantages", lambda batch, *a, **k: (seen.append(batch), real(batch, *a, **k))[1]
    )
    run.step(1)
    (batch,) = seen
    base = build_policy(
        agl_lab.short_run_config(dotlist=[*TINY_RUN, "actor_rollout_ref.model.lora_rank=0"]), words=words
    )
    with torch.no_grad():
        expected, _ = compute_log_probs(base, batch, micro_batch_size=2, temperature=1.0, with_entropy=False)
        with_adapter, _ = compute_log_probs(trained, batch, micro_batch_size=2, temperature=1.0, with_entropy=False)
    mask = batch.batch["response_mask"].bool()
    assert torch.allclose(batch.batch["ref_log_prob"][mask], expected[mask], atol=1e-6)
    assert not torch.allclose(with_adapter[mask], expected[mask], atol=1e-3)  # the adapter does change them


def test_target_and_exclude_modules_take_verls_list_form():
    dotlist = [*TINY_RUN, *LORA, "actor_rollout_ref.model.target_modules=[q_proj,v_proj]"]
    cfg = agl_lab.short_run_config(dotlist=[*dotlist, "actor_rollout_ref.model.exclude_modules=[k_proj]"])
    assert list(cfg.actor_rollout_ref.model.target_modules) == ["q_proj", "v_proj"]
    assert [f for f in diagnose(cfg) if f.level == "error"] == []
    names = adapter_weights(build_policy(cfg, words=task_from_config(cfg).words()))
    assert names and all(".q_proj." in name or ".v_proj." in name for name in names)
    with pytest.raises(agl_lab.ConfigError) as caught:
        agl_lab.short_run_config(dotlist=[*TINY_RUN, "actor_rollout_ref.model.target_modules=[1,2]"])
    assert (
        "actor_rollout_ref.model.target_modules must be a string or a list of strings (e.g. all-linear or "
        "[q_proj,v_proj]), got [1, 2]" in str(caught.value)
    )


def test_a_negative_lora_rank_is_said_to_mean_full_fine_tuning_as_in_verl():
    findings = diagnose(agl_lab.short_run_config(dotlist=[*TINY_RUN, "actor_rollout_ref.model.lora_rank=-1"]))
    (finding,) = [f for f in findings if f.key == "actor_rollout_ref.model.lora_rank"]
    assert str(finding) == (
        "warning actor_rollout_ref.model.lora_rank: lora_rank=-1 is below 0, which verl reads as LoRA off: the run "
        "fine-tunes every weight, as with lora_rank=0 -> fix: set actor_rollout_ref.model.lora_rank=0 for full "
        "fine-tuning, or a rank > 0 (e.g. 16) for a LoRA adapter"
    )
    assert not [f for f in diagnose(agl_lab.short_run_config(dotlist=TINY_RUN)) if "lora_rank" in f.key]
