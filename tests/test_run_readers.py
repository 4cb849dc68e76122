"""``agl_lab.read_run`` on every source, each made by its real producer: verl's rollout dump written by verl's own
``RayPPOTrainer._log_rollout_data``/``_write_generations``, a ``DataProto`` from verl's ``save_to_disk``, the lab's
batch files, per-step tables; the step selection; streaming one step at a time; and reading without torch or verl."""

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

import agl_lab
from agl_lab.files.batch_io import BatchFileError, load_batch, sample_batch_path, save_batch
from agl_lab.files.run_readers import iter_run_steps, parse_steps, run_source
from agl_lab.files.run_rows import RUN_COLUMNS, rows_from_batch
from agl_lab.files.verl_dump import write_verl_dump
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows


def agent_rows(seed, *, n_prompts=3, calls="success", min_calls=1, max_calls=3, fail_extra_calls=2):
    """Transition-level rows (each LLM call a row, the PR's multi-output case) of a synthetic agent run."""
    knobs = SyntheticKnobs(
        n_prompts=n_prompts,
        rollouts_per_prompt=4,
        level="transition",
        calls=calls,
        min_calls=min_calls,
        max_calls=max_calls,
        fail_extra_calls=fail_extra_calls,
        seed=seed,
    )
    return synthetic_rows(knobs)[0]


def partition(values):
    """Which rows share a value, whatever the values are: each row's first row with the same value."""
    firsts = {}
    return [firsts.setdefault(v, i) for i, v in enumerate(values)]


def test_a_verl_rollout_dump_as_verls_trainer_writes_it(tmp_path):
    batches = {step: agent_rows(step) for step in (1, 2, 3)}
    for step, rows in batches.items():
        write_verl_dump(rows, tmp_path, step=step)
    line = json.loads((tmp_path / "2.jsonl").read_text().splitlines()[0])
    assert {"input", "output", "gts", "score", "step", "request_id"} <= set(line)  # verl's own fields
    assert run_source(tmp_path) == "verl_dump"
    table = agl_lab.read_run(tmp_path)
    assert list(table.columns) == RUN_COLUMNS and table.attrs["steps"] == [1, 2, 3]
    for step, rows in batches.items():
        part = table[table["step"] == step]
        ids = rows.non_tensor_batch
        assert part["trajectory"].tolist() == list(ids["rollout_id_list"])  # verl's request_id
        # the group: the prompt of the trajectory's first row, which every rollout of a dataset item shares
        assert partition(part["group"]) == partition(ids["data_id_list"])
        assert part["reward"].tolist() == rows.batch["token_level_scores"].float().sum(-1).tolist()
        expected_rows = pd.Series(ids["rollout_id_list"]).groupby(ids["rollout_id_list"]).cumcount()
        assert part["row"].tolist() == expected_rows.tolist()
    # what the dump does not keep is NaN, never guessed; it holds the batch the step trained
    assert table["response_tokens"].isna().all() and table["advantage"].isna().all() and table["kept"].all()


def test_a_dump_with_a_uid_field_and_verl_v1s_row_keys(tmp_path):
    rows = agent_rows(4)
    ids = rows.non_tensor_batch
    write_verl_dump(rows, tmp_path, step=7, reward_extra={"uid": list(ids["data_id_list"])})
    table = agl_lab.read_run(tmp_path)
    assert table["group"].tolist() == list(ids["data_id_list"])  # a reward-extra uid is the group
    # verl's v1 trainer writes uid = the row's key {uid}_{session}_{index} (trainer_base._log_rollout_data; its module
    # needs transfer_queue, so its writer is the same _write_generations called with the keys v1 builds)
    keys = [
        f"{d}_{r.split('/r')[1]}_{t}"
        for d, r, t in zip(ids["data_id_list"], ids["rollout_id_list"], ids["turn_index_list"], strict=True)
    ]
    n = len(keys)
    RayPPOTrainer._write_generations(
        ["p"] * n, ["o"] * n, [None] * n, [1.0] * n, {"uid": keys}, str(tmp_path / "v1"), 5
    )
    v1 = agl_lab.read_run(tmp_path / "v1")
    assert v1["group"].tolist() == list(ids["data_id_list"])
    assert partition(v1["trajectory"]) == partition(ids["rollout_id_list"])
    assert v1["row"].tolist() == list(ids["turn_index_list"])


def test_the_trajectory_column_named_and_a_dump_without_trajectories(tmp_path):
    rows = agent_rows(5)
    session = [f"s-{r}" for r in rows.non_tensor_batch["rollout_id_list"]]
    write_verl_dump(rows, tmp_path, step=1, request_ids=None, reward_extra={"session": session})  # no request_id
    # its rows continue one another (turns of multi-output sessions): nothing in the file says which session is whose
    with pytest.raises(BatchFileError, match=r"carry no session id \(no request_id.* trajectory_column=\.\.\.\)\)$"):
        agl_lab.read_run(tmp_path)
    assert agl_lab.read_run(tmp_path, trajectory_column="session")["trajectory"].tolist() == session
    with pytest.raises(ValueError, match=r"trajectory_column='sesion' is not a field of .*1\.jsonl: it has \["):
        agl_lab.read_run(tmp_path, trajectory_column="sesion")


