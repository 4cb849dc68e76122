"""Fault suite, paths: odd but valid paths work for every option that takes one — spaces, accents, ``=`` and ``,``,
which Hydra's override grammar reads as syntax unless quoted — run names never leave the runs folder, and a working
directory that was deleted is one line, not a crash of torch's libraries."""

import json
import subprocess

import pytest

from agl_lab import short_run_config
from agl_lab.studies.sweep import run_sweep
from agl_lab.studies.sweep_plan import plan_sweep
from agl_lab.training.runs import create_run_dir
from conftest import AGL_LAB, TINY_RUN

ONE_STEP = (*TINY_RUN, "trainer.total_training_steps=1", "trainer.logger=[]")


@pytest.mark.parametrize("out", ["démo out", "lr=1e-5", "bs=8,lr=3"])
def test_a_sweep_or_demo_folder_may_hold_spaces_accents_equals_and_commas(tmp_path, out):
    # demo, sweep and reproduce plan their cells here: each cell's lab.run_dir item was a Hydra lexer error
    (cell,) = plan_sweep({"a": []}, [0], sweep_dir=tmp_path / out, dotlist=ONE_STEP)
    assert short_run_config(dotlist=cell.dotlist).lab.run_dir == str(tmp_path / out / "a" / "seed-0")


def test_a_cell_trains_in_a_folder_with_every_odd_character(tmp_path):
    out = tmp_path / "démo out" / "lr=1e-5,bs=8"
    result = run_sweep({"a": []}, [0], sweep_dir=out, dotlist=ONE_STEP, executor="serial", progress=False)
    assert result.cells.status.tolist() == ["done"]
    assert json.loads((out / "a" / "seed-0" / "status.json").read_text())["status"] == "finished"


def test_a_run_name_never_leaves_the_runs_folder(tmp_path, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    cfg = short_run_config(dotlist=[*ONE_STEP, "trainer.experiment_name=../../../escaped"])
    run_dir = create_run_dir(cfg)
    assert run_dir.parent == here / "runs" and run_dir.name.endswith("-.._.._.._escaped-s0")  # ../escaped-s0 before
    assert sorted(p.name for p in here.iterdir()) == ["runs"]


def test_a_deleted_working_directory_is_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    # the shell enters the folder and deletes it before agl-lab starts, as when another terminal removed it
    result = subprocess.run(
        ["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "{AGL_LAB}" check'], capture_output=True, text=True
    )
    assert result.returncode == 5, result.stderr[-2000:]  # "Intel oneMKL FATAL ERROR" and no agl-lab line before
    assert result.stderr.startswith("agl-lab: file error: the working directory no longer exists")
    assert len(result.stderr.splitlines()) == 1
