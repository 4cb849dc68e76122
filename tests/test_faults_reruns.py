"""Fault suite, re-runs: a sweep run again into the same folder never deletes or replaces finished work silently.

A changed config for finished cells is refused (exit 4) naming what changed and how to start anew, touching
nothing; new seeds extend the sweep beside the finished cells; an interrupted cell, or a finished one whose policy no
longer loads, is rerun with a warning saying what its folder held; a finished cell without its policy here is named;
``cells.csv`` says which cells the summary covers.
"""

import json
import shutil
from pathlib import Path

import pytest

from agl_lab.cli import main
from agl_lab.studies.sweep import run_sweep
from agl_lab.studies.sweep_cells import CellRerunWarning, MissingPolicyWarning
from conftest import TINY_RUN

AXIS = "lab.task_size=4,5"  # two settings: task_size-4 and task_size-5
ONE_STEP = (*TINY_RUN, "trainer.total_training_steps=1", "trainer.logger=[]")


def sweep(capsys, out, *items, seeds=("0",)):
    code = main(["sweep", *ONE_STEP, AXIS, *items, "--seeds", *seeds, "--executor", "serial", "--out", str(out)])
    return (code, *capsys.readouterr())


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished sweep (2 settings x seed 0); each test works on its own copy (mtimes kept)."""
    out = tmp_path_factory.mktemp("finished") / "s"
    code = main(["sweep", *ONE_STEP, AXIS, "--seeds", "0", "--executor", "serial", "--out", str(out)])
    assert code == 0
    return out


@pytest.fixture
def out(finished, tmp_path):
    return Path(shutil.copytree(finished, tmp_path / "s"))


def snapshot(folder):
    return {
        p: (p.stat().st_mtime_ns, p.read_bytes())
        for p in folder.rglob("*")
        if p.is_file() and p.name != ".agl_lab.lock"
    }


def test_a_changed_shared_item_is_refused_and_touches_nothing(capsys, out):
    capsys.readouterr()
    before = snapshot(out)
    code, stdout, err = sweep(capsys, out, "trainer.total_training_steps=2")
    assert code == 4
    (line,) = [line for line in err.splitlines() if line.startswith("agl-lab:")]
    assert line.startswith(f"agl-lab: directory taken: {out} holds 2 finished cell(s) trained with another config")
    assert "trainer.total_training_steps: 1 -> 2" in line
    assert "give this sweep another folder (--out / sweep_dir)" in line and f"delete {out} first" in line
    assert snapshot(out) == before  # no cell deleted or retrained, summary and panels as they were
    assert "Written:" not in stdout


def test_new_seeds_extend_the_sweep_and_the_summary_says_which_cells_it_covers(capsys, out):
    capsys.readouterr()
    finished = out / "task_size-4" / "seed-0" / "metrics.jsonl"
    mtime = finished.stat().st_mtime_ns
    code, stdout, _ = sweep(capsys, out, seeds=("0", "1"))
    assert code == 0 and finished.stat().st_mtime_ns == mtime  # kept, not retrained
    covered = (out / "cells.csv").read_text().splitlines()
    assert covered[0] == "setting,seed,status,config_sha256,run_dir" and len(covered) == 5
    assert {tuple(row.split(",")[:3]) for row in covered[1:]} == {
        (setting, seed, "done") for setting in ("task_size-4", "task_size-5") for seed in ("0", "1")
    }
    assert f"  {out / 'cells.csv'}" in stdout


def test_an_interrupted_cell_is_rerun_with_a_warning_naming_what_it_held(out):
    cell = out / "task_size-5" / "seed-0"
    record = json.loads((cell / "cell.json").read_text())
    (cell / "cell.json").write_text(json.dumps({**record, "status": "running"}))  # as a stopped sweep leaves it
    kept = (out / "task_size-4" / "seed-0" / "metrics.jsonl").stat().st_mtime_ns
    settings = {f"task_size-{n}": [f"lab.task_size={n}"] for n in (4, 5)}
    with pytest.warns(
        CellRerunWarning, match="task_size-5 seed 0 was running after 1 step\\(s\\): it is rerun from step 1"
    ):
        result = run_sweep(settings, [0], sweep_dir=out, dotlist=ONE_STEP, executor="serial", progress=False)
    assert result.cells.status.tolist() == ["done", "done"]
    assert (out / "task_size-4" / "seed-0" / "metrics.jsonl").stat().st_mtime_ns == kept


SETTINGS = {f"task_size-{n}": [f"lab.task_size={n}"] for n in (4, 5)}


def test_a_finished_cell_whose_policy_no_longer_loads_is_rerun_saying_why(out):
    weights = out / "task_size-5" / "seed-0" / "policy" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # cut short, as a full disk or a bad copy leaves it
    kept = (out / "task_size-4" / "seed-0" / "metrics.jsonl").stat().st_mtime_ns
    with pytest.warns(CellRerunWarning, match=r"task_size-5 seed 0 was damaged \(its policy/: model.safetensors does"):
        result = run_sweep(SETTINGS, [0], sweep_dir=out, dotlist=ONE_STEP, executor="serial", progress=False)
    assert result.cells.status.tolist() == ["done", "done"]  # "done" with no word before
    assert weights.stat().st_size > 1000
    assert (out / "task_size-4" / "seed-0" / "metrics.jsonl").stat().st_mtime_ns == kept


def test_a_finished_cell_without_its_policy_here_keeps_its_results_and_is_named(out):
    shutil.rmtree(out / "task_size-4" / "seed-0" / "policy")  # on a Ray cluster it stays on its node
    before = snapshot(out / "task_size-4")
    with pytest.warns(MissingPolicyWarning, match=r"1 finished cell\(s\) have no policy/ folder here \(task_size-4"):
        result = run_sweep(SETTINGS, [0], sweep_dir=out, dotlist=ONE_STEP, executor="serial", progress=False)
    assert result.cells.status.tolist() == ["done", "done"] and snapshot(out / "task_size-4") == before
