import json
import pickle
import re
import runpy

import numpy as np
import pytest
import torch
from verl import DataProto

from agl_lab.rows import (
    BatchFileError,
    build_rows,
    data_dir,
    example_rows,
    group_rows,
    load_batch,
    require_fields,
    rows_frame,
    sample_batch_path,
    save_batch,
)
from conftest import make_rows


def test_build_rows_layout_left_pads_prompts_right_pads_responses():
    rows = build_rows(
        prompts=[[11, 12, 13], [21]],
        responses=[[31], [41, 42, 43]],
        rewards=[1.0, 0.5],
        rollout_ids=["a", "b"],
        data_ids=["q", "q"],
        response_masks=[[1], [1, 0, 1]],
        pad_token_id=0,
    )
    b = rows.batch
    # prompts are left-padded to width 3, responses right-padded to width 3
    assert b["prompts"].tolist() == [[11, 12, 13], [0, 0, 21]]
    assert b["responses"].tolist() == [[31, 0, 0], [41, 42, 43]]
    assert b["input_ids"].tolist() == [[11, 12, 13, 31, 0, 0], [0, 0, 21, 41, 42, 43]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    # position ids count attended tokens from 0, pads before the first one stay 0
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 3, 3], [0, 0, 0, 1, 2, 3]]
    assert b["response_mask"].tolist() == [[1, 0, 0], [1, 0, 1]]
    # the reward sits on the last response token (row 0: index 0; row 1: index 2)
    assert b["token_level_scores"].tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.5]]
    assert b["is_drop_mask"].tolist() == [False, False]
    assert rows.non_tensor_batch["rollout_id_list"].tolist() == ["a", "b"]
    assert rows.non_tensor_batch["data_id_list"].tolist() == ["q", "q"]


def test_build_rows_fixed_widths_and_log_probs():
    rows = build_rows(
        prompts=[[1]],
        responses=[[2, 3]],
        rewards=[1.0],
        rollout_ids=[0],
        data_ids=[0],
        rollout_log_probs=[[-0.5, -0.25]],
        prompt_width=2,
        response_width=4,
    )
    assert rows.batch["input_ids"].shape == (1, 6)
    assert rows.batch["rollout_log_probs"].tolist() == [[-0.5, -0.25, 0.0, 0.0]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"responses": [[]]}, "responses are empty in rows [0]"),
        ({"rewards": [1.0, 2.0]}, "rewards has 2 entries but prompts has 1"),
        ({"response_width": 1}, "response_width=1 is shorter than the longest row (2 tokens)"),
        ({"response_masks": [[1]]}, "response_masks rows [0] differ in length"),
    ],
)
def test_build_rows_refuses_bad_input(kwargs, message):
    args = dict(prompts=[[1]], responses=[[2, 3]], rewards=[1.0], rollout_ids=["a"], data_ids=["q"])
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        build_rows(**args)


def test_group_rows_orders_groups_by_first_appearance_like_a_dict():
    ids = np.array(["b", "a", "b", "c", "a", 1, 1.0], dtype=object)
    groups = group_rows(ids, field="rollout_id_list")
    expected = {}
    for i, x in enumerate(ids):
        expected.setdefault(x, []).append(i)
    assert groups.ids.tolist() == list(expected)  # 1 and 1.0 are one key, as in a dict
    assert groups.first_rows.tolist() == [v[0] for v in expected.values()]
    assert groups.sizes.tolist() == [len(v) for v in expected.values()]
    assert groups.codes.tolist() == [0, 1, 0, 2, 1, 3, 3]


def test_group_rows_refuses_missing_and_unhashable_ids():
    with pytest.raises(ValueError, match=r"rollout_id_list has missing values \(None/NaN\) at rows \[1\]"):
        group_rows(np.array(["a", None], dtype=object), field="rollout_id_list")
    ragged = np.empty(2, dtype=object)
    ragged[:] = [["a"], ["b", "c"]]
    with pytest.raises(ValueError, match="rollout_id_list must hold hashable ids"):
        group_rows(ragged, field="rollout_id_list")


def test_example_rows_have_rollouts_of_one_to_three_rows():
    rows = example_rows()
    sizes = group_rows(rows.non_tensor_batch["rollout_id_list"], field="r").sizes
    assert sorted(set(sizes.tolist())) == [1, 2, 3]
    assert set(rows.non_tensor_batch["data_id_list"]) == {"q0", "q1"}


