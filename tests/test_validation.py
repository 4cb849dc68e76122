"""Held-out evaluation (agl_lab.training.validation): verl's schedule, greedy sampling, verl's metric names (verl's own
functions as the oracle), the held-out split of the tasks, and a training run that evaluating leaves untouched."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.metric_utils import process_validation_metrics

from agl_lab import short_run_config
from agl_lab.curves.history import read_run_dir
from agl_lab.curves.panels import first_present, panel_lines, usable_panels
from agl_lab.curves.summary import heldout_success, summarize
from agl_lab.training.lock_task import LockTask
from agl_lab.training.number_tasks import GuessNumberTask, RetryArithTask
from agl_lab.training.policy import build_policy
from agl_lab.training.tasks import task_from_config
from agl_lab.training.trainer import train
from agl_lab.training.validation import val_metrics, val_sampling_params, validate, validation_steps
from conftest import TINY_RUN

KNOBS = dict(max_turns=3, rewrite_prob=0.3, seed=0)


@pytest.mark.parametrize(
    ("test_freq", "before", "total", "expected"),
    [
        (10, True, 25, [0, 10, 20, 25]),  # step 0, every test_freq, and the last step
        (5, True, 10, [0, 5, 10]),  # the last step once
        (3, False, 7, [3, 6, 7]),  # val_before_train=false: no step 0
        (-1, True, 10, []),  # verl's default: never
        (0, True, 10, []),
    ],
)
def test_the_schedule_is_verls(test_freq, before, total, expected):
    cfg = OmegaConf.create({"trainer": {"test_freq": test_freq, "val_before_train": before}})
    assert validation_steps(cfg, total_steps=total) == expected


def test_val_kwargs_sample_greedily_by_default_and_as_asked_otherwise():
    greedy = val_sampling_params(short_run_config())
    assert (greedy.n, greedy.temperature, greedy.top_k, greedy.top_p) == (1, 0.0, -1, 1.0)
    sampled = val_sampling_params(short_run_config(dotlist=[
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=0.7",
        "actor_rollout_ref.rollout.val_kwargs.top_k=5", "actor_rollout_ref.rollout.val_kwargs.n=3",
    ]))  # fmt: skip
    assert (sampled.n, sampled.temperature, sampled.top_k, sampled.top_p) == (3, 0.7, 5, 1.0)
    # do_sample false is greedy whatever the temperature says (verl's rule for it)
    forced = val_sampling_params(short_run_config(dotlist=["actor_rollout_ref.rollout.val_kwargs.temperature=0.7"]))
    assert forced.temperature == 0.0


@pytest.mark.parametrize("n", [1, 3])
def test_metric_names_and_values_are_verls_process_validation_metrics(n):
    rng = np.random.default_rng(0)
    sources = ["retry_arith"] * (4 * n) + ["lock"] * (2 * n)
    uids = [f"{s}/{i // n}" for i, s in enumerate(sources)]
    rewards = rng.integers(0, 2, len(sources)).astype(float).tolist()
    ours = val_metrics(sources, uids, {"reward": rewards})
    oracle = process_validation_metrics(sources, uids, {"reward": rewards})
    expected = {
        name: value for source, var2metric in oracle.items() for var, metric2val in var2metric.items()
        for metric, value in metric2val.items() for name in [f"{source}/{var}/{metric}"]
    }  # fmt: skip
    assert {name.split("/", 1)[1]: value for name, value in ours.items()} == pytest.approx(expected)
    core = {name for name in ours if name.startswith("val-core/")}
    assert f"val-core/retry_arith/reward/mean@{n}" in core and f"val-core/lock/reward/mean@{n}" in core
    assert not any(name.split("/")[3].startswith(("std", "worst")) for name in core)  # verl sections those val-aux
    assert ours[f"val-core/retry_arith/reward/mean@{n}"] == pytest.approx(np.mean(rewards[: 4 * n]))


def test_sections_are_those_of_verls_trainer():
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
    sources = ["retry_arith"] * 6
    uids = [f"q{i // 3}" for i in range(6)]
    infos = {"reward": [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]}
    turns = [2, 4, 6, 2, 2, 4]
    # RayPPOTrainer._val_metrics_update uses nothing of the trainer: called unbound, it is verl's naming itself
    oracle = ray_trainer.RayPPOTrainer._val_metrics_update(None, np.array(sources), uids, infos, [np.array(turns)])
    assert val_metrics(sources, uids, infos, turns=turns) == pytest.approx({k: float(v) for k, v in oracle.items()})


def tiny(tmp_path=None, *dotlist):
    run_dir = [f"lab.run_dir={tmp_path}"] if tmp_path is not None else []
    return short_run_config(dotlist=[*TINY_RUN, "trainer.logger=[console]", *run_dir, *dotlist])


def test_two_evaluations_of_one_policy_are_identical():
    cfg = tiny()
    task = task_from_config(cfg)
    policy = build_policy(cfg, words=task.words())
    policy.model.train()
    sampling = val_sampling_params(cfg)
    first, second = (validate(policy, task, data_source="lock", sampling=sampling, seed=s) for s in (1, 2))
    assert first == second and "val-core/lock/reward/mean@1" in first  # greedy: the seed is never drawn from
    assert first["lab/val_items_held_out"] == 0.0  # the lock task replays training locks
    assert policy.model.training  # evaluated in eval mode, then given back as it was


@pytest.mark.parametrize("cls", [RetryArithTask, GuessNumberTask])
def test_heldout_items_are_fixed_and_never_drawn_for_training(cls):
    task = cls(10 if cls is RetryArithTask else 40, heldout_size=16, **KNOBS)
    heldout = task.heldout_items()
    assert (
        heldout.disjoint
        and len(heldout.items) == 16
        and cls(task.size, heldout_size=16, **KNOBS).heldout_items() == heldout
    )
    drawn = {item for step in range(1, 200) for item in task.sample_items(step=step, batch_size=8)}
    assert drawn.isdisjoint(heldout.items) and drawn | set(heldout.items) == set(range(task.n_items))
    assert cls(task.size, heldout_size=16, **{**KNOBS, "seed": 1}).heldout_items() != heldout  # from lab.seed


@pytest.mark.parametrize(
    "task",
    [
        GuessNumberTask(5, heldout_size=16, **KNOBS),
        RetryArithTask(4, heldout_size=16, **KNOBS),
        LockTask(8, heldout_size=4, **KNOBS),
    ],  # fmt: skip
    ids=["guess_number: 5 secrets", "retry_arith: 16 questions", "lock"],
)
def test_a_task_too_small_to_hold_out_replays_training_items_and_says_so(task):
    heldout = task.heldout_items()
    items = getattr(task, "n_items", None) or task.n_locks
    assert not heldout.disjoint and len(heldout.items) == min(items, task.heldout_size)
    unsplit = type(task)(getattr(task, "size", None) or task.n_locks, **KNOBS)
    for step in (1, 2, 3):  # training draws exactly as without a held-out set
        assert task.sample_items(step=step, batch_size=4) == unsplit.sample_items(step=step, batch_size=4)


def test_evaluating_leaves_the_training_metrics_unchanged(tmp_path):
    off = train(tiny(tmp_path / "off", "trainer.total_training_steps=3", "trainer.test_freq=-1"), progress=False)
    on = train(tiny(tmp_path / "on", "trainer.total_training_steps=3", "trainer.test_freq=2"), progress=False)
    records = [[json.loads(line) for line in (r.run_dir / "metrics.jsonl").read_text().splitlines()] for r in (off, on)]
    trained = [[{k: v for k, v in rec.items() if not k.startswith(("val-", "lab/val_"))} for rec in run]
               for run in records]  # fmt: skip
    assert trained[0] == trained[1]  # evaluation draws from a stream of its own
    assert not (off.run_dir / "validation.jsonl").exists() and off.validation.empty
    assert on.validation["step"].tolist() == [0, 2, 3]  # before training, test_freq, the last step
    assert [("val-core/lock/reward/mean@1" in rec) for rec in records[1]] == [False, True, True]
    history = read_run_dir(on.run_dir)  # step 0 comes from validation.jsonl
    val = history[history["metric"] == "val-core/lock/reward/mean@1"]
    assert val["step"].tolist() == [0, 2, 3]
    assert history[history["metric"] == "lab/success_rate"]["step"].tolist() == [1, 2, 3]
    assert summarize(history)["steps"].item() == 3  # step 0 is no training step


def test_heldout_success_at_the_end_and_its_area_under_the_curve():
    run = pd.DataFrame({"val-core/lock/reward/mean@1": [0.0, np.nan, 0.5, 1.0]}, index=[0, 5, 10, 20])
    # trapezoid: (0 + 0.5) / 2 * 10 + (0.5 + 1) / 2 * 10 = 10 over the span 0..20: 0.5
    assert heldout_success(run) == {"heldout_success_last": 1.0, "heldout_success_auc": 0.5}
    assert heldout_success(pd.DataFrame({"lab/success_rate": [0.5]})) == {}


def test_the_heldout_panel_draws_any_data_sources_val_core():
    present = {"lab/success_rate", "val-aux/retry_arith/reward/std@4", "val-core/retry_arith/reward/mean@4"}
    assert first_present("val-core/*/reward/mean@*", present) == "val-core/retry_arith/reward/mean@4"
    assert panel_lines("heldout", present) == ["val-core/retry_arith/reward/mean@4"]
    assert "heldout" not in usable_panels({"lab/success_rate"})
