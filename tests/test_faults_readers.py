"""Fault suite, readers: torn, ragged and mistyped files, written as a crash, an editor or another tool leaves them,
read by every history reader. Only a torn last line is left out (with a warning that counts it); anything else is
refused naming the file, the line and what was expected; NaN/inf follow one policy everywhere (kept, warned)."""

import json
import math
import re
from pathlib import Path

import pytest

from agl_lab.curves.history import (
    NonFiniteWarning,
    read_history,
    read_run_dir,
    read_verl_jsonl,
    read_wandb_csv,
    read_wandb_offline,
)
from agl_lab.curves.wandb_offline import wait_for_exit
from agl_lab.files.jsonl import DamagedFileWarning

HEADER = "Step,a - training/reward,b - training/reward\n"


def csv(tmp_path, text, name="export.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def run_dir(tmp_path, text):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "metrics.jsonl").write_bytes(text.encode() if isinstance(text, str) else text)
    return run


def values(table, run=None):
    rows = table[(table.metric == "training/reward") & ((table.run == run) if run else True)].sort_values("step")
    return list(zip(rows.step.tolist(), rows.value.tolist(), strict=True))


# --- CSV exports ---------------------------------------------------------------------------------------------------


def test_a_csv_cut_mid_number_leaves_its_last_line_out_never_reads_0_dot_as_zero(tmp_path):
    path = csv(tmp_path, HEADER + "1,0.25,0.5\n2,0.75,0.")  # cut after "0." of 0.875: no final newline
    with pytest.warns(DamagedFileWarning, match=r"left out 1 torn line: its last line \(3\) has no end of line"):
        table = read_wandb_csv(path)
    assert values(table, "a") == [(1, 0.25)] and values(table, "b") == [(1, 0.5)]


@pytest.mark.parametrize(
    ("row", "text"),
    [
        ("2,0.75\n", "line 3: expected 3 fields (the header's), got 2"),
        ("2,0.75,0.5,9\n", "line 3: expected 3 fields (the header's), got 4"),
        ("abc,0.75,0.5\n", "line 3: the step must be an integer, got 'abc'"),
        ("2.5,0.75,0.5\n", "line 3: the step must be an integer, got '2.5'"),
        (",0.75,0.5\n", "line 3: the step must be an integer, got ''"),
        ("2,0.75,high\n", "line 3, column 'b - training/reward': expected a number (or an empty cell"),
    ],
    ids=["fewer_fields", "more_fields", "step_abc", "step_2.5", "step_missing", "value_text"],
)
def test_a_ragged_or_mistyped_csv_row_is_refused_naming_the_line(tmp_path, row, text):
    path = csv(tmp_path, HEADER + "1,0.25,0.5\n" + row + "3,0.5,0.5\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}, {text}")):
        read_wandb_csv(path)


def test_a_csv_with_a_bom_empty_cells_and_integral_float_steps_reads_whole(tmp_path):
    path = csv(tmp_path, b"\xef\xbb\xbf" + (HEADER + "1.0,0.25,\n2,0.5,0.75\n").encode())
    table = read_wandb_csv(path)
    assert values(table, "a") == [(1, 0.25), (2, 0.5)] and values(table, "b") == [(2, 0.75)]  # empty cell: not logged


def test_a_header_only_csv_warns_and_reads_as_no_steps(tmp_path):
    with pytest.warns(UserWarning, match="holds a header but no rows"):
        table = read_wandb_csv(csv(tmp_path, HEADER))
    assert table.empty and list(table.columns)[-3:] == ["step", "metric", "value"]


# --- JSON lines: agl_lab's metrics.jsonl and verl's file backend ------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "text"),
    [
        ('{"step": "x", "training/reward": 0.5}', "line 2: the step must be an integer, got 'x'"),
        ('{"step": 2.5, "training/reward": 0.5}', "line 2: the step must be an integer, got 2.5"),
        ('{"step": true, "training/reward": 0.5}', "line 2: the step must be an integer, got True"),
        ('{"training/reward": 0.5}', "line 2: the step must be an integer, got no step"),
        ('{"step": 2, "training/reward": "high"}', "line 2: training/reward must be a number (or null), got 'high'"),
        ('{"step": 2, "training/reward": [1]}', "line 2: training/reward must be a number (or null), got [1]"),
        ('{"step": 2, "training/rew', "line 2: expected a JSON object"),  # torn, but not last: a damaged file
        ("[2, 0.5]", "line 2: expected a JSON object ({...}, one per line), got '[2, 0.5]'"),
    ],
    ids=["step_x", "step_2.5", "step_bool", "no_step", "value_text", "value_list", "torn_middle", "not_object"],
)
def test_a_mistyped_or_damaged_jsonl_line_is_refused_naming_the_line(tmp_path, line, text):
    run = run_dir(tmp_path, f'{{"step": 1, "training/reward": 0.25}}\n{line}\n{{"step": 3, "training/reward": 1}}\n')
    with pytest.raises(ValueError, match=re.escape(f"{run / 'metrics.jsonl'}, {text}")):
        read_run_dir(run)