def test_rows_frame_reports_rollout_sizes_and_masses():
    rows = make_rows([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3])])
    rows.batch["advantages"] = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    frame = rows_frame(rows)
    assert frame["rows_in_rollout"].tolist() == [2, 2, 1]
    assert frame["trainable_tokens"].tolist() == [2, 1, 3]
    assert frame["reward"].tolist() == [1.0, 1.0, 0.0]
    # row masses: 0.5+0.5, 0.5, -3; rollout A adds its two rows: 1.5
    assert frame["advantage_mass"].tolist() == [1.0, 0.5, -3.0]
    assert frame["rollout_mass"].tolist() == [1.5, 1.5, -3.0]
    assert frame["turn"].tolist() == [0, 1, 0]


# --- real batches: the safe format, verl's pickle dumps, and what goes wrong with files -------------------------


def shared_batch():
    """A batch with every kind of field a dump carries: GRPO's shared advantages/returns, ids, meta_info."""
    rows = make_rows([("q0", "a", 1.0, [2, 1]), ("q1", 7, 0.0, [3])])
    rows.batch["advantages"] = torch.randn(3, 3)
    rows.batch["returns"] = rows.batch["advantages"]  # one tensor under two names, as verl's GRPO leaves it
    rows.non_tensor_batch["score"] = np.array([0.5, 0.5, 1.0])
    rows.non_tensor_batch["extra"] = np.array([{"k": [1, 2]}, None, [3, 4]], dtype=object)
    rows.meta_info = {"global_steps": np.int64(4), "note": "from a test"}
    return rows


def assert_same_batch(loaded, original):
    assert set(loaded.batch.keys()) == set(original.batch.keys())
    for key in original.batch.keys():
        assert loaded.batch[key].dtype == original.batch[key].dtype, key
        assert torch.equal(loaded.batch[key], original.batch[key]), key
    assert set(loaded.non_tensor_batch) == set(original.non_tensor_batch)
    for key, values in original.non_tensor_batch.items():
        assert loaded.non_tensor_batch[key].dtype == values.dtype, key
        assert loaded.non_tensor_batch[key].tolist() == values.tolist(), key


def test_safe_format_round_trip(tmp_path):
    original = shared_batch()
    path = save_batch(original, tmp_path / "batch")
    assert sorted(p.name for p in path.iterdir()) == ["batch.json", "tensors.safetensors"]
    loaded = load_batch(path)
    assert_same_batch(loaded, original)
    assert loaded.non_tensor_batch["rollout_id_list"].tolist() == ["a", "a", 7]  # ids keep their type
    assert loaded.meta_info == {"global_steps": 4, "note": "from a test"}
    # either file of the directory names the batch too
    assert_same_batch(load_batch(path / "batch.json"), original)
    assert_same_batch(load_batch(path / "tensors.safetensors"), original)


def test_save_refuses_to_overwrite_and_what_json_cannot_hold(tmp_path):
    save_batch(shared_batch(), tmp_path)
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        save_batch(shared_batch(), tmp_path)
    save_batch(example_rows(), tmp_path, overwrite=True)
    assert len(load_batch(tmp_path)) == len(example_rows())
    odd = shared_batch()
    odd.meta_info["when"] = object()
    with pytest.raises(ValueError, match=re.escape("meta_info cannot be saved as JSON")):
        save_batch(odd, tmp_path / "odd")


def test_verl_pickle_dumps_load_only_when_trusted(tmp_path):
    original = shared_batch()
    dump = tmp_path / "step_12.pkl"
    original.save_to_disk(dump)  # what a user dumps from their run
    with pytest.raises(BatchFileError) as error:
        load_batch(dump)
    message = str(error.value)
    assert "is a pickle (what verl's DataProto.save_to_disk writes)" in message
    assert "load_batch(path, trusted=True)" in message and "agl_lab.rows.save_batch" in message
    loaded = load_batch(dump, trusted=True)
    assert isinstance(loaded, DataProto)
    assert_same_batch(loaded, original)


