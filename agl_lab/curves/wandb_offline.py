"""Read an offline W&B run (``wandb/offline-run-*/run-*.wandb``) without a server.

wandb has no public reader for offline runs (``wandb.Api`` needs the server), and since 0.31 the binary run
file is the only record of a run's history, config and summary. Its framing is LevelDB's log format:

* a 7-byte file header: ``:W&B``, the magic 0xBEE1 (little-endian) and a version byte (0);
* 32 KiB blocks; each record starts with a 7-byte header — crc32 of (type byte + payload), payload
  length (uint16, little-endian), type (1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST) — and a record that does
  not fit in its block continues in the next one; a block tail shorter than a header is zero padding;
* each assembled payload is a ``wandb.proto.wandb_internal_pb2.Record``: ``run`` (id, project, name,
  config), ``config`` updates, ``history`` (items with ``key``/``nested_key`` and ``value_json``),
  ``summary`` updates and, once the run finished, ``exit``.

This is a private format, which is why ``wandb`` is pinned; tests log real offline runs and read them back.
A record whose checksum or type is wrong (a torn write, a full disk) is skipped as LevelDB's reader does: the rest
of its block is passed over, every record that checks out is kept, and ``OfflineRun.damaged`` lists where.
A run is complete only when its ``exit`` record is present. ``wandb.finish()`` can return before wandb's
service has written it, so whoever reads a run right after finishing it waits with :func:`wait_for_exit`.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["OfflineRun", "find_offline_runs", "read_offline_run", "wait_for_exit"]

_MAGIC = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_BLOCK = 32 * 1024
_HEADER = struct.Struct("<IHB")  # crc32, length, type
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """What an offline run file holds: identity, config, per-step history, summary, and whether it finished."""

    path: Path
    run_id: str = ""
    project: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per logged step, with "_step"
    summary: dict[str, Any] = field(default_factory=dict)
    complete: bool = False
    exit_code: int | None = None
    damaged: list[int] = field(default_factory=list)  # byte offsets of records left out (bad checksum or type)


def find_offline_runs(root: str | Path) -> list[Path]:
    """Every ``run-*.wandb`` file below ``root`` (a project dir, a ``wandb/`` dir or one run dir), oldest first."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no such W&B directory: {root}")
    if root.is_file():
        return [root]
    return sorted(root.rglob("run-*.wandb"), key=lambda p: p.parent.name)


def read_offline_run(path: str | Path) -> OfflineRun:
    """Parse one offline run (its ``.wandb`` file or its ``offline-run-*`` directory)."""
    from wandb.proto import wandb_internal_pb2  # heavy import, only when a run is read

    file = _run_file(Path(path))
    run = OfflineRun(path=file)
    for payload in _payloads(file, run.damaged):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except Exception as exc:  # protobuf's DecodeError
            raise ValueError(f"{file}: a record is not a W&B Record ({exc}); is this file from wandb 0.31?") from exc
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.project, run.name = record.run.run_id, record.run.project, record.run.display_name
            _update(run.config, record.run.config.update)
        elif kind == "config":
            _update(run.config, record.config.update)
            for item in record.config.remove:
                run.config.pop(_key(item), None)
        elif kind == "history":
            row = {_key(item): json.loads(item.value_json) for item in record.history.item}
            row.setdefault("_step", record.history.step.num)
            run.history.append(row)
        elif kind == "summary":
            _update(run.summary, record.summary.update)
        elif kind == "exit":
            run.complete, run.exit_code = True, record.exit.exit_code
    run.config.pop("_wandb", None)
    return run


def wait_for_exit(path: str | Path, *, timeout_s: float = 10.0, poll_s: float = 0.05) -> OfflineRun:
    """Read the run at ``path`` until it has its exit record or ``timeout_s`` passed; returns the last read.

    Check ``complete`` on the result: False means the run has not finished (or its writer is gone).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        run = read_offline_run(path)
        if run.complete or time.monotonic() >= deadline:
            return run
        time.sleep(poll_s)


def _run_file(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"no such W&B run: {path}")
    if path.is_dir():
        files = sorted(path.glob("run-*.wandb"))
        if not files:
            raise ValueError(f"{path} holds no run-*.wandb file: point at a wandb/offline-run-* directory")
        return files[0]
    return path


def _payloads(file: Path, damaged: list[int]):
    """Yield each record's payload, reassembling records split across 32 KiB blocks and checking every crc.

    A record with a bad crc or an unknown type is appended to ``damaged`` and skipped: by its length when that stays
    in its block and the record after it checks out, else by the rest of its block (LevelDB's reader resynchronizes
    there: a record never starts inside another one's bytes, so the next block is the next place one surely starts).
    """
    data = file.read_bytes()
    if not data:
        raise ValueError(f"{file} is empty: the W&B run never wrote to it")
    if not data.startswith(_MAGIC):
        raise ValueError(f"{file} is not a W&B run file (no ':W&B' header): offline runs end in .wandb")
    pos, pending, trusted_length = len(_MAGIC), None, True
    while pos + _HEADER.size <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _HEADER.size:  # zero padding at a block's end
            pos += room
            continue
        crc, length, kind = _HEADER.unpack_from(data, pos)
        if crc == 0 and length == 0 and kind == 0:  # preallocated tail of a run still being written
            break
        start, end = pos + _HEADER.size, pos + _HEADER.size + length
        if end > len(data):
            break  # the last record is still being written: read what is complete
        payload = data[start:end]
        if zlib.crc32(bytes([kind]) + payload) != crc or kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            damaged.append(pos)
            block_end = pos + room
            # skip by the record's own length once; if that lands on another bad record, skip to the next block
            pos, pending = (end if trusted_length and end <= block_end else block_end), None
            trusted_length = False
            continue
        pos, trusted_length = end, True
        if kind == _FULL:
            yield payload
        elif kind == _FIRST:
            pending = payload
        elif pending is not None:  # a MIDDLE or LAST whose FIRST was lost is dropped with it
            pending += payload
            if kind == _LAST:
                yield pending
                pending = None


def _key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


def _update(target: dict[str, Any], items: Any) -> None:
    for item in items:
        target[_key(item)] = json.loads(item.value_json)
