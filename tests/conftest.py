"""Shared test helpers: hand-built batches in Agent Lightning's row layout, hypothesis strategies, W&B runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import agl_lab  # noqa: E402,F401  (registers per_rollout_mean)
from agl_lab.curves.wandb_offline import wait_for_exit  # noqa: E402
from agl_lab.lab.examples import rows_from_plan  # noqa: E402


def make_rows(plan, *, masks=None, score_dtype=torch.float32):
    """Rows from ``plan``: a list of (data_id, rollout_id, reward, [response length of each row]).

    Scores are float32 here, so hand-worked arithmetic stays exact; Agent Lightning's bf16 path (the library
    default) is checked against the real package in tests/test_oracle_*.py.
    """
    return rows_from_plan(plan, response_masks=masks, score_dtype=score_dtype)


def with_rewards(batch):
    """What trainer step 3 does without a KL penalty: token_level_rewards = token_level_scores."""
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"].clone()
    return batch


def snapshot(batch):
    """A deep copy of every field, to prove a failed call left the batch as it was."""
    return (
        {k: v.clone() for k, v in batch.batch.items()},
        {k: v.copy() for k, v in batch.non_tensor_batch.items()},
    )


def assert_unchanged(batch, snap):
    tensors, non_tensors = snap
    assert set(batch.batch.keys()) == set(tensors)
    assert set(batch.non_tensor_batch) == set(non_tensors)
    for key, value in tensors.items():
        torch.testing.assert_close(batch.batch[key], value, rtol=0, atol=0, equal_nan=True, msg=key)
    for key, value in non_tensors.items():
        assert (batch.non_tensor_batch[key] == value).all(), key


@st.composite
def plans(draw, *, max_prompts=4, max_rollouts=4, max_rows=4, max_len=5, rewards=(0.0, 1.0)):
    """Random batches: prompts × rollouts, each rollout 1..max_rows rows of 1..max_len tokens, shuffled rows."""
    plan = []
    for p in range(draw(st.integers(1, max_prompts))):
        for r in range(draw(st.integers(1, max_rollouts))):
            lengths = draw(st.lists(st.integers(1, max_len), min_size=1, max_size=max_rows))
            plan.append((f"p{p}", f"p{p}/r{r}", draw(st.sampled_from(rewards)), lengths))
    return plan


def shuffled(batch, seed):
    """The same rows in a random order: grouping must not depend on rows of a rollout being adjacent."""
    perm = np.random.default_rng(seed).permutation(len(batch))
    return batch[torch.from_numpy(perm)]


@pytest.fixture
def example():
    return agl_lab.example_rows()


def log_offline_run(tmp_path, monkeypatch, *, steps=5, config=None, finish=True, name="exp"):
    """Log a real offline W&B run under tmp_path (the reader tests read it back)."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    # mode passed explicitly: W&B reads WANDB_MODE once per process, and an earlier test may have set it up
    run = wandb.init(
        project="agl-lab-test", name=name, dir=str(tmp_path), mode="offline", config=config or {"lab": {"seed": 3}}
    )
    for step in range(steps):
        run.log({"training/reward": step / 2, "lab/success_rate": step / 10, "text_is_skipped": "x"}, step=step)
    run.summary["final_note"] = 7
    if finish:
        run.finish()
        assert wait_for_exit(Path(run.dir).parent).complete, "wandb wrote no exit record within 10 s"
    return run


# Short training runs in the tests: 2 locks x 4 rollouts per step, PPO mini-batches of 1 prompt = 4 rows in
# micro-batches of 2 rows, a 1-layer policy of width 32, 2 steps. A run takes about a second.
TINY_RUN = (
    "data.train_batch_size=2",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "lab.model_hidden=32",
    "lab.model_layers=1",
    "lab.task_size=4",
    "trainer.total_training_steps=2",
)


def torn_model(folder: Path) -> Path:
    """A model folder every check passes (config, tokenizer, a weights file) whose weights are torn: loading it fails
    in the run, after the sweep or demo planned and started (a failing cell)."""
    from agl_lab import short_run_config
    from agl_lab.training.policy import build_policy

    build_policy(short_run_config(dotlist=TINY_RUN), words=["lock", "try"]).save(folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    return folder


# Processes started together: each imports agl_lab, says "ready", then waits for the go file, so that the work they
# race on starts within milliseconds of each other (imports alone take seconds, and vary).
GATED = """
import pathlib, sys, time
{setup}
print("ready", flush=True)
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
{body}
"""


def start_gated(tmp_path, n, *, setup, body, args=(), env=None):
    """Start ``n`` python processes running GATED, wait until all are ready, release them; return the Popens."""
    import subprocess
    import sys

    go = tmp_path / f"go-{os.getpid()}-{len(list(tmp_path.glob('go-*')))}"
    script = GATED.replace("{setup}", setup).replace("{body}", body)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(go), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(n)
    ]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    go.touch()
    return procs


