"""JSON-lines files that runs write (``metrics.jsonl``, ``timings.jsonl``, verl's file backend): every complete line.

A run appends one line per step and flushes it, so a run that is killed mid-write, or a disk that fills up, can
leave its last line torn: cut short, without its newline. One torn line must not cost the steps before it, so
:func:`read_jsonl` keeps every complete line and warns (:class:`DamagedFileWarning`) about a torn tail, and about any
other line that is not a JSON object, naming the file and the line. Files that hold nothing usable (empty, binary,
not one JSON object in them) are errors that name the file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

__all__ = ["DamagedFileWarning", "read_jsonl", "read_text_file"]


class DamagedFileWarning(UserWarning):
    """A file was read in part: a torn last line or damaged records were left out, everything else kept."""


def read_text_file(path: str | Path, *, what: str = "file") -> str:
    """The UTF-8 text of ``path``; a binary file or one that is not UTF-8 is a ValueError naming it."""
    path = Path(path)
    data = path.read_bytes()
    if b"\x00" in data:
        at = data.index(b"\x00")
        raise ValueError(f"{path} is not a text {what}: binary data at byte {at}; is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not a UTF-8 text {what} (byte {exc.start}); is it the right file?") from exc


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one per complete line; damaged lines are left out with a warning."""
    path = Path(path)
    text = read_text_file(path, what="JSON-lines file")
    if not text.strip():
        raise ValueError(f"{path} is empty: no line was written yet (a run writes one per finished step)")
    *complete, tail = text.split("\n")  # tail: what follows the last newline, "" when the file ends with one
    rows: list[dict[str, Any]] = []
    damaged: list[int] = []
    for number, line in enumerate(complete, 1):
        if line.strip():
            row = _object(line)
            (rows.append(row) if row is not None else damaged.append(number))
    torn = False
    if tail.strip():
        row = _object(tail)
        if row is not None:  # a last line written without its newline, but whole
            rows.append(row)
        else:
            torn = True
    if not rows:
        raise ValueError(f"{path} holds no JSON object on any line: is it a JSON-lines file?")
    if damaged or torn:
        parts = [f"lines {_numbers(damaged)} are not JSON objects"] if damaged else []
        if torn:
            parts.append(
                f"its last line ({len(complete) + 1}) is torn (cut short: its writer was killed or the disk filled)"
            )
        warnings.warn(
            f"{path}: {' and '.join(parts)}; kept the {len(rows)} complete line(s)", DamagedFileWarning, stacklevel=3
        )
    return rows


def _object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _numbers(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:10]))
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")
