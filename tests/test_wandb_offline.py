"""The offline W&B reader against runs logged by the real wandb (offline) in a temporary directory."""

import re

import pytest

from agl_lab.curves.history import read_wandb_offline
from agl_lab.curves.wandb_offline import find_offline_runs, read_offline_run
from agl_lab.files.jsonl import DamagedFileWarning
from conftest import log_offline_run


def test_round_trip_of_history_config_and_summary(tmp_path, monkeypatch):
    log_offline_run(tmp_path, monkeypatch, config={"lab": {"seed": 3}, "trainer": {"experiment_name": "on"}})
    (file,) = find_offline_runs(tmp_path)
    run = read_offline_run(file)
    assert run.complete and run.exit_code == 0
    assert run.project == "agl-lab-test" and run.name == "exp" and run.run_id
    assert run.config == {"lab": {"seed": 3}, "trainer": {"experiment_name": "on"}}
    assert [row["_step"] for row in run.history] == [0, 1, 2, 3, 4]
    assert [row["training/reward"] for row in run.history] == [0, 0.5, 1.0, 1.5, 2.0]
    assert [row["lab/success_rate"] for row in run.history] == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    assert run.summary["final_note"] == 7 and run.summary["training/reward"] == 2.0
    assert read_offline_run(file.parent).run_id == run.run_id  # the run directory works too


def test_records_larger_than_a_block_are_reassembled(tmp_path, monkeypatch):
    # A 100 kB config value spans four 32 KiB blocks: FIRST, MIDDLE..., LAST records.
    big = "x" * 100_000
    log_offline_run(tmp_path, monkeypatch, steps=2, config={"blob": big, "lab": {"seed": 1}})
    run = read_offline_run(find_offline_runs(tmp_path)[0])
    assert run.config["blob"] == big and len(run.history) == 2


def test_unfinished_run_is_marked_incomplete(tmp_path, monkeypatch):
    run = log_offline_run(tmp_path, monkeypatch, steps=3)
    (file,) = find_offline_runs(tmp_path)
    data = file.read_bytes()
    # Cut the file in the middle of its last records, as a crash would leave it.
    file.write_bytes(data[: len(data) * 2 // 3])
    partial = read_offline_run(file)
    assert not partial.complete
    assert partial.run_id == run.id


def test_corrupt_foreign_and_missing_files(tmp_path, monkeypatch):
    log_offline_run(tmp_path, monkeypatch, steps=2)
    (file,) = find_offline_runs(tmp_path)
    intact = read_offline_run(file)
    data = bytearray(file.read_bytes())
    data[20] ^= 0xFF  # inside the first record's payload: that record is left out, every other one kept
    file.write_bytes(bytes(data))
    damaged = read_offline_run(file)
    assert damaged.damaged == [7] and damaged.complete
    assert damaged.history == intact.history and damaged.summary == intact.summary
    with pytest.warns(DamagedFileWarning, match=re.escape(f"{file}: left out 1 damaged record(s)")):
        table = read_wandb_offline(tmp_path)
    assert table[table.metric == "training/reward"].sort_values("step")["value"].tolist() == [0.0, 0.5]
    data[10:12] = b"\xff\xff"  # the first record's length too: its block is skipped, later blocks would be kept
    file.write_bytes(bytes(data))
    assert read_offline_run(file).damaged[0] == 7 and not read_offline_run(file).history
    file.write_bytes(b"")
    with pytest.raises(ValueError, match=re.escape(f"{file} is empty")):
        read_offline_run(file)
    foreign = tmp_path / "run-foreign.wandb"
    foreign.write_text("hello")
    with pytest.raises(ValueError, match="is not a W&B run file"):
        read_offline_run(foreign)
    with pytest.raises(FileNotFoundError, match="no such W&B run"):
        read_offline_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no run-"):
        read_offline_run(tmp_path / "empty")
