"""The header of agl_lab's safe batch format (``batch.json``), read and checked before any tensor is.

A batch directory :func:`agl_lab.files.batch_io.save_batch` wrote holds ``tensors.safetensors`` and ``batch.json``:
the row count, each tensor's dtype and shape, the id columns, ``meta_info`` and (format 2) the sha256 of the header's
content and of the tensors file. :func:`read_batch_header` refuses a changed byte (the checksums); :func:`check_stored`
refuses a header that disagrees with what the tensors file says it holds (its own header, :func:`tensor_specs`),
which a checksum made from the files as written cannot catch (a header saying 80 rows over 81 stored). Both run
before the tensors are read, by :func:`~agl_lab.files.batch_io.load_batch` (torch) and
:func:`~agl_lab.files.run_rows.read_safe_batch` (numpy) alike, so neither returns part of such a batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

__all__ = ["META_FILE", "SAFETENSORS_DTYPES", "SAFE_FORMAT", "SAFE_VERSION", "TENSORS_FILE", "BatchFileError"]
__all__ += ["check_stored", "file_digest", "header_digest", "read_batch_header", "tensor_specs"]

SAFE_FORMAT = "agl_lab.batch"
SAFE_VERSION = 2  # 2: batch.json holds sha256 checksums of the header and the tensors file (1: none)
TENSORS_FILE = "tensors.safetensors"
META_FILE = "batch.json"
# safetensors' dtype codes and torch's names for them (batch.json lists the tensors' dtypes by torch's names)
SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                      "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}  # fmt: skip


class BatchFileError(ValueError):
    """A batch file that cannot be loaded: corrupt, foreign, or a pickle the caller has not said to trust."""


def read_batch_header(path: str | os.PathLike, *, stacklevel: int = 2) -> dict[str, Any]:
    """The checked ``batch.json`` of a batch directory :func:`save_batch` wrote (its tensors' checksum verified too):
    what :func:`load_batch` and the run readers (:mod:`agl_lab.lab.batch_rows`, without torch) both start from.
    ``stacklevel``: where a missing-checksum warning points, as :func:`warnings.warn` counts from the caller."""
    path = Path(path)
    meta_path, tensors_path = path / META_FILE, path / TENSORS_FILE
    absent = [p.name for p in (meta_path, tensors_path) if not p.is_file()]
    if absent:
        raise BatchFileError(
            f"{path} is not an agl_lab batch: it lacks {' and '.join(absent)} "
            f"(a batch saved by agl_lab.files.batch_io.save_batch has {TENSORS_FILE} and {META_FILE})"
        )
    try:
        header = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BatchFileError(f"{meta_path} is corrupt (not valid JSON: {exc}); save the batch again") from exc
    if not isinstance(header, dict) or header.get("format") != SAFE_FORMAT:
        raise BatchFileError(f"{meta_path} is not an agl_lab batch header (its format is not {SAFE_FORMAT!r})")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BatchFileError(f"{meta_path} is corrupt: its format version is {version!r}; save the batch again")
    if version > SAFE_VERSION:
        raise BatchFileError(
            f"{path} has format version {version!r}; this agl_lab reads up to {SAFE_VERSION}: update agl_lab"
        )
    _verify_checksums(path, header, tensors_path, stacklevel=stacklevel + 1)
    return header


def tensor_specs(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """What the safetensors file at ``path`` says it holds, read from its header alone: ``name -> {dtype, shape,
    data_offsets}`` (dtype as safetensors spells it, :data:`SAFETENSORS_DTYPES`), and where the tensors' bytes start.

    The format: 8 bytes of header length (little endian), that many bytes of JSON, then the raw bytes."""
    try:
        with path.open("rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if not 0 < length <= path.stat().st_size - 8:
                raise ValueError(f"a header of {length} bytes in a file of {path.stat().st_size}")
            specs = json.loads(f.read(length))
        if not isinstance(specs, dict):
            raise TypeError(f"a header that is a {type(specs).__name__}")
    except (OSError, ValueError, TypeError) as exc:
        raise BatchFileError(f"{path} is corrupt ({type(exc).__name__}: {exc}); save the batch again") from exc
    return {key: spec for key, spec in specs.items() if key != "__metadata__"}, 8 + length


def check_stored(path: Path, header: dict[str, Any], specs: dict[str, dict[str, Any]]) -> None:
    """Refuse a batch whose ``batch.json`` disagrees with ``specs``, what its tensors file holds (:func:`tensor_specs`):
    the row count against every tensor and id column, the tensors' names, dtypes and shapes (module docstring)."""
    rows, listed = header.get("rows"), header.get("tensors")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0 or not isinstance(listed, dict):
        raise BatchFileError(f"{path} is corrupt: {META_FILE} gives no row count or tensor list; save the batch again")
    problems, by_rows = [], {}
    for key in sorted(set(listed) | set(specs)):
        said, held = listed.get(key), specs.get(key)
        if said is None or held is None:
            problems.append(
                f"{TENSORS_FILE} holds {key!r}, which {META_FILE} does not list"
                if said is None
                else f"{META_FILE} lists {key!r}, which {TENSORS_FILE} lacks"
            )
            continue
        shape, dtype = list(held["shape"]), SAFETENSORS_DTYPES.get(held["dtype"], held["dtype"])
        said = said if isinstance(said, dict) else {}
        if list(said.get("shape", ())) != shape or said.get("dtype") != dtype:
            problems.append(
                f"{TENSORS_FILE} holds {key!r} as {dtype} {shape} where {META_FILE} says "
                f"{said.get('dtype')} {said.get('shape')}"
            )
        by_rows.setdefault(shape[0] if shape else None, []).append(key)
    for key, column in (header.get("non_tensor_batch") or {}).items():
        values = column.get("values") if isinstance(column, dict) else None
        by_rows.setdefault(len(values) if isinstance(values, list) else None, []).append(key)
    for count, keys in by_rows.items():
        if count != rows:
            named = ", ".join(map(repr, keys[:3])) + ", ..." * (len(keys) > 3)
            hold = f"{len(keys)} fields hold" if len(keys) > 1 else "1 field holds"
            problems.insert(0, f"{META_FILE} says {rows} rows where {hold} {count} ({named})")
    if problems:
        raise BatchFileError(
            f"{path} is corrupt, its header disagreeing with what it stores: {'; '.join(problems[:3])}"
            f"{' ...' * (len(problems) > 3)}; save the batch again"
        )


def _verify_checksums(path: Path, header: dict[str, Any], tensors_path: Path, *, stacklevel: int) -> None:
    """Refuse a batch whose files changed after :func:`save_batch` wrote them (a flipped byte, a cut file)."""
    sums = header.get("sha256")
    if sums is None and header["version"] < 2:
        warnings.warn(
            f"{path} has no checksums (saved before agl_lab's batch format 2), so a damaged byte would go unnoticed: "
            "save it again with agl_lab.files.batch_io.save_batch",
            stacklevel=stacklevel,
        )
        return
    if not isinstance(sums, dict):
        raise BatchFileError(f"{path} is corrupt: {META_FILE} lacks its sha256 checksums; save the batch again")
    actual = {"header": header_digest(header), "tensors": file_digest(tensors_path)}
    changed = [META_FILE if name == "header" else TENSORS_FILE for name in actual if sums.get(name) != actual[name]]
    if changed:
        raise BatchFileError(
            f"{path} is corrupt: the sha256 of {' and '.join(changed)} does not match the checksum save_batch stored "
            f"in {META_FILE} (a byte changed after the batch was saved); save the batch again"
        )


def header_digest(header: dict[str, Any]) -> str:
    """sha256 of the header's content without its checksums, independent of indentation and key order."""
    content = {key: value for key, value in header.items() if key != "sha256"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