def test_sessions_of_ten_rows_and_more_and_a_2000_row_step(tmp_path):
    rows = agent_rows(6, n_prompts=72, calls="uniform", min_calls=1, max_calls=14)
    assert len(rows) > 2000
    write_verl_dump(rows, tmp_path, step=1)
    table = agl_lab.read_run(tmp_path)
    sizes = table.groupby("trajectory").size()
    assert len(table) == len(rows) and sizes.max() == 14 and (sizes >= 10).sum() > 20
    assert (
        sizes.sort_index().tolist()
        == pd.Series(rows.non_tensor_batch["rollout_id_list"]).value_counts().sort_index().tolist()
    )


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float32, torch.bool])
def test_a_verl_save_to_disk_file_with_each_mask_dtype(tmp_path, mask_dtype):
    rows = agent_rows(7)
    rows.batch["response_mask"] = rows.batch["response_mask"].to(mask_dtype)
    rows.batch["advantages"] = torch.randn(rows.batch["response_mask"].shape) * rows.batch["response_mask"]
    rows.meta_info["global_steps"] = 12
    rows.save_to_disk(tmp_path / "batch.pkl")  # verl's own writer: a pickle
    with pytest.raises(BatchFileError, match="trusted=True"):
        agl_lab.read_run(tmp_path / "batch.pkl")
    table = agl_lab.read_run(tmp_path / "batch.pkl", trusted=True)
    mask = rows.batch["response_mask"].double()
    assert table["step"].unique().tolist() == [12] and table.attrs["source"] == "verl_pickle"
    assert table["response_tokens"].tolist() == mask.sum(-1).tolist()
    expected = (rows.batch["advantages"].double() * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    np.testing.assert_allclose(table["advantage"], expected.numpy(), rtol=1e-12)
    assert table["kept"].tolist() == (~rows.batch["is_drop_mask"]).tolist()


def test_the_lab_batch_format_read_with_numpy_equals_verls_rows():
    table = agl_lab.read_run(sample_batch_path())
    expected = rows_from_batch(load_batch(sample_batch_path()))  # torch's safetensors loader, then the same table
    pd.testing.assert_frame_equal(table, expected)
    assert table.attrs["score_dtype"] == "bfloat16" and (len(table), table["trajectory"].nunique()) == (81, 48)


def test_reading_a_batch_file_and_its_table_loads_neither_verl_nor_ray_nor_tensordict():
    probe = (
        "import sys, agl_lab\n"
        "from agl_lab.files.batch_io import sample_batch_path\n"
        "agl_lab.read_run(sample_batch_path()); agl_lab.weighting_diagnostics(sample_batch_path())\n"
        "print(sorted(m for m in ('verl', 'ray', 'tensordict') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_per_step_tables_with_a_recording_and_one_table(tmp_path):
    table = agl_lab.read_run(sample_batch_path())
    folder = tmp_path / "recorded"
    folder.mkdir()
    for step in (3, 4):
        table.assign(step=step).to_parquet(folder / f"{step}.parquet")
    (folder / "recording.json").write_text(json.dumps({"recorder": "test"}))
    recorded = agl_lab.read_run(folder, steps="4")
    assert recorded["step"].unique().tolist() == [4] and recorded.attrs["recording"] == {"recorder": "test"}
    pd.testing.assert_frame_equal(recorded.drop(columns="step"), table.drop(columns="step"), check_dtype=False)
    # one CSV of many steps, with only some of the columns: the others NaN
    csv = tmp_path / "rows.csv"
    pd.concat([table.assign(step=1), table.assign(step=2)])[["step", "trajectory", "group", "reward"]].to_csv(
        csv, index=False
    )
    rows = agl_lab.read_run(csv)
    assert rows["step"].tolist() == [1] * 81 + [2] * 81 and rows["response_tokens"].isna().all()
    assert rows["kept"].isna().all() and rows["row"].tolist()[:81] == table["row"].tolist()
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "other.csv", index=False)
    with pytest.raises(BatchFileError, match=r"has none of the run columns \['step', 'group'"):
        agl_lab.read_run(tmp_path / "other.csv")


def test_steps_select_and_a_run_streams_one_step_at_a_time(tmp_path):
    for step in (1, 2, 3, 5, 10):
        write_verl_dump(agent_rows(step, n_prompts=1), tmp_path, step=step)
    specs = [
        ("2-5", [2, 3, 5]),
        ("3", [3]),
        ("-2", [1, 2]),
        ("5-", [5, 10]),
        ("1,3,10", [1, 3, 10]),
        ((2, 5), [2, 3, 5]),
        ([10, 1], [1, 10]),
        (range(1, 4), [1, 2, 3]),
        (slice(2, 10), [2, 3, 5]),
        (slice(None, None, 2), [2, 10]),
    ]
    for spec, expected in specs:
        assert agl_lab.read_run(tmp_path, steps=spec).attrs["steps"] == expected, spec
    for bad in ("2..5", 2.5, True, ["a"]):
        with pytest.raises(ValueError, match="steps"):
            parse_steps(bad)
    with pytest.raises(ValueError, match=r"steps='20-30' selects none of .*\(1\.\.10, 5 files\)"):
        agl_lab.read_run(tmp_path, steps="20-30")
    # lazily: step 1 comes back before step 10's damaged file is opened
    (tmp_path / "10.jsonl").write_text("{not json\n")
    steps = iter_run_steps(tmp_path)
    assert next(steps)[0] == 1
    with pytest.raises(BatchFileError, match=r"10\.jsonl is not JSON lines"):
        list(steps)


def test_what_is_not_a_run_is_named(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(BatchFileError, match=r"is an agl_lab run directory: it logged each step's diagnostics"):
        agl_lab.read_run(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BatchFileError, match=r"is neither a batch \(no batch.json"):
        agl_lab.read_run(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no batch or run at"):
        agl_lab.read_run(tmp_path / "absent")
    save_batch(load_batch(sample_batch_path()), tmp_path / "batch")
    with pytest.raises(ValueError, match=r"steps=3 selects nothing from .*: it is one batch \(step None\)"):
        agl_lab.read_run(tmp_path / "batch", steps=3)


def test_the_shipped_verl_dump_is_what_its_make_script_writes(tmp_path):
    import runpy

    from agl_lab.files.batch_io import data_dir

    shipped = data_dir() / "verl_rollout_dump"
    made = runpy.run_path(str(shipped / "make.py"))["make"](tmp_path)
    assert [p.name for p in made] == [f"{step}.jsonl" for step in range(1, 9)]
    for path in made:
        assert path.read_bytes() == (shipped / path.name).read_bytes(), path.name
    table = agl_lab.read_run(shipped)
    assert (len(table), table.groupby(["step", "trajectory"]).ngroups) == (1850, 288)  # data/verl_rollout_dump/README


def test_a_step_file_holding_another_steps_rows_is_refused(tmp_path):
    # verl names each file after the step its rows hold ({global_steps}.jsonl, step = global_steps on every row)
    write_verl_dump(agent_rows(11, n_prompts=1), tmp_path / "dump", step=2)
    (tmp_path / "dump" / "2.jsonl").rename(tmp_path / "dump" / "5.jsonl")
    with pytest.raises(BatchFileError, match=r"5\.jsonl is step 5 by its name, but \d+ of its rows say step \[2\]"):
        agl_lab.read_run(tmp_path / "dump")
    (tmp_path / "tables").mkdir()
    agl_lab.read_run(sample_batch_path()).assign(step=3).to_parquet(tmp_path / "tables" / "4.parquet")
    with pytest.raises(BatchFileError, match=r"4\.parquet is step 4 by its name, but 81 of its rows say step \[3\]"):
        agl_lab.read_run(tmp_path / "tables")


def test_nan_and_infinite_scores_as_verls_json_dumps_writes_them_and_a_damaged_line_named(tmp_path):
    from agl_lab.files.verl_dump import read_verl_step

    rows = agent_rows(6)
    scores = rows.batch["token_level_scores"]
    scores[0, -1], scores[1, -1] = float("nan"), float("inf")  # json.dumps writes NaN and Infinity, not strict JSON
    path = write_verl_dump(rows, tmp_path, step=1)
    text = path.read_text()
    assert '"score": NaN' in text and '"score": Infinity' in text
    reward = read_verl_step(path, step=1)["reward"].to_numpy()  # the file as written, before any session's outcome
    np.testing.assert_array_equal(reward, scores.float().sum(-1).numpy())  # NaN where NaN was written
    assert np.isnan(reward[0]) and reward[1] == np.inf
    lines = text.splitlines(keepends=True)
    for bad, said in (
        ("[1, 2]\n", "line 2 is list, not an object"),
        ('{"input": "w1", "outp\n', "line 2: Unterminated string"),
        (lines[1][:40] + "\n" + lines[1][40:], "line 2: Unterminated string"),  # a line split inside a string
    ):
        path.write_text(lines[0] + bad + "".join(lines[2:]))
        with pytest.raises(BatchFileError, match=re.escape(f"{path} is not JSON lines ({said}")):
            read_verl_step(path, step=1)


def test_a_trajectorys_group_is_its_first_prompt_that_was_written(tmp_path):
    # a row whose prompt is null or absent: the trajectory's group is its first row's prompt that the file holds
    lines = [
        {"input": None, "output": "a", "score": 0.0, "step": 1, "request_id": "r1"},
        {"input": "p1 a", "output": "b", "score": 0.0, "step": 1, "request_id": "r1"},
        {"output": "c", "score": 1.0, "step": 1, "request_id": "r2"},
        {"input": "p0", "output": "d", "score": 1.0, "step": 1, "request_id": "r3"},
    ]
    (tmp_path / "1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    table = agl_lab.read_run(tmp_path)
    assert table["group"].tolist()[:2] == ["p1 a", "p1 a"] and table["group"].tolist()[3] == "p0"
    assert pd.isna(table["group"][2])  # a trajectory without any prompt has no group: never guessed