def test_only_a_torn_last_line_is_left_out_and_counted(tmp_path):
    run = run_dir(
        tmp_path, '{"step": 1, "training/reward": 0.25}\n{"step": 2, "training/reward": 0.5}\n{"step": 3, "tr'
    )
    with pytest.warns(DamagedFileWarning, match=r"left out 1 torn line: its last line \(3\) is cut short.*kept the 2"):
        assert values(read_run_dir(run)) == [(1, 0.25), (2, 0.5)]


def test_a_bom_and_null_values_read_whole(tmp_path):
    run = run_dir(tmp_path, b'\xef\xbb\xbf{"step": 1, "training/reward": 0.25}\n{"step": 2, "training/reward": null}\n')
    assert values(read_run_dir(run)) == [(1, 0.25)]  # null: not logged at step 2
    (tmp_path / "exp.jsonl").write_bytes(b'\xef\xbb\xbf{"step": 1, "data": {"training/reward": 0.5}}\n')
    assert values(read_verl_jsonl(tmp_path / "exp.jsonl")) == [(1, 0.5)]


def test_verl_file_backend_lines_are_checked_the_same_way(tmp_path):
    path = tmp_path / "exp.jsonl"
    path.write_text('{"step": 1, "data": {"training/reward": 0.5}}\n{"step": "two", "data": {"training/reward": 1}}\n')
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 2: the step must be an integer, got 'two'")):
        read_verl_jsonl(path)


# --- NaN and inf: one policy for every reader -------------------------------------------------------------------------


def test_nan_and_inf_are_kept_and_warned_about_by_every_reader(tmp_path):
    nan_inf = [(1, math.nan), (2, math.inf), (3, -math.inf)]
    run = run_dir(tmp_path, "".join(json.dumps({"step": s, "training/reward": v}) + "\n" for s, v in nan_inf))
    export = csv(tmp_path, "Step,training/reward\n1,nan\n2,inf\n3,-inf\n")
    verl = tmp_path / "exp.jsonl"
    verl.write_text("".join(json.dumps({"step": s, "data": {"training/reward": v}}) + "\n" for s, v in nan_inf))
    readers = {
        "metrics.jsonl": lambda: read_run_dir(run),
        "csv": lambda: read_wandb_csv(export),
        "verl": lambda: read_verl_jsonl(verl),
        "history": lambda: read_history(run),
    }
    for name, read in readers.items():
        with pytest.warns(NonFiniteWarning, match=r"kept 3 NaN/inf value\(s\) as logged: training/reward \(3\)"):
            table = read()
        got = values(table)
        assert [s for s, _ in got] == [1, 2, 3], name
        assert math.isnan(got[0][1]) and got[1][1] == math.inf and got[2][1] == -math.inf, name


def test_nan_logged_to_wandb_offline_is_kept_and_warned_about(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="faults", dir=str(tmp_path), mode="offline", config={"lab": {"seed": 1}})
    for step, value in enumerate([0.5, math.nan, math.inf]):
        run.log({"training/reward": value}, step=step)
    run.finish()
    assert wait_for_exit(Path(run.dir).parent).complete
    with pytest.warns(NonFiniteWarning, match=r"kept 2 NaN/inf value\(s\) as logged: training/reward \(2\)"):
        table = read_wandb_offline(tmp_path)
    got = values(table)
    assert got[0] == (0, 0.5) and math.isnan(got[1][1]) and got[2] == (2, math.inf)


def test_a_metric_logged_twice_at_one_step_is_refused_naming_both_lines(tmp_path):
    # two runs appended to one file (or a step logged again after a restart): averaging the two would be a guess
    run = run_dir(tmp_path, '{"step": 1, "training/reward": 0.25}\n{"step": 2, "training/reward": 0.5}\n'
                  '{"step": 2, "training/reward": 0.75, "other": 1}\n')  # fmt: skip
    where = run / "metrics.jsonl"
    twice = f"{where}, line 3: training/reward is logged a second time at step 2 (first: {where}, line 2)"
    with pytest.raises(ValueError, match=re.escape(twice)):
        read_history(run)
    path = tmp_path / "exp.jsonl"  # verl's file backend, which appends
    path.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 1, "data": {"b": 2}}\n{"step": 1, "data": {"a": 3}}\n')
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 3: a is logged a second time at step 1")):
        read_verl_jsonl(path)  # lines 1 and 2 log other metrics at step 1: one step, merged
