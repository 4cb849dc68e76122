"""The recorder on Agent Lightning 1.0.2's own ``_train_step`` (a bare trainer: no Ray, no workers, as
tests/agl_oracle.py drives it): the Parquet it writes is the batch the actor got plus the rows the cap dropped, the
step's metrics carry verl PR #7580's names with hand-checked values, the recording trainer trains what Agent
Lightning's trains, and the metrics logged through verl's ``Tracking`` to W&B offline read back with the lab's
readers."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import pickle
import random
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from agl_oracle import agl, agl_config, agl_train_step, assert_same_batch, make_rows
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto

from agl_lab.training import agl_recorder
from agl_lab.training.agl_recorder import SETUP_HOOK, SETUP_HOOK_KEY, record_run, recording_trainer, setup_worker
from agl_lab.training.recording import ROW, SCHEMA

# GRPO on two rollouts with rewards 1 and 0: ±(1 − 0.5) / (std + eps), std √0.5; in the scores' bf16 (Agent
# Lightning's dtype: the estimator computes in it), 0.70703125
A = float(torch.tensor(0.5 / (math.sqrt(0.5) + 1e-6), dtype=torch.bfloat16))
TESTS = Path(__file__).parent


def config(tmp_path, **overrides):
    """Agent Lightning's own composed config (grpo; balance_batch off: no workers), set to record into tmp_path."""
    cfg = agl_config()
    cfg.algorithm.adv_estimator = "grpo"
    cfg.trainer.balance_batch = False
    cfg.actor_rollout_ref.rollout.n = 1
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return record_run(cfg, tmp_path / "rec")


def recorded_step(cfg, rows, *, step=1, recording=None):
    """Agent Lightning's ``_train_step`` through ``recording`` (default: the recording subclass of its trainer, the
    class setup_worker swaps in) on a bare trainer; returns what the actor got. The rollout's ``rows`` and the
    workers are stood in for between ``recording`` and Agent Lightning's trainer, so the recorder wraps them as it
    wraps the real ones: the class driven is ``(recording, Bare)``, whose order is recording, Bare, Agent Lightning."""
    recording = recording or recording_trainer(agl().trainer.AgentLightningRayPPOTrainer)
    seen = types.SimpleNamespace(batch=None)

    class Bare(recording.__bases__[0]):  # Agent Lightning's trainer
        def _next_train_batch_dict_for_rollout(self):
            return {"dummy": np.zeros(1)}

        def _get_gen_batch(self, batch):
            return batch

        def _rollout(self, gen_batch, is_train):
            return rows, {}

        def _compute_old_log_prob(self, batch):
            zeros = torch.zeros(batch.batch["responses"].shape)
            return DataProto(batch=TensorDict({"old_log_probs": zeros}, batch_size=len(batch))), 0.0

        def _update_actor(self, batch):
            seen.batch, seen.advantages = batch, batch.batch["advantages"].clone()
            return DataProto(batch=None, meta_info={"metrics": {}})

    class Driven(recording, Bare):
        pass

    trainer = object.__new__(Driven)
    trainer.config, trainer.global_steps, trainer.is_async = cfg, step, False
    trainer.use_reference_policy = trainer.use_critic = False
    trainer.checkpoint_manager = types.SimpleNamespace(sleep_replicas=lambda: None, update_weights=lambda step: None)
    result = trainer._train_step(timing_raw={}, curr_step_profile=False)
    seen.metrics = None if result is None else result[0]
    return seen


def hand_batch():
    """Three prompts: p0 = rollout a (rows of 2 and 1 tokens, solved) and b (3 tokens, failed; plus a marked row),
    p1 = c (1, 1, 2 tokens, solved) and d (2, failed), p2 = e and f (failed: the same reward, dropped first)."""
    spec = [  # (rollout, prompt, tokens, reward, marked)
        ("a", "p0", 2, 1.0, False), ("b", "p0", 3, 0.0, False), ("c", "p1", 1, 1.0, False),
        ("a", "p0", 1, 1.0, False), ("d", "p1", 2, 0.0, False), ("b", "p0", 1, 0.0, True),
        ("c", "p1", 1, 1.0, False), ("e", "p2", 2, 0.0, False), ("c", "p1", 2, 1.0, False),
        ("f", "p2", 1, 0.0, False),
    ]  # fmt: skip
    column = list(zip(*spec, strict=True))
    marked = torch.tensor(column[4])
    return make_rows(
        lengths=list(column[2]),
        width=4,
        rollout_ids=np.array(column[0], dtype=object),
        data_ids=np.array(column[1], dtype=object),
        rewards=list(column[3]),
        extra={"is_drop_mask": marked},
    )


