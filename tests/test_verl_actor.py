"""``lab.actor=verl``: verl 0.9.1's own actor engine in the lab process, against the lab's own update loop.

It needs verl's platform registry (verl 0.9.0 on); under verl 0.8.0 this module checks that it is refused by name.

Equal where they can be: the same batches, ``actor.shuffle=false`` (the default; verl and the lab shuffle with
different generators), one torch thread, fp32 and the lab model's attention (both set by ``verl_worker_config``).
Each backend trains its own copy of the same initial policy on the batches the lab copy samples, each with its own
old log-probs, as two trainers would.
"""

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hydra.errors import InstantiationException
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.engine import EngineRegistry

from agl_lab import ConfigError, compute_advantages, select_rows, short_run_config, train
from agl_lab.config.verl_features import VERL_FEATURES
from agl_lab.core.aggregation import aggregate, aggregation_limits
from agl_lab.core.pipeline import mini_batch_rows
from agl_lab.training.actor import LabActor, compute_log_probs
from agl_lab.training.policy import build_policy
from agl_lab.training.rollout import collect_rollouts, sampling_params
from agl_lab.training.tasks import make_task
from agl_lab.training.verl_actor import VerlActor
from conftest import TINY_RUN, only_if

PLATFORMS = VERL_FEATURES["verl-actor"]
if PLATFORMS.available():
    from verl.plugin.platform import PlatformRegistry, platform_manager

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-5
# conftest.TINY_RUN (8 rollouts a step, mini-batches of 4 rows in micro-batches of 2), more turns so groups differ
TINY = (*TINY_RUN, "lab.max_turns=3", "trainer.logger=[]", "lab.device=cpu")
KL_ENTROPY_EPOCHS_COSINE = (
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.kl_loss_coef=0.1",
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.actor.ppo_epochs=2",
    "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=1",
    "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
    "algorithm.enable_rollout_level_advantage=false",
)
COMPARED = ("actor/pg_loss", "actor/grad_norm", "actor/lr", "actor/ppo_kl", "actor/kl_loss", "actor/entropy_loss")


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_cfg(*dotlist):
    return short_run_config(dotlist=[*TINY, *dotlist])


def policy_and_task(cfg):
    lab = cfg.lab
    task = make_task(lab.task, size=lab.task_size, max_turns=lab.max_turns, rewrite_prob=lab.rewrite_prob, seed=0)
    return build_policy(cfg, words=task.words()), task


def sampled_batch(cfg, policy, task, step):
    """A short-run step's trained rows, sampled by ``policy`` (trainer steps 1-2), before old log-probs."""
    items = task.sample_items(step=step, batch_size=int(cfg.data.train_batch_size))
    generator = torch.Generator().manual_seed(step)
    rollouts, _ = collect_rollouts(
        policy, task, step=step, items=items, sampling=sampling_params(cfg), generator=generator
    )
    rows, _ = aggregate(rollouts, **aggregation_limits(cfg), pad_token_id=policy.pad_token_id)
    batch, _ = select_rows(rows, cfg, seed=step)
    assert len(batch) >= mini_batch_rows(cfg)
    return batch


def max_weight_diff(a, b):
    b_state = b.state_dict()
    return max(float((value - b_state[name]).abs().max()) for name, value in a.state_dict().items())


def process_state():
    """Everything a verl worker in this process could leave behind."""
    engines = EngineRegistry._engines
    return {
        "environ": dict(os.environ),
        "platform": platform_manager._current_platform,  # compared by identity
        "platforms": dict(PlatformRegistry._platforms),
        "engines": {model: {backend: dict(keys) for backend, keys in b.items()} for model, b in engines.items()},
        "process group": dist.is_initialized(),
        "threads": torch.get_num_threads(),
        "affinity": os.sched_getaffinity(0),
        "rng": torch.get_rng_state().numpy().tobytes(),
        # this process's (its pid in the name): another test process may hold its own meanwhile
        "temp folders": sorted(Path(tempfile.gettempdir()).glob(f"agl_lab_verl_actor_{os.getpid()}_*")),
    }


