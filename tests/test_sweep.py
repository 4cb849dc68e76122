"""Sweeps of settings × seeds: Ray and serial executors agree, a killed cell resumes, a failing cell is kept apart."""

import json
import os
import re
import socket

import pandas as pd
import pytest

from agl_lab import ConfigError
from agl_lab.curves.history import read_wandb_offline
from agl_lab.studies.ray_start import start_ray
from agl_lab.studies.sweep import run_sweep, shared_ray
from agl_lab.studies.sweep_cells import CellRerunWarning, SweepChangedError
from agl_lab.studies.sweep_plan import plan_sweep
from conftest import TINY_RUN, start_gated, torn_model

SETTINGS = {
    "both_on": [],
    "both_off": [
        "algorithm.enable_rollout_level_advantage=false",
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
    ],
}


def sweep(tmp_path, name, settings=SETTINGS, **kwargs):
    kwargs.setdefault("executor", "serial")
    return run_sweep(settings, [0, 1], sweep_dir=tmp_path / name, dotlist=TINY_RUN, progress=False, **kwargs)


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
    assert cell["node_id"] is None and cell["host"] == socket.gethostname()  # no Ray node: this machine


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


@pytest.mark.ray
def test_ray_and_serial_executors_give_the_same_table(tmp_path, capfd):
    import ray

    assert not ray.is_initialized()
    # one CPU: one worker per Ray start imports torch and verl (two fight for 2 cores beside the rest of the suite)
    kwargs = {"sweep_dir": tmp_path / "ray", "dotlist": TINY_RUN, "progress": False, "executor": "ray", "num_cpus": 1}
    run_sweep(SETTINGS, [0], **kwargs)
    assert not ray.is_initialized()  # the sweep shut down the Ray instance it started
    with shared_ray():  # a reproduction's rounds: the instance the first sweep starts outlives it, until the block ends
        on_ray = run_sweep(SETTINGS, [0, 1], **kwargs)  # seed 0 done: runs seed 1's cells
        assert ray.is_initialized()
    assert not ray.is_initialized()
    assert start_ray(num_cpus=1) and not start_ray(num_cpus=1)  # started early (notebook 04), once
    try:
        run_sweep(SETTINGS, [2], **kwargs)
        assert ray.is_initialized()  # a Ray started before the sweep stays for the next one
    finally:
        ray.shutdown()
    assert "Token authentication" not in capfd.readouterr().err  # Ray's default, without its warning each start
    serial = sweep(tmp_path, "serial")
    assert on_ray.cells["status"].tolist() == ["done"] * 4
    records = [json.loads(path.read_text()) for path in (tmp_path / "ray").glob("*/seed-*/cell.json")]
    for seed in (0, 1):  # each sweep's local Ray instance is one node, recorded by its id
        nodes = {record["node_id"] for record in records if record["seed"] == seed}
        assert len(nodes) == 1 and re.fullmatch(r"[0-9a-f]{56}", nodes.pop())
    pd.testing.assert_frame_equal(canonical(on_ray.table), canonical(serial.table))


