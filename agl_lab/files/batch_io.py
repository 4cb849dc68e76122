"""Real batches on disk: verl's dumps (trusted pickles only), agl_lab's safe format for sharing, the sample.

A researcher dumps a batch from an Agent Lightning run with verl's ``DataProto.save_to_disk``: a pickle, and
unpickling a file runs code chosen by whoever made it, so :func:`load_batch` opens pickles only with
``trusted=True``. Batches that people share go in agl_lab's safe format (:func:`save_batch`): a directory with
the tensors in safetensors and every other field in JSON, nothing executes on load; ``batch.json`` holds the sha256
of both files' contents, so a changed or damaged byte is refused on load. ``data/sample_batch`` ships in that format.
Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import SafetensorError

from agl_lab.files.batch_header import (
    META_FILE,
    SAFE_FORMAT,
    SAFE_VERSION,
    TENSORS_FILE,
    BatchFileError,
    check_stored,
    file_digest,
    header_digest,
    read_batch_header,
    tensor_specs,
)

if TYPE_CHECKING:  # loaded where a DataProto is made: reading a header or a run's rows needs neither torch nor verl
    from verl import DataProto

__all__ = ["BatchFileError", "data_dir", "load_batch", "non_tensor_columns", "sample_batch_path", "save_batch"]


def save_batch(batch: DataProto, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Save ``batch`` in agl_lab's safe format: a directory with ``tensors.safetensors`` and ``batch.json``.

    Tensors go to safetensors (raw arrays, nothing executes on load); non-tensor fields (1-D id arrays or
    arrays of numbers) and ``meta_info`` go to JSON, so they must hold JSON values (str, numbers, bool,
    None, lists, dicts) or tuples of them (tuple ids come back as tuples). Returns the directory. Refuses to
    replace an existing one unless ``overwrite``.
    """
    from safetensors.torch import save_file

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} is a file: save_batch writes a directory (tensors.safetensors + batch.json)")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise FileExistsError(f"{path} is not empty: pass overwrite=True to replace the batch saved there")
    if batch.batch is None or not batch.batch.keys():
        raise ValueError("save_batch needs a batch with at least one tensor field")
    # safetensors refuses tensors that share memory (verl's GRPO returns one tensor as advantages and returns).
    tensors = {key: value.detach().cpu().contiguous().clone() for key, value in batch.batch.items()}
    header = {
        "format": SAFE_FORMAT,
        "version": SAFE_VERSION,
        "rows": len(batch),
        "tensors": {
            key: {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)} for key, t in tensors.items()
        },
        "non_tensor_batch": {key: _encode_column(key, value) for key, value in batch.non_tensor_batch.items()},
        "meta_info": _json_checked(batch.meta_info, "meta_info"),
    }
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / TENSORS_FILE), metadata={"format": SAFE_FORMAT, "version": str(SAFE_VERSION)})
    header["sha256"] = {"header": header_digest(header), "tensors": file_digest(path / TENSORS_FILE)}
    (path / META_FILE).write_text(json.dumps(header, indent=1) + "\n")
    return path