class _Trap:
    """Unpickling this creates a file: proof of whether a loader ran the pickle."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_an_untrusted_pickle_is_never_run(tmp_path):
    trap, evidence = tmp_path / "trap.pkl", tmp_path / "it-ran"
    trap.write_bytes(pickle.dumps(_Trap(evidence)))
    with pytest.raises(BatchFileError, match="is a pickle"):
        load_batch(trap)
    assert not evidence.exists()
    with pytest.raises(BatchFileError, match="holds a _io.TextIOWrapper, not a verl DataProto"):
        load_batch(trap, trusted=True)  # trusted: it runs, and what comes out is not a batch
    assert evidence.exists()


def test_missing_corrupt_and_foreign_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no batch at .*nothing-here"):
        load_batch(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BatchFileError, match="it lacks batch.json and tensors.safetensors"):
        load_batch(tmp_path / "empty")
    good = save_batch(shared_batch(), tmp_path / "good")

    (good / "batch.json").write_text("{not json")
    with pytest.raises(BatchFileError, match=re.escape("batch.json is corrupt (not valid JSON")):
        load_batch(good)
    (good / "batch.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(BatchFileError, match="is not an agl_lab batch header"):
        load_batch(good)
    (good / "batch.json").write_text(json.dumps({"format": "agl_lab.batch", "version": 99}))
    with pytest.raises(BatchFileError, match="has format version 99; this agl_lab reads up to 1"):
        load_batch(good)

    save_batch(shared_batch(), good, overwrite=True)
    tensors = good / "tensors.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:100])  # cut short
    with pytest.raises(BatchFileError, match="is corrupt"):
        load_batch(good)
    save_batch(shared_batch(), good, overwrite=True)
    header = json.loads((good / "batch.json").read_text())
    header["tensors"]["prompts"]["shape"] = [4, 1]
    (good / "batch.json").write_text(json.dumps(header))
    with pytest.raises(BatchFileError, match="is corrupt: tensors.safetensors holds"):
        load_batch(good)

    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04rest-of-a-zip")
    with pytest.raises(BatchFileError, match="is a zip archive"):
        load_batch(tmp_path / "model.pt", trusted=True)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(BatchFileError, match="is not agl_lab's safe format"):
        load_batch(tmp_path / "notes.txt")
    (tmp_path / "cut.pkl").write_bytes(pickle.dumps(shared_batch())[:200])
    with pytest.raises(BatchFileError, match="could not be unpickled"):
        load_batch(tmp_path / "cut.pkl", trusted=True)


def test_require_fields_lists_every_missing_field_and_the_alternatives():
    rows = example_rows()
    require_fields(rows, ["rollout_id_list", ("response_mask", "responses+attention_mask")], purpose="x")
    rows.batch.pop("response_mask")
    require_fields(rows, [("response_mask", "responses+attention_mask")], purpose="x")  # derivable
    rows.batch.pop("attention_mask")
    with pytest.raises(ValueError) as error:
        require_fields(rows, ["rollout_id_list", ("response_mask", "responses+attention_mask"), "uid"], purpose="Z")
    message = str(error.value)
    assert message.startswith("Z needs fields this batch lacks: response_mask (")
    assert "or responses+attention_mask (" in message and "; uid." in message
    assert "rollout_id_list" not in message.split("The batch has")[0]


def test_the_data_folder_is_found_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (data_dir() / "sample_batch" / "README.md").is_file()
    monkeypatch.setenv("AGL_LAB_DATA", str(tmp_path))
    assert data_dir() == tmp_path and sample_batch_path() == tmp_path / "sample_batch"
    monkeypatch.setenv("AGL_LAB_DATA", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="point AGL_LAB_DATA at a copy of its data/ folder"):
        data_dir()


def test_the_sample_batch_is_what_its_script_makes():
    shipped = load_batch(sample_batch_path())
    made = runpy.run_path(str(sample_batch_path() / "make.py"))["make"]()
    assert_same_batch(shipped, made)
    assert shipped.meta_info == json.loads(json.dumps(made.meta_info))
    # the counts its README states
    sizes = group_rows(shipped.non_tensor_batch["rollout_id_list"], field="rollout_id_list").sizes
    assert (len(shipped), len(sizes)) == (81, 48)
    assert np.bincount(sizes).tolist() == [0, 23, 19, 4, 2]
    readme = (sample_batch_path() / "README.md").read_text()
    assert "**81 rows from 48 rollouts**" in readme
    assert sum(p.stat().st_size for p in sample_batch_path().iterdir()) < 300_000
