"""Sweeps of settings × seeds: Ray and serial executors agree, a killed cell resumes, a failing cell is kept apart."""

import json
import os
import re

import pandas as pd
import pytest

from agl_lab import ConfigError
from agl_lab.curves.history import read_wandb_offline
from agl_lab.training.sweep import plan_sweep, run_sweep
from conftest import TINY_RUN

SETTINGS = {
    "both_on": [],
    "both_off": [
        "algorithm.enable_rollout_level_advantage=false",
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
    ],
}


def sweep(tmp_path, name, **kwargs):
    kwargs.setdefault("executor", "serial")
    return run_sweep(SETTINGS, [0, 1], sweep_dir=tmp_path / name, dotlist=TINY_RUN, progress=False, **kwargs)


def canonical(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns="run").sort_values(["setting", "seed", "metric", "step"]).reset_index(drop=True)


def test_serial_sweep_table_and_cells(tmp_path):
    result = sweep(tmp_path, "serial")
    assert result.cells["status"].tolist() == ["done"] * 4
    table = result.table
    assert set(table.setting) == {"both_on", "both_off"} and set(table.seed) == {0, 1}
    assert set(table.step) == {1, 2}
    assert {"lab/success_rate", "training/n_sample", "training/n_sample_dropped/random"} <= set(table.metric)
    # the settings really differ: only both_on logs rollout-level metrics
    rollout_level = table[table.metric == "training/rollout_level_advantage/n_rows"]
    assert set(rollout_level.setting) == {"both_on"}
    cell = json.loads((tmp_path / "serial" / "both_off" / "seed-1" / "cell.json").read_text())
    assert cell["status"] == "done" and "lab.seed=1" in cell["dotlist"]


def test_wandb_mode_is_each_cells_setting_not_the_environments(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    result = run_sweep(
        {"both_on": []},
        [0],
        sweep_dir=tmp_path / "s",
        dotlist=[*TINY_RUN, "trainer.logger=[wandb]"],
        executor="serial",
        progress=False,
        wandb_mode="offline",
    )
    assert os.environ["WANDB_MODE"] == "disabled"
    cell = json.loads((tmp_path / "s" / "both_on" / "seed-0" / "cell.json").read_text())
    assert cell["status"] == "done" and "lab.wandb_mode=offline" in cell["dotlist"]
    wandb_runs = read_wandb_offline(tmp_path / "s")
    assert wandb_runs.run.nunique() == 1 and set(wandb_runs.step) == {1, 2}
    assert set(result.table.setting) == {"both_on"}
    with pytest.raises(ValueError, match=r"wandb_mode must be one of \['auto', 'online', 'offline', 'disabled'\]"):
        run_sweep({"a": []}, [0], sweep_dir=tmp_path / "t", executor="serial", wandb_mode="offlne")


def test_ray_and_serial_executors_give_the_same_table(tmp_path):
    import ray

    assert not ray.is_initialized()
    on_ray = sweep(tmp_path, "ray", executor="ray", num_cpus=2)
    assert not ray.is_initialized()  # the sweep shut down the Ray instance it started
    serial = sweep(tmp_path, "serial")
    assert on_ray.cells["status"].tolist() == ["done"] * 4
    pd.testing.assert_frame_equal(canonical(on_ray.table), canonical(serial.table))


def test_a_killed_cell_is_rerun_and_finished_cells_are_skipped(tmp_path):
    first = sweep(tmp_path, "resume")
    killed = tmp_path / "resume" / "both_on" / "seed-1"
    record = json.loads((killed / "cell.json").read_text())
    (killed / "cell.json").write_text(json.dumps({**record, "status": "running"}))  # as a kill mid-run leaves it
    (killed / "metrics.jsonl").write_text((killed / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    untouched = tmp_path / "resume" / "both_off" / "seed-0" / "metrics.jsonl"
    before = untouched.stat().st_mtime_ns
    again = sweep(tmp_path, "resume")
    assert untouched.stat().st_mtime_ns == before  # finished cells are not run again
    assert again.cells["status"].tolist() == ["done"] * 4
    pd.testing.assert_frame_equal(canonical(again.table), canonical(first.table))


def test_a_failing_cell_never_loses_the_others(tmp_path):
    settings = {**SETTINGS, "remax": ["algorithm.adv_estimator=remax"]}
    result = run_sweep(settings, [0], sweep_dir=tmp_path / "s", dotlist=TINY_RUN, executor="serial", progress=False)
    cells = result.cells.set_index("setting")
    assert cells.loc["remax", "status"] == "failed"
    assert "REMAX baseline not yet supported in AgentLightningRayPPOTrainer" in cells.loc["remax", "error"]
    assert cells.loc["both_on", "status"] == cells.loc["both_off", "status"] == "done"
    assert set(result.table.setting) == {"both_on", "both_off"}


@pytest.mark.parametrize(
    ("settings", "seeds", "error", "text"),
    [
        ({}, [0], ValueError, "settings is empty"),
        ({"a": []}, [], ValueError, "seeds is empty"),
        ({"a/b": []}, [0], ValueError, "setting name 'a/b' must be letters"),
        ({"a": ["agentlightning.max_ppo_update_time=2"]}, [0], ConfigError, "did you mean"),
    ],
)
def test_bad_sweeps_fail_before_anything_runs(tmp_path, settings, seeds, error, text):
    with pytest.raises(error, match=re.escape(text)):
        plan_sweep(settings, seeds, sweep_dir=tmp_path / "s")
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match="executor must be 'ray' or 'serial'"):
        run_sweep({"a": []}, [0], sweep_dir=tmp_path / "s", executor="dask")
