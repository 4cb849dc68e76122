"""A batch whose ``batch.json`` disagrees with its tensors file is refused naming the mismatch, by both readers (torch's
``load_batch``, numpy's ``read_run``), before anything is read: written by the lab's own writer (``save_batch``), then
its header changed and its checksum made again, as a writer that got the header wrong would leave it."""

import json

import pytest
import torch

import agl_lab
from agl_lab.files.batch_header import META_FILE, header_digest
from agl_lab.files.batch_io import BatchFileError, load_batch, sample_batch_path, save_batch


def drop_last(values):
    values.pop()


TAMPERS = {
    # the sample batch's 81 rows said to be 80
    "rows": (
        lambda h: h.__setitem__("rows", 80),
        r"batch\.json says 80 rows where 1\d fields hold 81 \('attention_mask', 'input_ids', 'is_drop_mask', \.\.\.\)",
    ),
    "dtype": (
        lambda h: h["tensors"]["response_mask"].__setitem__("dtype", "int64"),
        r"tensors\.safetensors holds 'response_mask' as (float32|bool) \[81, \d+\] where batch\.json says int64",
    ),
    "shape": (
        lambda h: h["tensors"]["responses"].__setitem__("shape", [81, 3]),
        r"holds 'responses' as int64 \[81, \d+\] where batch\.json says int64 \[81, 3\]",
    ),
    "listed, not stored": (
        lambda h: h["tensors"].__setitem__("values", {"dtype": "float32", "shape": [81]}),
        r"batch\.json lists 'values', which tensors\.safetensors lacks",
    ),
    "stored, not listed": (
        lambda h: h["tensors"].pop("input_ids"),
        r"tensors\.safetensors holds 'input_ids', which batch\.json does not list",
    ),
    "an id column": (
        lambda h: drop_last(h["non_tensor_batch"]["rollout_id_list"]["values"]),
        r"batch\.json says 81 rows where 1 field holds 80 \('rollout_id_list'\)",
    ),
}


def tampered(tmp_path, mask_dtype, tamper, *, version=2):
    rows = load_batch(sample_batch_path())
    rows.batch["response_mask"] = rows.batch["response_mask"].to(mask_dtype)
    path = save_batch(rows, tmp_path / "batch")
    header = json.loads((path / META_FILE).read_text())
    tamper(header)
    if version == 2:
        header["sha256"]["header"] = header_digest(header)  # the checksum agrees: only the content can tell
    else:
        header["version"] = 1  # saved before checksums (read with a warning)
        del header["sha256"]
    (path / META_FILE).write_text(json.dumps(header))
    return path


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
@pytest.mark.parametrize("name", list(TAMPERS))
def test_a_header_that_disagrees_with_its_tensors_is_refused_by_both_readers(tmp_path, name, mask_dtype):
    tamper, text = TAMPERS[name]
    path = tampered(tmp_path, mask_dtype, tamper)
    message = rf"batch is corrupt, its header disagreeing with what it stores: .*{text}"
    with pytest.raises(BatchFileError, match=message):
        load_batch(path)
    with pytest.raises(BatchFileError, match=message):
        agl_lab.read_run(path)
    with pytest.raises(BatchFileError, match=message):
        agl_lab.weighting_diagnostics(path)


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
def test_a_header_saved_before_checksums_saying_80_rows_is_refused_too(tmp_path, mask_dtype):
    path = tampered(tmp_path, mask_dtype, TAMPERS["rows"][0], version=1)
    for read in (load_batch, agl_lab.read_run):
        with pytest.warns(UserWarning, match="has no checksums"), pytest.raises(BatchFileError, match="says 80 rows"):
            read(path)


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
def test_a_header_that_agrees_reads_whole(tmp_path, mask_dtype):
    path = tampered(tmp_path, mask_dtype, lambda header: None)
    assert len(load_batch(path)) == len(agl_lab.read_run(path)) == 81