def test_hand_checked_step_files_and_metrics(tmp_path):
    # 10 rows, 1 marked: 9 left; a mini-batch of 7 rows keeps 7, so the cap drops 2: exactly p2's same-reward rows
    cfg = config(tmp_path, **{"actor_rollout_ref.actor.ppo_mini_batch_size": 7})
    seen = recorded_step(cfg, hand_batch())
    frame = pd.read_parquet(tmp_path / "rec" / "1.parquet")
    assert list(frame.columns) == SCHEMA.names
    assert frame[["row", "group", "trajectory", "response_tokens", "reward", "kept"]].values.tolist() == [
        [0, "p0", "a", 2, 1.0, True],
        [1, "p0", "b", 3, 0.0, True],
        [2, "p1", "c", 1, 1.0, True],
        [3, "p0", "a", 1, 1.0, True],
        [4, "p1", "d", 2, 0.0, True],
        [6, "p1", "c", 1, 1.0, True],
        [7, "p2", "e", 2, 0.0, False],
        [8, "p1", "c", 2, 1.0, True],
        [9, "p2", "f", 1, 0.0, False],
    ]  # fmt: skip  (row 5 is the marked row: not a training row)
    assert (frame["step"] == 1).all()
    solved = frame["reward"] > 0
    assert frame.loc[frame.kept & solved, "advantage"].tolist() == [A] * 5  # a's 2 rows, c's 3
    assert frame.loc[frame.kept & ~solved, "advantage"].tolist() == [-A] * 2  # b, d
    assert frame.loc[~frame.kept, "advantage"].isna().all()
    # the actor got the same 7 rows, its advantages normalized: per_rollout_mean divides by T_rollout · 7
    actor_rows = seen.batch.batch["response_mask"].sum(-1)
    assert actor_rows.tolist() == frame.loc[frame.kept, "response_tokens"].tolist()
    assert ROW not in seen.batch.non_tensor_batch  # the tag is taken off the batch after the step

    m = seen.metrics
    assert m["training/n_sample_dropped/marked"] == 1 and m["training/n_sample_dropped/same_reward"] == 2
    # kept: a (2+1 tokens), b (3), c (1+1+2), d (2): 7 rows, 4 sessions
    assert m["training/trajectory/stored_rows"] == 7 and m["training/trajectory/logical_sessions"] == 4
    assert m["training/trajectory/segments_per_session/mean"] == 7 / 4
    # per_rollout_mean ÷ rows: row mass T_i / (T_rollout · 7), rescaled to mean 1: (T_i / T_rollout) · 7 / 4, so
    # a: 2/3·1.75, 1/3·1.75; b: 1.75; c: 0.4375, 0.4375, 0.875; d: 1.75
    assert m["training/trajectory/loss_weight/mean"] == pytest.approx(1.0)
    assert m["training/trajectory/loss_weight/min"] == pytest.approx(0.4375)
    assert m["training/trajectory/loss_weight/max"] == pytest.approx(1.75)
    assert m["lab/diagnostics/trajectories"] == 4 and m["lab/diagnostics/rows"] == 7
    assert m["lab/diagnostics/solve_by_trajectory"] == 0.5  # a and c of a, b, c, d
    assert m["lab/diagnostics/mean_rows_solved"] == 2.5 and m["lab/diagnostics/mean_rows_failed"] == 1.0
    # under per_rollout_mean every rollout's mass is equal: the objective sees the trajectories' solve rate
    assert m["lab/diagnostics/per_rollout_mean:rows/gap"] == pytest.approx(0.0, abs=1e-12)
    # seq-mean-token-mean weighs rows alike: 5 of 7 rows solved
    assert m["lab/diagnostics/seq-mean-token-mean/solve_by_row"] == pytest.approx(5 / 7)
    assert m["lab/partially_dropped_rollouts"] == 1  # b lost its marked row

    info = json.loads((tmp_path / "rec" / "recording.json").read_text())
    assert info["settings"] == {
        "algorithm.enable_rollout_level_advantage": True,
        "actor_rollout_ref.actor.policy_loss.loss_mode": "per_rollout_mean",
        "agentlightning.max_ppo_update_times": None,
    }
    assert info["versions"]["agentlightning"] == "1.0.2" and info["columns"]["kept"] == "bool"
    assert "AgentLightningRayPPOTrainer" in info["producer"]