@only_if(PLATFORMS.available())
@pytest.mark.parametrize("extra", [(), KL_ENTROPY_EPOCHS_COSINE], ids=["agl_defaults", "kl_entropy_epochs_cosine"])
def test_both_backends_give_equal_old_log_probs_and_weights_over_several_updates(extra):
    cfg = tiny_cfg("trainer.total_training_steps=4", *extra)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    policy, task = policy_and_task(cfg)
    initial, verl_policy = copy.deepcopy(policy.model), copy.deepcopy(policy)
    ref = copy.copy(policy)
    ref.model = copy.deepcopy(policy.model).eval()
    lab = LabActor(policy, actor, mini_batch_rows=mini_batch_rows(cfg), log_prob_micro=2, total_steps=4)
    with VerlActor(cfg, verl_policy, total_steps=4) as verl:
        assert max_weight_diff(policy.model, verl_policy.model) == 0.0  # verl loads the saved policy bit for bit
        for step in range(1, 5):
            batch = sampled_batch(cfg, policy, task, step)
            mask = batch.batch["response_mask"].bool()  # (rows, R)
            lab_old, lab_entropy = lab.compute_log_probs(batch, temperature=1.0, with_entropy=True)
            verl_old, verl_entropy = verl.compute_log_probs(batch, temperature=1.0, with_entropy=True)
            assert float(((lab_old - verl_old).abs() * mask).max()) <= TOL, step
            assert float(((lab_entropy - verl_entropy).abs() * mask).max()) <= TOL, step
            if actor.use_kl_loss:
                batch.batch["ref_log_prob"], _ = compute_log_probs(
                    ref, batch, micro_batch_size=2, temperature=1.0, with_entropy=False
                )
            batch.batch["old_log_probs"] = lab_old
            batch, _ = compute_advantages(batch, cfg)
            verl_batch = copy.copy(batch)
            verl_batch.batch = batch.batch.clone()
            verl_batch.batch["old_log_probs"] = verl_old
            lab_metrics = lab.update(batch, temperature=1.0, step=step)
            verl_metrics = verl.update(verl_batch, temperature=1.0, step=step)
            # update() synced the lab-side copy of verl's weights; they are verl's exactly
            assert max(float((t - verl_policy.model.state_dict()[n]).abs().max()) for n, t in _params(verl)) == 0.0
            assert max_weight_diff(policy.model, verl_policy.model) <= TOL, step
            assert {k for k in verl_metrics if k.startswith("actor/")} == set(lab_metrics), step
            for key in COMPARED:
                if key in lab_metrics:
                    assert verl_metrics[key] == pytest.approx(lab_metrics[key], rel=1e-3, abs=1e-6), (step, key)
    assert max_weight_diff(policy.model, initial) > 1e-3  # the updates did move the weights


def _params(verl):
    params, _ = verl.engine.get_per_tensor_param()
    return [(name, tensor.detach()) for name, tensor in params]


