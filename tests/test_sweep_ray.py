"""The Ray executor's parts: what a cell's task asks for, and its files carried to the driver's folder (no shared disk).

The sweep on a real two-node cluster is tests/test_sweep_cluster.py; Ray and serial agreeing is tests/test_sweep.py.
"""

import json

import pandas as pd
import pytest

from agl_lab.studies.sweep_cells import Cell
from agl_lab.studies.sweep_ray import cell_files, cell_resources, node_record, write_cell_files
from conftest import TINY_RUN


def test_a_cells_task_asks_for_its_threads_as_cpus_and_a_gpu_only_when_its_config_uses_one():
    def cell(*items):
        return Cell("a", 0, (*TINY_RUN, *items), "unused")

    assert cell_resources(cell(), None) == {"num_cpus": 1}  # lab.cpu_threads=1, the default
    assert cell_resources(cell("lab.cpu_threads=3"), None) == {"num_cpus": 3}
    assert cell_resources(cell("lab.cpu_threads=0"), None) == {"num_cpus": 1}  # torch's own setting: one CPU counted
    assert cell_resources(cell("lab.device=cuda"), None) == {"num_cpus": 1, "num_gpus": 1}
    assert cell_resources(cell(), {"lab": {"device": "cuda:0"}}) == {"num_cpus": 1, "num_gpus": 1}
    assert cell_resources(cell("lab.device=auto"), None) == {"num_cpus": 1}  # asks for no GPU: runs on a CPU there


def test_a_cells_files_reach_the_drivers_folder_whole_the_policy_only_when_fetched(tmp_path):
    node = tmp_path / "node" / "both_on" / "seed-0"  # the cell's folder on the node that ran it
    (node / "policy").mkdir(parents=True)
    (node / "wandb" / "offline-run-x").mkdir(parents=True)
    files = {
        "cell.json": json.dumps({"status": "done"}).encode(),
        "metrics.jsonl": b'{"step": 1}\n',
        "config.yaml": b"lab:\n  seed: 0\n",
        "wandb/offline-run-x/run-x.wandb": b"\x00\x01binary",
        "policy/model.safetensors": b"weights",
    }
    for name, data in files.items():
        (node / name).write_bytes(data)
    (node / ".metrics.jsonl.123.partial").write_bytes(b"a torn temporary file")

    sent = cell_files(node, policy=False)
    assert sent == {name: data for name, data in files.items() if not name.startswith("policy/")}
    driver = tmp_path / "driver" / "both_on" / "seed-0"
    write_cell_files(driver, sent)
    assert {p.relative_to(driver).as_posix() for p in driver.rglob("*") if p.is_file()} == set(sent)
    assert all((driver / name).read_bytes() == data for name, data in sent.items())

    fetched = cell_files(node, policy=True)
    assert fetched["policy/model.safetensors"] == b"weights"
    before = (driver / "metrics.jsonl").stat().st_mtime_ns
    write_cell_files(driver, fetched)  # the same bytes already there are left alone; the policy arrives
    assert (driver / "metrics.jsonl").stat().st_mtime_ns == before
    assert (driver / "policy" / "model.safetensors").read_bytes() == b"weights"
    stamps = {p: p.stat().st_mtime_ns for p in node.rglob("*") if p.is_file()}
    write_cell_files(node, fetched)  # the node's disk is the driver's (one machine): nothing is written twice
    assert {p: p.stat().st_mtime_ns for p in node.rglob("*") if p.is_file()} == stamps


def test_outside_ray_a_cell_records_this_host_and_no_node_id():
    import socket

    assert node_record() == {"node_id": None, "host": socket.gethostname()}


def test_address_with_the_serial_executor_is_refused_before_anything_is_created(tmp_path, monkeypatch, capsys):
    from agl_lab.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["sweep", "--address", "10.0.0.1:6379", "--executor", "serial", "--out", "s", *TINY_RUN])
    err = capsys.readouterr().err
    assert code == 2 and list(tmp_path.iterdir()) == []
    assert err == "agl-lab: error: --address names a Ray cluster: use it with --executor ray (the default)\n"
    assert "10.0.0.1" not in err


def test_a_retried_task_whose_first_attempt_finished_trains_nothing_again(tmp_path):
    """Ray retries a task whose node died after the cell was done but before the driver had its files; on a shared disk
    that attempt's files are there, so the retry hands them over as they are (the cluster test's race, by hand)."""
    from agl_lab.studies.sweep_cells import write_status
    from agl_lab.studies.sweep_ray import _cell_task

    run_dir = tmp_path / "a" / "seed-0"
    run_dir.mkdir(parents=True)
    cell = Cell("a", 0, TINY_RUN, str(run_dir), "sha")
    (run_dir / "metrics.jsonl").write_bytes(b'{"step": 1}\n')
    write_status(cell, "done", wall_s=1.0)
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}

    def must_not_train(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    files = _cell_task(cell, {}, must_not_train, False)
    assert set(files) == {"cell.json", "metrics.jsonl"}
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == stamps

    write_status(cell, "running")  # an attempt that had not finished: this one trains the cell
    trained = []
    _cell_task(cell, {}, lambda c, o, node: trained.append(c), False)
    assert trained == [cell]


@pytest.mark.ray
def test_two_cells_of_one_seed_run_in_one_ray_worker_one_after_another_give_the_same_metrics(tmp_path):
    """A LoRA adapter's initial weights come from lab.seed, not from what the worker's process drew before (peft draws
    lora_A from torch's global generator; agl_lab.training.seeding)."""
    import ray

    from agl_lab.studies.sweep import run_sweep

    assert not ray.is_initialized()
    dotlist = [*TINY_RUN, "actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8"]
    # one CPU: the two cells run one after another, in the one worker process Ray keeps for them
    names = {name: [f"trainer.project_name={name}"] for name in ("first", "second")}  # alike but for a name
    result = run_sweep(names, [0], sweep_dir=tmp_path, dotlist=dotlist, progress=False,
                       executor="ray", num_cpus=1)  # fmt: skip
    assert result.cells["status"].tolist() == ["done"] * 2
    table = result.table.drop(columns="run", errors="ignore")
    first, second = (table[table["setting"] == name].drop(columns="setting").reset_index(drop=True)
                     for name in ("first", "second"))  # fmt: skip
    assert sorted(first["step"].unique()) == [1, 2]
    pd.testing.assert_frame_equal(first, second)