def random_batch(seed, score_dtype=torch.bfloat16):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 5, size=8)  # rows per rollout
    rollout = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))  # (rows,)
    prompt = rng.integers(0, 3, size=len(sizes))[rollout]
    reward = rng.choice([0.0, 1.0, 0.5], size=len(sizes))[rollout]
    return make_rows(
        lengths=rng.integers(1, 6, size=len(rollout)).tolist(),
        width=6,
        rollout_ids=np.array([f"r{r}" for r in rollout], dtype=object),
        data_ids=np.array([f"p{p}" for p in prompt], dtype=object),
        rewards=reward.tolist(),
        score_dtype=score_dtype,
        non_tensor={"row": np.arange(len(rollout))},
    )


@pytest.mark.parametrize(("seed", "score_dtype"), [(0, torch.bfloat16), (1, torch.bfloat16), (2, torch.float32)])
def test_parquet_is_the_actor_batch_plus_the_dropped_rows_and_training_is_unchanged(tmp_path, seed, score_dtype):
    cfg = config(tmp_path, **CAPPED)
    random.seed(seed)  # Agent Lightning's drops draw from the global random
    seen = recorded_step(cfg, random_batch(seed, score_dtype))
    assert_recorded_and_trained_as_agent_lightning(cfg, seen, seed, score_dtype)


CAPPED = {"actor_rollout_ref.actor.ppo_mini_batch_size": 4, "agentlightning.max_ppo_update_times": 2}


def assert_recorded_and_trained_as_agent_lightning(cfg, seen, seed, score_dtype=torch.bfloat16):
    """``seen``, a recorded step on ``random_batch(seed, score_dtype)`` after ``random.seed(seed)``: the actor got what
    Agent Lightning's own trainer gives it on the same rows and draw, with the same metrics, and the step's Parquet is
    that batch plus the rows the cap dropped."""
    random.seed(seed)
    plain = agl_train_step(cfg, random_batch(seed, score_dtype))  # Agent Lightning's trainer itself, the same draw
    assert_same_batch(seen.batch, plain.batch)  # the recorder changes nothing the actor gets
    assert {k: v for k, v in seen.metrics.items() if k in plain.metrics} == plain.metrics

    frame = pd.read_parquet(Path(cfg.agl_lab.record_dir) / "1.parquet")
    rows = random_batch(seed, score_dtype)
    assert frame["row"].tolist() == list(range(len(rows)))
    assert frame.loc[frame.kept, "row"].tolist() == sorted(seen.batch.non_tensor_batch["row"].tolist())
    kept = frame.set_index("row").loc[seen.batch.non_tensor_batch["row"]]  # in the actor's order
    assert kept["trajectory"].tolist() == seen.batch.non_tensor_batch["rollout_id_list"].tolist()
    assert kept["group"].tolist() == seen.batch.non_tensor_batch["uid"].tolist()
    assert kept["response_tokens"].tolist() == seen.batch.batch["response_mask"].sum(-1).tolist()
    assert kept["reward"].tolist() == seen.batch.batch["token_level_scores"].double().sum(-1).tolist()
    # the recorded advantages, broadcast under the mask and normalized by Agent Lightning's own function, are
    # bit for bit what the actor got
    mask = seen.batch.batch["response_mask"]
    advantage = torch.tensor(kept["advantage"].to_numpy(), dtype=seen.advantages.dtype)  # (kept,) the scores' dtype
    estimated = advantage[:, None] * mask  # (kept, R)
    normalized = agl().loss.normalize_advantages_by_rollout(
        estimated, mask, seen.batch.non_tensor_batch["rollout_id_list"], num_trained_rows=len(kept)
    )
    assert torch.equal(normalized, seen.advantages)
    dropped = frame[~frame.kept]
    assert len(dropped) == len(rows) - len(kept) and dropped["advantage"].isna().all()
    assert seen.metrics["training/trajectory/stored_rows"] == len(kept)
    assert seen.metrics["training/trajectory/logical_sessions"] == kept["trajectory"].nunique()


RAY_SEED = 3