@only_if(PLATFORMS.available())
def test_a_short_run_on_verls_actor_matches_the_lab_backend_and_leaves_the_process_as_it_was(tmp_path):
    before = process_state()
    verl_runs = [
        train(tiny_cfg("lab.actor=verl", f"lab.run_dir={tmp_path / f'verl{i}'}"), progress=False) for i in (1, 2)
    ]
    assert process_state() == before
    lab_run = train(tiny_cfg(f"lab.run_dir={tmp_path / 'lab'}"), progress=False)

    first, second = (run.run_dir / "metrics.jsonl" for run in verl_runs)
    assert first.read_text() == second.read_text()  # a second run in the same process: the same run
    verl_lines, lab_lines = (
        [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        for d in (verl_runs[0].run_dir, lab_run.run_dir)
    )
    assert len(verl_lines) == len(lab_lines) == 2
    for verl_line, lab_line in zip(verl_lines, lab_lines, strict=True):
        assert set(verl_line) == set(lab_line)
        for key, value in lab_line.items():
            assert verl_line[key] == pytest.approx(value, rel=1e-3, abs=1e-6), key
    timings = json.loads((verl_runs[0].run_dir / "timings.jsonl").read_text().splitlines()[0])
    assert "perf/max_memory_allocated_gb" in timings and "perf/mfu/actor" in timings
    # the policy the run saved is verl's trained one (synced after each update), equal to the lab backend's
    saved, lab_saved = (
        build_policy(tiny_cfg(f"lab.model_path={run.run_dir / 'policy'}"), words=[]) for run in (verl_runs[0], lab_run)
    )
    assert max_weight_diff(saved.model, lab_saved.model) <= TOL
    initial, _ = policy_and_task(tiny_cfg())
    assert max_weight_diff(saved.model, initial.model) > 1e-4


@only_if(PLATFORMS.available())
def test_a_failing_start_leaves_nothing_behind(monkeypatch):
    cfg = tiny_cfg()
    policy, _ = policy_and_task(cfg)
    monkeypatch.setattr(policy, "save", lambda path: None)  # an empty model folder: verl cannot load it
    before = process_state()
    with pytest.raises(InstantiationException):
        VerlActor(cfg, policy, total_steps=2)
    assert process_state() == before


@only_if(PLATFORMS.available())
def test_a_second_verl_actor_in_the_same_process_is_refused_clearly():
    cfg = tiny_cfg()
    policy, _ = policy_and_task(cfg)
    with VerlActor(cfg, policy, total_steps=2):
        with pytest.raises(ConfigError, match="another run on verl's actor engine is active in this process"):
            VerlActor(cfg, policy, total_steps=2)
    with VerlActor(cfg, policy, total_steps=2):  # the first one released its turn on close
        pass


@only_if(PLATFORMS.available())
def test_a_log_prob_micro_batch_verl_cannot_split_is_refused_before_the_run_starts(tmp_path):
    # the lab backend would score 4 rows as 3 + 1; verl's worker asserts whole micro-batches
    micro = "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"
    cfg = tiny_cfg("lab.actor=verl", f"{micro}=3", f"lab.run_dir={tmp_path / 'run'}")
    before = process_state()
    with pytest.raises(ConfigError, match=rf"{micro.replace('.', '[.]')}=3 must divide the PPO mini-batch of 4 rows"):
        train(cfg, progress=False)
    assert not (tmp_path / "run").exists()
    assert process_state() == before


@only_if(PLATFORMS.available())
def test_a_process_group_the_caller_made_is_used_and_kept():
    cfg = tiny_cfg()
    policy, task = policy_and_task(cfg)
    batch = sampled_batch(cfg, policy, task, 1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        with VerlActor(cfg, policy, total_steps=1) as verl:
            log_probs, entropy = verl.compute_log_probs(batch, temperature=1.0, with_entropy=False)
        assert dist.is_initialized() and dist.group.WORLD is group
        assert log_probs.shape == batch.batch["responses"].shape and entropy is None
    finally:
        dist.destroy_process_group()


@only_if(not PLATFORMS.available())
def test_an_older_verl_refuses_lab_actor_verl_by_name_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError) as caught:
        train(tiny_cfg("lab.actor=verl", f"lab.run_dir={tmp_path / 'run'}"), progress=False)
    fix = "choose another actor, or verl 0.9.1 (make ... VERL=0.9.1)"
    assert str(caught.value).splitlines()[1:] == [f"  - error   lab.actor: {PLATFORMS.problem()} -> fix: {fix}"]
    needs = "lab.actor=verl needs verl's platform registry (verl.plugin) to run verl's actor in the lab (verl 0.9.0"
    assert needs in str(caught.value)
    assert not (tmp_path / "run").exists() and not dist.is_initialized()


def test_gpu_check_says_it_needs_cuda_and_exits_2_on_a_machine_without_one():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a GPU machine
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "gpu_check.py needs a CUDA GPU" in result.stderr
    assert result.stdout == ""