def test_a_killed_cell_is_rerun_and_finished_cells_are_skipped(tmp_path):
    first = sweep(tmp_path, "resume")
    killed = tmp_path / "resume" / "both_on" / "seed-1"
    record = json.loads((killed / "cell.json").read_text())
    (killed / "cell.json").write_text(json.dumps({**record, "status": "running"}))  # as a kill mid-run leaves it
    (killed / "metrics.jsonl").write_text((killed / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    untouched = tmp_path / "resume" / "both_off" / "seed-0" / "metrics.jsonl"
    before = untouched.stat().st_mtime_ns
    with pytest.warns(CellRerunWarning, match="both_on seed 1 was running after 1 step"):
        again = sweep(tmp_path, "resume")
    assert untouched.stat().st_mtime_ns == before  # finished cells are not run again
    assert again.cells["status"].tolist() == ["done"] * 4
    pd.testing.assert_frame_equal(canonical(again.table), canonical(first.table))


def test_a_failing_cell_never_loses_the_others(tmp_path):
    # every check passes (a model folder with its config and tokenizer); loading its torn weights fails mid-sweep
    settings = {**SETTINGS, "broken": [f"lab.model_path={torn_model(tmp_path / 'torn')}"]}
    result = run_sweep(settings, [0], sweep_dir=tmp_path / "s", dotlist=TINY_RUN, executor="serial", progress=False)
    cells = result.cells.set_index("setting")
    assert cells.loc["broken", "status"] == "failed"
    assert "SafetensorError" in cells.loc["broken", "error"]  # the torn weights' own error
    assert cells.loc["both_on", "status"] == cells.loc["both_off", "status"] == "done"
    assert set(result.table.setting) == {"both_on", "both_off"}


@pytest.mark.parametrize(
    ("settings", "seeds", "error", "text"),
    [
        ({}, [0], ValueError, "settings is empty"),
        ({"a": []}, [], ValueError, "seeds is empty"),
        ({"a/b": []}, [0], ValueError, "setting name 'a/b' must be letters"),
        ({"a": ["agentlightning.max_ppo_update_time=2"]}, [0], ConfigError, "did you mean"),
        (  # a typo'd value too (the doctor's errors about known values fail their cell alone, see above)
            {"a": [], "b": ["actor_rollout_ref.actor.policy_loss.loss_mode=per_rollout_maen"]},
            [0],
            ConfigError,
            "unknown value 'per_rollout_maen' (did you mean 'per_rollout_mean'?)",
        ),
    ],
)
def test_bad_sweeps_fail_before_anything_runs(tmp_path, settings, seeds, error, text):
    with pytest.raises(error, match=re.escape(text)):
        plan_sweep(settings, seeds, sweep_dir=tmp_path / "s")
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match="executor must be 'ray' or 'serial'"):
        run_sweep({"a": []}, [0], sweep_dir=tmp_path / "s", executor="dask")


def test_a_changed_config_never_replaces_finished_cells_and_new_cells_extend_the_sweep(tmp_path):
    first = sweep(tmp_path, "s")
    on = tmp_path / "s" / "both_on" / "seed-0" / "metrics.jsonl"
    record = json.loads((on.parent / "cell.json").read_text())
    assert len(record["config_sha256"]) == 64
    before = {path: path.stat().st_mtime_ns for path in (tmp_path / "s").rglob("*") if path.is_file()}
    # one shared item changed: every finished cell would be retrained, so the sweep is refused, naming the change
    with pytest.raises(SweepChangedError) as refused:
        run_sweep(
            SETTINGS, [0, 1], sweep_dir=tmp_path / "s", dotlist=[*TINY_RUN, "trainer.total_training_steps=3"],
            executor="serial", progress=False,
        )  # fmt: skip
    assert "holds 4 finished cell(s) trained with another config" in str(refused.value)
    assert "trainer.total_training_steps: 2 -> 3" in str(refused.value)
    assert "give this sweep another folder" in str(refused.value) and f"delete {tmp_path / 's'}" in str(refused.value)
    after = {path: path.stat().st_mtime_ns for path in (tmp_path / "s").rglob("*") if path.is_file()}
    assert {p: t for p, t in after.items() if p.name != ".agl_lab.lock"} == {
        p: t for p, t in before.items() if p.name != ".agl_lab.lock"
    }  # nothing deleted, nothing rewritten
    # a setting redefined is refused the same way, naming its key
    redefined = {**SETTINGS, "both_off": [*SETTINGS["both_off"], "agentlightning.max_ppo_update_times=1"]}
    with pytest.raises(SweepChangedError, match=re.escape("agentlightning.max_ppo_update_times: null -> 1")):
        sweep(tmp_path, "s", settings=redefined)
    # new seeds and new settings with the same shared items extend the sweep; the finished cells are kept
    extended = run_sweep(
        {**SETTINGS, "cap1": ["agentlightning.max_ppo_update_times=1"]}, [0, 1, 2], sweep_dir=tmp_path / "s",
        dotlist=TINY_RUN, executor="serial", progress=False,
    )  # fmt: skip
    assert on.stat().st_mtime_ns == before[on]
    assert len(extended.cells) == 9 and set(extended.cells.status) == {"done"}
    old = extended.table[extended.table.seed.isin([0, 1]) & extended.table.setting.isin(list(SETTINGS))]
    pd.testing.assert_frame_equal(canonical(old), canonical(first.table))


def test_two_sweeps_racing_on_one_directory_never_mix(tmp_path):
    procs = start_gated(
        tmp_path,
        2,
        setup="from agl_lab import run_sweep\nfrom agl_lab.training.locks import DirectoryBusyError",
        body=f"""
try:
    result = run_sweep({SETTINGS!r}, [0, 1], sweep_dir={str(tmp_path / "s")!r}, dotlist={list(TINY_RUN)!r},
                       executor="serial", progress=False)
except DirectoryBusyError as exc:
    print("refused:", exc)
    sys.exit(4)
twice = result.table.duplicated(["setting", "seed", "step", "metric"]).sum()
print(result.cells.status.tolist(), len(result.table), twice)
""",
    )
    results = sorted((proc.wait(timeout=300), proc.stdout.read().strip()) for proc in procs)
    assert [code for code, _ in results] == [0, 4], [proc.stderr.read()[-2000:] for proc in procs]
    (_, won), (_, refused) = results
    assert refused.startswith(f"refused: {tmp_path / 's'} is in use by a sweep (pid ")
    statuses, rows, duplicated = won.rsplit("\n", 1)[-1].rsplit(" ", 2)
    assert statuses == "['done', 'done', 'done', 'done']" and int(duplicated) == 0
    assert int(rows) == len(sweep(tmp_path, "solo").table)  # the same rows as a sweep alone: none twice, none lost


@pytest.mark.parametrize(
    ("settings", "seeds", "text"),
    [
        ({"a": []}, [0, 1, 0], "seeds [0] appear more than once"),
        ({"a": []}, [-1], "seeds must be integers in [0, 2**32-1]"),
        ({"a": [], "b": ["algorithm.gamma=1.0"]}, [0], "settings 'a' and 'b' resolve to the same config"),
        ({"on": [], "ON": ["lab.max_turns=3"]}, [0], "settings 'on' and 'ON' differ only in case"),
    ],
)
def test_duplicates_are_refused_before_anything_runs(tmp_path, settings, seeds, text):
    with pytest.raises(ValueError, match=re.escape(text)):
        run_sweep(settings, seeds, sweep_dir=tmp_path / "s", dotlist=TINY_RUN, executor="serial", progress=False)
    assert not (tmp_path / "s").exists()


def test_a_damaged_cell_never_loses_the_table_of_the_others(tmp_path):
    whole = sweep(tmp_path, "s")
    root = tmp_path / "s"
    (root / "both_on" / "seed-1" / "metrics.jsonl").write_bytes(b"\x00\x01binary")
    (root / "both_off" / "seed-0" / "cell.json").write_text('{"status": "do')  # torn
    table, cells = collect_only(root)
    assert cells.set_index(["setting", "seed"])["status"].to_dict() == {
        ("both_on", 0): "done",
        ("both_on", 1): "damaged",
        ("both_off", 0): "damaged",
        ("both_off", 1): "done",
    }
    damaged = cells[cells.status == "damaged"].error.tolist()
    assert "metrics.jsonl is not a text JSON-lines file" in damaged[0] and "cell.json is not valid JSON" in damaged[1]
    assert set(zip(table.setting, table.seed, strict=True)) == {("both_on", 0), ("both_off", 1)}
    with pytest.warns(CellRerunWarning, match="was damaged after"):
        again = sweep(tmp_path, "s")  # the damaged cells rerun; the table is whole again
    assert again.cells["status"].tolist() == ["done"] * 4
    pd.testing.assert_frame_equal(canonical(again.table), canonical(whole.table))


def collect_only(root):
    """The cells' table as a sweep would collect it, without running anything."""
    from agl_lab.studies.sweep_cells import collect

    cells = plan_sweep(SETTINGS, [0, 1], sweep_dir=root, dotlist=TINY_RUN)
    return collect(cells)


def test_start_ray_starts_nothing_for_a_serial_sweep_and_refuses_other_executors():
    import ray

    assert start_ray(executor="serial") is False and not ray.is_initialized()
    with pytest.raises(ValueError, match=r"executor must be 'ray' or 'serial', got 'dask'"):
        start_ray(executor="dask")


def test_a_local_ray_that_misses_rays_startup_window_is_started_again_then_the_error_is_raised(monkeypatch):
    """Ray gives a new raylet a fixed 30 s to register (ray/_private/node.py) and then raises; on a busy machine that
    is a slow start, not a fault: start_ray tries again (shutting down what the failed start left), warns each time,
    and raises Ray's own error after its last try. A cluster's address is never retried: a wrong one fails at once."""
    import ray

    from agl_lab.studies import ray_start

    starts, shutdowns = [], []

    def times_out(**options):
        starts.append(options)
        raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "init", times_out)
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(1))
    with pytest.warns(RuntimeWarning, match="did not start within Ray's 30 s") as warned:
        with pytest.raises(Exception, match="timed out during startup"):
            ray_start.start_ray(num_cpus=1)
    assert len(starts) == ray_start.STARTS and len(shutdowns) == ray_start.STARTS - 1 and len(warned) == 2
    starts.clear()
    with pytest.raises(Exception, match="timed out during startup"):
        ray_start.start_ray(address="127.0.0.1:1")
    assert len(starts) == 1
