"""Real batches on disk: the safe format, verl's pickle dumps (trusted only), bad files, the shipped sample."""

import json
import pickle
import re
import runpy

import numpy as np
import pytest
import torch
from verl import DataProto

from agl_lab.core.groups import group_rows
from agl_lab.files.batch_io import BatchFileError, data_dir, load_batch, sample_batch_path, save_batch
from agl_lab.lab.examples import example_rows
from conftest import make_rows


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


def test_tuple_ids_come_back_as_tuples_and_still_group(tmp_path):
    original = make_rows([("q0", "a", 1.0, [2, 1]), ("q1", "b", 0.0, [3])])
    tuple_ids = np.empty(3, dtype=object)
    tuple_ids[:] = [("q0", 0), ("q0", 0), ("q1", (2, "x"))]  # nested too
    original.non_tensor_batch["rollout_id_list"] = tuple_ids
    original.non_tensor_batch["extra"] = np.array([{"__kind": [1, (2, 3)]}, [(4,)], None], dtype=object)
    loaded = load_batch(save_batch(original, tmp_path / "batch"))
    assert loaded.non_tensor_batch["rollout_id_list"].tolist() == [("q0", 0), ("q0", 0), ("q1", (2, "x"))]
    assert loaded.non_tensor_batch["extra"].tolist() == [{"__kind": [1, (2, 3)]}, [(4,)], None]
    assert group_rows(loaded.non_tensor_batch["rollout_id_list"], field="rollout_id_list").sizes.tolist() == [2, 1]
    clash = make_rows([("q0", "a", 1.0, [1])])
    clash.non_tensor_batch["extra"] = np.array([{"__tuple__": [1]}], dtype=object)
    with pytest.raises(ValueError, match="uses to mark tuples"):
        save_batch(clash, tmp_path / "clash")


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
    assert "load_batch(path, trusted=True)" in message and "agl_lab.files.batch_io.save_batch" in message
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
    with pytest.raises(BatchFileError, match="has format version 99; this agl_lab reads up to 2"):
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
    with pytest.raises(BatchFileError, match="the sha256 of batch.json does not match"):
        load_batch(good)
    del header["sha256"]  # a header edited by hand, its checksums dropped: refused too
    (good / "batch.json").write_text(json.dumps(header))
    with pytest.raises(BatchFileError, match="batch.json lacks its sha256 checksums"):
        load_batch(good)
    header["version"] = 1  # a batch saved before checksums: its shapes are still checked
    (good / "batch.json").write_text(json.dumps(header))
    with pytest.warns(UserWarning, match="has no checksums"), pytest.raises(BatchFileError, match="holds"):
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


@pytest.mark.parametrize("name", ["tensors.safetensors", "batch.json"])
def test_a_flipped_byte_anywhere_is_refused(tmp_path, name):
    batch = shared_batch()
    saved = save_batch(batch, tmp_path / "b")
    file = saved / name
    original = file.read_bytes()
    # 40 positions spread over the file, its first and last byte included; each flip is one bit of one byte
    positions = sorted({0, len(original) - 1, *np.linspace(0, len(original) - 1, 38).astype(int).tolist()})
    refused = 0
    for position in positions:
        damaged = bytearray(original)
        damaged[position] ^= 0x04
        file.write_bytes(bytes(damaged))
        with pytest.raises(BatchFileError, match=str(saved)):
            load_batch(saved)
        refused += 1
    file.write_bytes(original)
    assert_same_batch(load_batch(saved), batch)  # the undamaged files still load
    assert refused == len(positions) >= 30
