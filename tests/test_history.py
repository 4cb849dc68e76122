import json
import re
import types
from pathlib import Path

import pandas as pd
import pytest
import yaml
from verl.utils.tracking import Tracking

from agl_lab.curves.history import (
    COLUMNS,
    missing_metrics,
    read_history,
    read_run_dir,
    read_timings,
    read_verl_jsonl,
    read_wandb_csv,
    read_wandb_offline,
    read_wandb_online,
    require_metrics,
)
from agl_lab.files.jsonl import DamagedFileWarning
from agl_lab.training.tracking import finish_tracking
from conftest import log_offline_run


def values(table, metric, run=None):
    rows = table[(table.metric == metric) & ((table.run == run) if run else True)].sort_values("step")
    return rows["value"].tolist()


def test_agl_lab_run_directory(tmp_path):
    run = tmp_path / "20261130-demo"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"trainer": {"experiment_name": "both_on"}, "lab": {"seed": 2}}))
    (run / "metrics.jsonl").write_text('{"step": 1, "training/reward": 0.25}\n{"step": 2, "training/reward": 0.5}\n')
    table = read_history(run)
    assert list(table.columns) == COLUMNS
    assert values(table, "training/reward") == [0.25, 0.5]
    assert set(table.setting) == {"both_on"} and set(table.seed) == {2} and set(table.source) == {"agl_lab"}
    with pytest.raises(ValueError, match=re.escape(f"{run / 'metrics.jsonl'}, line 1: expected a JSON object")):
        (run / "metrics.jsonl").write_text("{oops\n")
        read_run_dir(run)


STEPS = [{"step": n, "training/reward": n / 4, "timing_s/step": 0.1 * n} for n in (1, 2, 3)]


def lines(rows):
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.mark.parametrize("reader", [read_run_dir, read_timings, "verl"])
def test_a_torn_last_line_keeps_every_complete_step_and_warns(tmp_path, reader):
    run = tmp_path / "run"
    run.mkdir()
    text = lines(STEPS)
    if reader == "verl":  # verl's file backend: {"step": N, "data": {...}}
        text = lines({"step": r["step"], "data": {k: v for k, v in r.items() if k != "step"}} for r in STEPS)
    torn = text + text.splitlines()[0][:17]  # a full disk cut the 4th line after 17 characters
    for name in ("metrics.jsonl", "timings.jsonl", "exp.jsonl"):
        (run / name).write_text(torn)
    with pytest.warns(DamagedFileWarning, match=r"left out 1 torn line: its last line \(4\) is cut short.*kept the 3"):
        table = read_verl_jsonl(run / "exp.jsonl") if reader == "verl" else reader(run)
    metric = "timing_s/step" if reader is read_timings else "training/reward"
    assert sorted(table[table.metric == metric].step) == [1, 2, 3]