def load_batch(path: str | os.PathLike, *, trusted: bool = False) -> DataProto:
    """Load a batch: agl_lab's safe format (a directory from :func:`save_batch`), or verl's pickle dump.

    A pickle (``DataProto.save_to_disk``) is unpickled only with ``trusted=True``: unpickling a file runs code
    its author chose. Missing, corrupt and foreign files raise :class:`BatchFileError` (FileNotFoundError
    when nothing is there) saying what was found and what was expected.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no batch at {path}: expected a directory written by agl_lab.files.batch_io.save_batch "
            f"({TENSORS_FILE} + {META_FILE}) or, with trusted=True, a pickle from verl's DataProto.save_to_disk"
        )
    if path.is_file() and path.name in (TENSORS_FILE, META_FILE):
        path = path.parent  # one file of the safe format given: load the directory it belongs to
    if path.is_dir():
        return _load_safe(path)
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(b"PK\x03\x04"):
        raise BatchFileError(
            f"{path} is a zip archive (torch.save or numpy .npz), not a batch: save a DataProto with "
            f"agl_lab.files.batch_io.save_batch, or dump it with verl's DataProto.save_to_disk"
        )
    looks_pickled = len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5
    if not trusted:
        kind = "a pickle (what verl's DataProto.save_to_disk writes)" if looks_pickled else "not agl_lab's safe format"
        raise BatchFileError(
            f"{path} is {kind}. Unpickling a file runs code chosen by whoever made it, so agl_lab loads "
            f"pickles only when you say you trust the file: load_batch(path, trusted=True). To share a batch, "
            f"convert it once with agl_lab.files.batch_io.save_batch(batch, 'dir/'): tensors in safetensors, the rest "
            f"in JSON, safe to open from anyone."
        )
    return _load_pickle(path)


def data_dir() -> Path:
    """The package's ``data/`` folder, whatever the working directory (``AGL_LAB_DATA`` overrides it).

    In a clone ``agl_lab/data`` is a link to the repository's ``data/``; a wheel carries its files (package data),
    so a plain install and a clone read the same sample batch from the same place.
    """
    override = os.environ.get("AGL_LAB_DATA")
    path = Path(override) if override else Path(__file__).resolve().parents[1] / "data"
    if not path.is_dir():
        raise FileNotFoundError(
            f"agl_lab's data folder is not at {path}: this install lacks its package data (reinstall agl_lab) "
            f"or point AGL_LAB_DATA at a copy of its data/ folder"
        )
    return path


def sample_batch_path() -> Path:
    """The shipped sample batch (``data/sample_batch``, safe format), for :func:`load_batch`."""
    return data_dir() / "sample_batch"


def non_tensor_columns(header: dict[str, Any]) -> dict[str, np.ndarray]:
    """The non-tensor fields a checked header holds, as the arrays :func:`save_batch` was given."""
    return {key: _decode_column(spec) for key, spec in header["non_tensor_batch"].items()}


def _load_safe(path: Path) -> DataProto:
    from safetensors.torch import load_file
    from verl import DataProto

    header = read_batch_header(path, stacklevel=4)
    check_stored(path, header, tensor_specs(path / TENSORS_FILE)[0])
    try:
        tensors = load_file(str(path / TENSORS_FILE))
        non_tensors = non_tensor_columns(header)
        meta_info = dict(header["meta_info"])
    except (SafetensorError, OSError, KeyError, TypeError, ValueError) as exc:
        raise BatchFileError(f"{path} is corrupt ({type(exc).__name__}: {exc}); save the batch again") from exc
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info)


def _load_pickle(path: Path) -> DataProto:
    from verl import DataProto

    try:
        with path.open("rb") as f:
            data = pickle.load(f)  # the caller said the file is trusted
    except Exception as exc:  # unpickling can fail in any way the pickled classes choose
        raise BatchFileError(
            f"{path} could not be unpickled ({type(exc).__name__}: {exc}): the file is corrupt or was written by "
            f"versions of verl/tensordict/torch this environment lacks"
        ) from exc
    if not isinstance(data, DataProto):
        raise BatchFileError(f"{path} holds a {type(data).__module__}.{type(data).__name__}, not a verl DataProto")
    if data.batch is None:
        raise BatchFileError(f"{path} holds a DataProto without tensors: there are no rows to analyse")
    return data


def _encode_column(key: str, values: np.ndarray) -> dict[str, Any]:
    values = np.asarray(values)
    if values.dtype == object and values.ndim != 1:
        raise ValueError(f"non_tensor_batch[{key!r}] is a {values.ndim}-D object array: save_batch stores 1-D ones")
    if values.dtype != object:
        return {"dtype": values.dtype.str, "values": _json_checked(values.tolist(), f"non_tensor_batch[{key!r}]")}
    where = f"non_tensor_batch[{key!r}]"
    return {"dtype": "object", "values": _json_checked([_tag_tuples(v, where) for v in values], where)}


def _decode_column(spec: dict[str, Any]) -> np.ndarray:
    if spec["dtype"] != "object":
        return np.asarray(spec["values"], dtype=np.dtype(spec["dtype"]))
    out = np.empty(len(spec["values"]), dtype=object)
    for i, value in enumerate(spec["values"]):  # one by one: equal-length lists must not become a 2-D array
        out[i] = _untag_tuples(value)
    return out


# JSON has no tuples: a tuple (a hashable id, e.g. (prompt, sample)) is saved as {"__tuple__": [items]}.
_TUPLE = "__tuple__"


def _tag_tuples(value: Any, where: str) -> Any:
    if isinstance(value, tuple):
        return {_TUPLE: [_tag_tuples(v, where) for v in value]}
    if isinstance(value, list):
        return [_tag_tuples(v, where) for v in value]
    if isinstance(value, dict):
        if _TUPLE in value:
            raise ValueError(f"{where} holds a dict with the key {_TUPLE!r}, which save_batch uses to mark tuples")
        return {k: _tag_tuples(v, where) for k, v in value.items()}
    return value


def _untag_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_TUPLE} and isinstance(value[_TUPLE], list):
            return tuple(_untag_tuples(v) for v in value[_TUPLE])
        return {k: _untag_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag_tuples(v) for v in value]
    return value


def _json_checked(value: Any, where: str) -> Any:
    """``value`` with numpy scalars made Python ones; refuses what JSON cannot hold."""
    try:
        return json.loads(json.dumps(value, default=_numpy_scalar))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} cannot be saved as JSON ({exc}): convert it or drop it before save_batch") from exc


def _numpy_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