class OneStepRunner:
    """Stands in for ``run_ppo``'s Ray actor (``_AglTaskRunner``), whose set-up of verl's workers needs a model and
    GPUs: in its Ray worker it imports Agent Lightning's trainer class as that actor does, drives one training step of
    it on ``random_batch(RAY_SEED)`` (:func:`recorded_step`) and leaves what it saw beside the record folder."""

    def run(self, config, train_dataset, val_dataset):
        from agentlightning.verl.trainer import AgentLightningRayPPOTrainer  # where run_ppo's actor imports it

        assert AgentLightningRayPPOTrainer.__name__ == "RecordingTrainer", "setup_worker did not swap the recorder in"
        random.seed(RAY_SEED)
        seen = recorded_step(config, random_batch(RAY_SEED), recording=AgentLightningRayPPOTrainer)
        seen.pid = os.getpid()
        (Path(config.agl_lab.record_dir).parent / "worker.pkl").write_bytes(pickle.dumps(seen))


@pytest.mark.ray
def test_run_ppo_on_ray_records_through_the_worker_hook_and_trains_as_agent_lightning(tmp_path, monkeypatch):
    # Agent Lightning's run_ppo starts a one-CPU Ray with the runtime_env record_run set (its setup hook); its actor
    # (OneStepRunner here) imports the trainer in a Ray worker, where setup_worker has swapped the recorder in
    import ray
    from agentlightning.verl import entrypoint

    assert not ray.is_initialized()
    ray_init = {"ray_kwargs.ray_init.num_cpus": 1, "ray_kwargs.ray_init.include_dashboard": False}
    cfg = config(tmp_path, **CAPPED, **ray_init)
    monkeypatch.setattr(entrypoint, "_AglTaskRunner", ray.remote(num_cpus=1)(OneStepRunner))
    # Ray's workers inherit the driver's environment: they find this module (OneStepRunner's) through it
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    try:
        entrypoint.run_ppo(cfg, train_dataset=[{"prompt": "p"}], val_dataset=[{"prompt": "p"}])
        hook = ray.get_runtime_context().runtime_env.get("worker_process_setup_hook")
    finally:
        ray.shutdown()
    assert hook == SETUP_HOOK
    seen = pickle.loads((tmp_path / "worker.pkl").read_bytes())
    assert seen.pid != os.getpid()  # the step ran in Ray's worker
    assert_recorded_and_trained_as_agent_lightning(cfg, seen, RAY_SEED)
    info = json.loads((tmp_path / "rec" / "recording.json").read_text())
    assert info["versions"]["agentlightning"] == "1.0.2" and "AgentLightningRayPPOTrainer" in info["producer"]


def test_the_metrics_logged_to_wandb_offline_read_back_with_the_lab_readers(tmp_path, monkeypatch):
    from verl.utils.tracking import Tracking

    from agl_lab.curves.history import read_history
    from agl_lab.curves.wandb_offline import find_offline_runs, read_offline_run, wait_for_exit
    from agl_lab.training.tracking import finish_tracking
    from agl_lab.training.wandb_mode import point_wandb_at

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    # W&B reads WANDB_* once per process: an earlier test's setting is replaced for this run, and put back after
    restore, _ = point_wandb_at(tmp_path / "wandb_dir", "offline", warn=print)
    cfg = config(tmp_path, **{"actor_rollout_ref.actor.ppo_mini_batch_size": 4, "trainer.experiment_name": "rec"})
    # fit() logs the step's metrics through verl's Tracking with the config's backends (Agent Lightning's: wandb)
    tracker = Tracking("agl-lab-test", "rec", default_backend=["wandb"], config=OmegaConf.to_container(cfg))
    logged = {}
    try:
        for step in (1, 2):
            random.seed(step)
            logged[step] = recorded_step(cfg, random_batch(10 + step), step=step).metrics
            tracker.log(data=logged[step], step=step)
    finally:
        finish_tracking(tracker)
        restore()
    (file,) = find_offline_runs(tmp_path / "wandb_dir")
    assert wait_for_exit(file.parent).complete
    run = read_offline_run(file)
    assert run.config["agl_lab"]["record_dir"] == str(tmp_path / "rec")
    history = {row["_step"]: row for row in run.history}
    names = ["training/trajectory/stored_rows", "training/trajectory/loss_weight/max", "lab/diagnostics/gap"]
    for step in (1, 2):
        assert {name: history[step][name] for name in names} == {name: logged[step][name] for name in names}
    table = read_history(tmp_path / "wandb_dir")  # the curve readers' long form
    curve = table[table.metric == "training/trajectory/segments_per_session/mean"].set_index("step")["value"]
    assert curve.to_dict() == {s: logged[s]["training/trajectory/segments_per_session/mean"] for s in (1, 2)}
    # the recording folder agrees with the logged counts, step by step
    files = {s: pd.read_parquet(tmp_path / "rec" / f"{s}.parquet") for s in (1, 2)}
    assert {s: int(f.kept.sum()) for s, f in files.items()} == {
        s: logged[s]["training/trajectory/stored_rows"] for s in (1, 2)
    }