def test_a_damaged_line_in_the_middle_is_refused_naming_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = lines(STEPS).splitlines()
    # a line cut and joined to the next: not what a stopped writer leaves (that is only ever the last line)
    (run / "metrics.jsonl").write_text("\n".join([rows[0], rows[1][:9] + rows[2], rows[2]]) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{run / 'metrics.jsonl'}, line 2: expected a JSON object")):
        read_run_dir(run)


@pytest.mark.parametrize(
    ("name", "content", "text"),
    [
        ("metrics.jsonl", b"", "metrics.jsonl is empty"),
        ("metrics.jsonl", b"\n\n", "metrics.jsonl is empty"),
        ("metrics.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00", "metrics.jsonl is not a text JSON-lines file: binary data"),
        ("metrics.jsonl", b"\xff\xfe{", "metrics.jsonl is not a UTF-8 text JSON-lines file"),
        ("config.yaml", b"\x00\x01", "config.yaml is not a text YAML file"),
        ("exp.csv", b"", "exp.csv is empty"),
        ("exp.csv", b"\xff\x00\x01,\x02", "exp.csv is not a text CSV file: binary data"),
        ("exp.jsonl", b"\x00" * 8, "exp.jsonl is not a text JSON-lines file"),
    ],
)
def test_binary_and_empty_files_are_named(tmp_path, name, content, text):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(lines(STEPS))
    (run / name).write_bytes(content)
    path = run / name if name.startswith("exp") else run
    with pytest.raises(ValueError, match=re.escape(str(run / name).rsplit("/", 1)[0])) as err:
        read_history(path)
    assert text in str(err.value)


def test_offline_wandb_runs_skip_unfinished_ones(tmp_path, monkeypatch):
    log_offline_run(tmp_path, monkeypatch, steps=3, config={"trainer": {"experiment_name": "cap2"}, "lab": {"seed": 4}})
    crashed = log_offline_run(tmp_path, monkeypatch, steps=3, name="crashed", config={"lab": {"seed": 5}})
    crashed_dir = Path(crashed.dir).parent
    (crashed_file,) = crashed_dir.glob("run-*.wandb")
    data = crashed_file.read_bytes()
    crashed_file.write_bytes(data[: len(data) * 2 // 3])  # no exit record: as a crash leaves a run
    with pytest.warns(UserWarning, match=f"left out 1 unfinished offline W&B run\\(s\\) .*: {crashed_dir.name};"):
        table = read_history(tmp_path)
    assert set(read_wandb_offline(tmp_path, include_incomplete=True).seed) == {4, 5}
    assert values(table, "training/reward") == [0.0, 0.5, 1.0]
    assert set(table.setting) == {"cap2"} and set(table.seed) == {4} and set(table.source) == {"wandb-offline"}
    assert "text_is_skipped" not in set(table.metric) and not any(m.startswith("_") for m in table.metric)


def test_verl_file_backend_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "exp.jsonl"))
    tracker = Tracking(project_name="p", experiment_name="exp", default_backend=["file"], config={"trainer": {}})
    for step in range(1, 4):
        tracker.log({"training/n_sample_trained": 6 * step, "actor/ppo_kl": 0.01}, step=step)
    finish_tracking(tracker)  # Tracking.finish on verl 0.9; its backends one by one on verl 0.8.0, which lacks it
    table = read_verl_jsonl(tmp_path / "exp.jsonl")
    assert values(table, "training/n_sample_trained") == [6, 12, 18]
    assert set(table.source) == {"verl-file"}


def test_wandb_ui_csv_export(tmp_path):
    csv = tmp_path / "export.csv"
    pd.DataFrame(
        {
            "Step": [1, 2, 3],
            "both_on - training/reward": [0.1, 0.2, 0.3],
            "both_on - training/reward__MIN": [0.0, 0.1, 0.2],
            "both_on - training/reward__MAX": [0.2, 0.3, 0.4],
            "both_off - training/reward": [0.1, None, 0.05],
        }
    ).to_csv(csv, index=False)
    table = read_wandb_csv(csv)
    assert values(table, "training/reward", run="both_on") == [0.1, 0.2, 0.3]
    assert values(table, "training/reward", run="both_off") == [0.1, 0.05]  # empty cells are not zeros
    assert "training/reward__MIN" not in set(table.metric)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="has no Step column"):
        read_wandb_csv(bad)


def test_online_run_goes_through_the_api_object():
    # No network here: an object with the public Api surface the reader uses (run, config, scan_history).
    rows = [{"_step": 0, "training/reward": 0.0}, {"_step": 1, "training/reward": 1.0, "_runtime": 3.0}]
    run = types.SimpleNamespace(id="abc", name="n", config={"lab": {"seed": 9}}, scan_history=lambda: iter(rows))
    api = types.SimpleNamespace(run=lambda path: run if path == "team/proj/abc" else None)
    table = read_wandb_online("team/proj/abc", api=api)
    assert values(table, "training/reward") == [0.0, 1.0] and set(table.seed) == {9}


def test_missing_metrics_are_named_per_run(tmp_path):
    table = pd.concat(
        [
            pd.DataFrame({"run": "a", "metric": ["training/reward", "lab/success_rate"], "value": 1.0}),
            pd.DataFrame({"run": "b", "metric": ["training/reward"], "value": 1.0}),
        ]
    )
    assert missing_metrics(table, ["training/reward", "lab/success_rate"]) == {"b": ["lab/success_rate"]}
    with pytest.raises(ValueError, match=re.escape("runs without the expected metrics:\n  b: lab/success_rate")):
        require_metrics(table, ["training/reward", "lab/success_rate"])


def test_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run, W&B directory or export"):
        read_history(tmp_path / "missing")
    with pytest.raises(ValueError, match="is neither an agl_lab run directory"):
        read_history(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="unknown kind of file"):
        read_history(tmp_path / "notes.txt")
    (tmp_path / "other.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="is not verl file-backend output"):
        read_verl_jsonl(tmp_path / "other.jsonl")
