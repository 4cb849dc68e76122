"""Fault suite, files: what a run or sweep leaves is written whole or not at all, and says what happened. A full disk
(the kernel's ``/dev/full``: every write fails with ENOSPC) or a signal in the middle of a write leaves the previous
file and no ``.<name>.<pid>.partial`` beside it, and the one error line names the file meant; ``status.json`` records
the exit the command reports."""

import errno
import json
import os
import signal
import time

import pandas as pd
import pytest

from agl_lab.cli import main
from agl_lab.exit_codes import report_errors
from agl_lab.files.atomic_files import partial_path, write_whole, written_whole
from agl_lab.studies.demo import save_results
from agl_lab.studies.sweep import SweepResult
from agl_lab.studies.sweep_cells import Cell, write_status
from agl_lab.training.process_state import stop_signals
from conftest import TINY_RUN


def full_disk_at(path):
    """The next whole-file write of ``path`` goes to a full device (its temporary name points at /dev/full)."""
    partial_path(path).symlink_to("/dev/full")


def test_a_full_disk_writing_cell_json_leaves_the_old_record_no_stray_file_and_names_the_path(tmp_path, capsys):
    cell = Cell("both_on", 0, ("lab.seed=0",), str(tmp_path / "both_on" / "seed-0"), "ab" * 32)
    (tmp_path / "both_on" / "seed-0").mkdir(parents=True)
    write_status(cell, "running")
    record = tmp_path / "both_on" / "seed-0" / "cell.json"
    full_disk_at(record)
    result = []
    with report_errors(debug=False, secrets=[], result=result):
        write_status(cell, "done", wall_s=1.0)  # the sweep's last word on the cell, when the disk filled
    assert result == [5]
    assert capsys.readouterr().err == f"agl-lab: file error: [Errno 28] No space left on device: '{record}'\n"
    assert json.loads(record.read_text())["status"] == "running"  # the old record, whole
    assert sorted(p.name for p in record.parent.iterdir()) == ["cell.json"]  # no .cell.json.<pid>.partial


def test_a_full_disk_writing_the_summary_keeps_the_previous_one(tmp_path):
    table = pd.DataFrame(
        {"source": "agl_lab", "run": "r", "setting": "a", "seed": 0, "step": [1, 2], "metric": "lab/success_rate"}
        | {"value": [0.25, 0.5]}
    )
    cells = pd.DataFrame([{"setting": "a", "seed": 0, "status": "done", "error": None, "wall_s": 1.0}])
    cells = cells.assign(run_dir=str(tmp_path / "a"), config_sha256="cd" * 32)
    result = SweepResult(sweep_dir=tmp_path, table=table, cells=cells)
    save_results(result, tmp_path)
    before = (tmp_path / "summary.csv").read_text()
    full_disk_at(tmp_path / "summary.csv")
    with pytest.raises(OSError) as full:
        save_results(result, tmp_path)
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(tmp_path / "summary.csv")
    assert (tmp_path / "summary.csv").read_text() == before
    assert not list(tmp_path.glob(".*.partial"))


def test_a_signal_in_the_middle_of_a_write_leaves_the_old_file_and_no_partial(tmp_path):
    path = tmp_path / "status.json"
    write_whole(path, '{"status": "finished"}\n')
    with pytest.raises(KeyboardInterrupt), stop_signals(), written_whole(path) as partial:
        partial.write_text('{"status": "sto')
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C lands between the half and the rest
        time.sleep(1)
        partial.write_text('{"status": "stopped"}\n')
    assert path.read_text() == '{"status": "finished"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_a_run_that_trained_nothing_says_so_in_its_status(capsys, tmp_path):
    run = tmp_path / "run"  # every prompt is cut and its row marked: every step is skipped
    item = "agentlightning.trace_aggregator.trajectory_max_prompt_length=1"
    assert main(["train", *TINY_RUN, "trainer.total_training_steps=1", item, f"lab.run_dir={run}"]) == 6
    assert "agl-lab: trained nothing: every one of the 1 steps was skipped" in capsys.readouterr().err
    status = json.loads((run / "status.json").read_text())  # it said finished, exit_code 0
    assert status == {"status": "trained_nothing", "steps": 1, "exit_code": 6}