def test_a_step_that_trains_nothing_records_every_row_as_dropped(tmp_path):
    # 3 rows < one mini-batch of 4: Agent Lightning skips the step; the file says so, row by row
    cfg = config(tmp_path, **{"actor_rollout_ref.actor.ppo_mini_batch_size": 4})
    rows = make_rows(lengths=[1, 2, 3], width=3, rollout_ids=np.array(["a", "a", "b"], dtype=object),
                     data_ids=np.array(["p", "p", "p"], dtype=object), rewards=[1.0, 1.0, 0.0])  # fmt: skip
    seen = recorded_step(cfg, rows)
    assert seen.metrics is None and seen.batch is None
    frame = pd.read_parquet(tmp_path / "rec" / "1.parquet")
    assert frame["kept"].tolist() == [False] * 3 and frame["advantage"].isna().all()
    assert frame["response_tokens"].tolist() == [1, 2, 3]


def test_a_trainer_without_a_record_folder_refuses_before_the_step_trains(tmp_path):
    cfg = config(tmp_path)
    cfg.agl_lab.record_dir = None
    with pytest.raises(ValueError, match=r"agl_lab.record_dir is not set: prepare the config with record_run"):
        recorded_step(cfg, hand_batch())
    assert not (tmp_path / "rec").exists()


def test_a_folder_holding_another_runs_recording_is_refused(tmp_path):
    cfg = config(tmp_path, **{"actor_rollout_ref.actor.ppo_mini_batch_size": 7})
    recorded_step(cfg, hand_batch())
    before = (tmp_path / "rec" / "recording.json").read_text()
    recorded_step(cfg, hand_batch(), step=2)  # the same run going on (or resumed): recording.json stays
    assert (tmp_path / "rec" / "recording.json").read_text() == before
    other = config(
        tmp_path, **{"actor_rollout_ref.actor.ppo_mini_batch_size": 7, "agentlightning.max_ppo_update_times": 1}
    )
    with pytest.raises(ValueError, match="already holds a recording of a run with settings"):
        recorded_step(other, hand_batch(), step=3)
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["1.parquet", "2.parquet", "recording.json"]


def test_record_run_sets_the_folder_and_the_worker_hook_and_refuses_what_would_not_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = agl_config()
    assert record_run(cfg, "runs/r") is cfg
    assert cfg.agl_lab.record_dir == str(tmp_path / "runs" / "r")  # absolute: Ray's workers run elsewhere
    assert OmegaConf.select(cfg, SETUP_HOOK_KEY) == SETUP_HOOK
    cfg.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook = "mine.hook"
    with pytest.raises(ValueError, match=r"worker_process_setup_hook='mine.hook' is set"):
        record_run(cfg, "runs/r")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        record_run(agl_config(), tmp_path / "f")
    # what the hand-off relies on in Agent Lightning 1.0.2's run_ppo: the config's setup hook wins over its own,
    # and its Ray actor imports the trainer class from the trainer module when it runs
    entrypoint = inspect.getsource(importlib.import_module("agentlightning.verl.entrypoint"))
    assert re.search(r'runtime_env\.setdefault\(\s*"worker_process_setup_hook"', entrypoint)
    assert "from agentlightning.verl.trainer import AgentLightningRayPPOTrainer" in entrypoint