@pytest.fixture
def finished(monkeypatch):
    """How a run closed its trackers: a stand-in for verl's Tracking records each ``finish`` exit code."""
    import functools

    import agl_lab.training.trainer
    from agl_lab.training.tracking import open_tracker

    codes = []

    class Recording:
        def __init__(self, project_name, experiment_name, default_backend, config):
            pass

        def log(self, data, step):
            pass

        def finish(self, exit_code=0):
            codes.append(exit_code)

    monkeypatch.setattr(
        agl_lab.training.trainer, "open_tracker", functools.partial(open_tracker, tracking_cls=Recording)
    )
    return codes


def only_if(condition: bool):
    """Define the decorated test only where ``condition`` holds; elsewhere its name is bound to None, so pytest
    collects nothing under it. For what only some verls have (``agl_lab.config.verl_features``): a module's tests of
    the feature carry ``only_if(feature.available())``, its test of the refusal an older verl gives carries
    ``only_if(not feature.available())``, so the module collects and checks something on every verl."""
    return lambda test: test if condition else None


# Real agl-lab processes for the fault suite (tests/test_faults_*.py): started as a user starts them, signalled as a
# scheduler or a keyboard signals them.
AGL_LAB = str(Path(sys.executable).parent / "agl-lab")


# Under ``nohup`` a child inherits the ignored SIGHUP, and agl-lab keeps ignoring it (as ``nohup`` asks): the child
# first puts SIGHUP back to its default, then becomes agl-lab (exec keeps a default handler; same pid). Not a
# ``preexec_fn``, which is unsafe beside the threads a test process holds.
SIGNALS_DEFAULT = (
    "import os, signal, sys; [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGHUP, signal.SIGINT)]; "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def start_agl_lab(args, *, cwd, env=None):
    """``agl-lab args`` as a terminal starts it: SIGHUP and SIGINT at their defaults, even when the tests run under
    ``nohup`` (SIGHUP ignored) or as a background job of a script (SIGINT ignored, and Python keeps it ignored)."""
    import signal
    import subprocess

    env = {**os.environ, "WANDB_SILENT": "true", "HOME": str(cwd), **(env or {})}
    command = [AGL_LAB, *map(str, args)]
    if signal.SIG_IGN in (signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGINT)):
        command = [sys.executable, "-c", SIGNALS_DEFAULT, *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def wait_until(check, proc, *, timeout=300, what="the condition"):
    """Poll ``check()`` until it is true; fail with the process's stderr if it ends first or time runs out."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError):  # a file not there yet, or being replaced
            pass
        if proc.poll() is not None:
            raise AssertionError(
                f"the process ended (exit {proc.returncode}) before {what}:\n{proc.stderr.read()[-3000:]}"
            )
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"{what} did not happen within {timeout} s:\n{proc.communicate()[1][-3000:]}")


def lines_in(path) -> int:
    return len(Path(path).read_text().splitlines()) if Path(path).exists() else 0


# In parallel (pytest-xdist, ``-n <cores + 1> --dist loadgroup``, what `make test` runs; see the Makefile): tests that
# share one server (JupyterLab with Chromium) stay on one worker, so it starts once; tests that start a Ray of their
# own (marked ``ray``, the two-node cluster's file) run one after another on one worker, since two Ray starts at once
# on 2 busy cores can miss Ray's fixed 30 s start-up window; tests that load the pretrained model (marked
# ``xdist_group("real_model")``) share its module-scoped runs and the dequantized cache on one worker. The groups, each
# several minutes, start first, then the files that take longest, so that no worker is left with a long one alone at
# the end. Serially neither applies.
SHARED_SERVER = {"test_browser.py": "jupyterlab", "test_sweep_cluster.py": "ray"}
GROUPS_FIRST = ("jupyterlab", "ray", "real_model")
LONGEST_FIRST = (  # worker-seconds, 2026-12-03: 223, 166, 154, 96, 69, 68, 59; 2026-12-06: real model 55, install 67
    "test_notebooks.py", "test_faults_signals.py", "test_sweep.py", "test_cli.py", "test_oracle_loss.py",
    "test_install.py", "test_real_model.py", "test_oracle_trainer.py", "test_process_state.py",
)  # fmt: skip


def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        group = SHARED_SERVER.get(item.path.name) or ("ray" if item.get_closest_marker("ray") else None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
        elif marked := item.get_closest_marker("xdist_group"):
            groups[item.nodeid] = marked.args[0] if marked.args else marked.kwargs.get("name")
    if not config.getoption("numprocesses", default=None):
        return  # serially: the files in their usual order
    group_rank = {name: place for place, name in enumerate(GROUPS_FIRST)}
    file_rank = {name: len(group_rank) + place for place, name in enumerate(LONGEST_FIRST)}
    last = len(group_rank) + len(file_rank)

    def rank(item) -> int:
        group = groups.get(item.nodeid)
        return group_rank[group] if group in group_rank else file_rank.get(item.path.name, last)

    items.sort(key=rank)  # stable: each file keeps its own order


def play(task, item, answers, *, step=0, index=0):
    """Answer an episode of ``task`` on ``item`` with a fixed list of texts; return the episode and the turns."""
    episode = task.start(item, step=step, index=index)
    turns = []
    for answer in answers:
        turns.append(episode.respond(answer))
        if turns[-1].done:
            break
    return episode, turns