# The lab's UI, notebook and statistics stack (the agl_lab[lab] extra) and its Ray start: a user's Agent Lightning
# environment, where the recorder runs, has none of them
LAB_ONLY = (
    "jupyterlab", "jupyter_server", "IPython", "ipykernel", "ipywidgets", "plotly", "anywidget", "matplotlib",
    "scipy", "statsmodels", "rliable", "wandb", "agl_lab.studies.ray_start",
)  # fmt: skip
# In a fresh process: record_run's import (a training script's), then what a Ray worker of a recorded run does: Agent
# Lightning's modules (its own setup hook's and its trainer's), setup_worker, one recorded step. Printed: the LAB_ONLY
# modules loaded after record_run's import, then those the recorder's worker set-up and step added to Agent
# Lightning's.
FRESH_WORKER = """
import sys
from pathlib import Path
LAB_ONLY = {lab_only!r}
def loaded():  # by their names in LAB_ONLY
    names = {{m if m in LAB_ONLY else m.split(".")[0] for m in sys.modules}}
    return names & set(LAB_ONLY)
from agl_lab.training.agl_recorder import record_run, setup_worker
print(sorted(loaded()))
import agentlightning.verl.per_rollout_loss, agentlightning.verl.trainer
before = loaded()  # Agent Lightning's trainer loads scipy (transformers does, when it is installed)
setup_worker()
sys.path.insert(0, {tests!r})
import test_agl_recorder as t  # the set-up of the bare trainer; it imports nothing of LAB_ONLY itself
cfg = t.config(Path(sys.argv[1]), **{{"actor_rollout_ref.actor.ppo_mini_batch_size": 7}})
t.recorded_step(cfg, t.hand_batch(), recording=sys.modules["agentlightning.verl.trainer"].AgentLightningRayPPOTrainer)
print(sorted(loaded() - before))
"""


def test_the_recorder_and_a_recorded_step_load_nothing_of_the_lab_extra(tmp_path):
    script = FRESH_WORKER.format(lab_only=LAB_ONLY, tests=str(TESTS))
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[0] == "[]"  # record_run's import
    assert out.stdout.splitlines()[-1] == "[]"  # setup_worker and the step, beyond Agent Lightning's own modules
    assert (tmp_path / "rec" / "1.parquet").exists() and (tmp_path / "rec" / "recording.json").exists()


def test_setup_worker_swaps_the_recorder_in_when_a_worker_imports_agent_lightnings_trainer(monkeypatch):
    original = agl().trainer
    monkeypatch.delitem(sys.modules, agl_recorder.TRAINER_MODULE)  # a fresh worker: the trainer is not imported yet
    monkeypatch.setattr(sys.modules["agentlightning.verl"], "trainer", original)  # put back after the test
    setup_worker()  # as Ray calls it in each worker: Agent Lightning's hook, then the post-import hook
    assert agl_recorder.TRAINER_MODULE not in sys.modules  # workers that build no trainer never import it
    fresh = importlib.import_module(agl_recorder.TRAINER_MODULE)
    trainer = fresh.AgentLightningRayPPOTrainer
    assert trainer.__name__ == "RecordingTrainer" and trainer.__mro__[1].__module__ == agl_recorder.TRAINER_MODULE
    assert original.AgentLightningRayPPOTrainer.__name__ == "AgentLightningRayPPOTrainer"  # the oracle's untouched
    assert recording_trainer(trainer) is trainer  # swapped in twice, it records once


def test_a_recording_is_read_back_by_read_run_and_diagnosed_step_by_step(tmp_path):
    # the folder the recorder writes is one of read_run's sources: the same rows, and the per-step diagnostics of the
    # kept rows with the recorded advantages (what Agent Lightning's estimator gave, before normalization)
    import agl_lab

    cfg = config(tmp_path, **{"actor_rollout_ref.actor.ppo_mini_batch_size": 4})
    for step in (1, 2):
        random.seed(step)
        recorded_step(cfg, random_batch(20 + step), step=step)
    files = pd.concat([pd.read_parquet(tmp_path / "rec" / f"{s}.parquet") for s in (1, 2)], ignore_index=True)
    rows = agl_lab.read_run(tmp_path / "rec")
    for column in ("step", "row", "response_tokens", "reward", "advantage", "kept"):  # read_run's numbers are floats
        np.testing.assert_array_equal(rows[column].to_numpy(float), files[column].to_numpy(float), err_msg=column)
    for column in ("group", "trajectory"):
        assert rows[column].astype(str).tolist() == files[column].astype(str).tolist(), column
    assert agl_lab.read_run(tmp_path / "rec", steps="2")["step"].unique().tolist() == [2]
    table = agl_lab.weighting_diagnostics(tmp_path / "rec", by_step=True, modes=["seq-mean-token-mean"])
    assert table["step"].tolist() == [1, 2]
    assert table["rows"].tolist() == [int(files[files.step == s].kept.sum()) for s in (1, 2)]
