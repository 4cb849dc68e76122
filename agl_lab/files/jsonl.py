"""JSON-lines files that runs write (``metrics.jsonl``, ``timings.jsonl``, verl's file backend): every line, or an
error that says which one.

A run appends one line per step and flushes it, so a run that is killed mid-write, or a disk that fills up, can
leave its **last** line torn: cut short, without its newline. One torn line must not cost the steps before it, so
:func:`read_jsonl_lines` leaves that line out and warns (:class:`DamagedFileWarning`, counting it). Any *other* line
that is not a JSON object cannot come from such a stop: the file was damaged or written by something else, and
guessing which lines to trust would put wrong numbers in a table, so it is refused with the file, the line number
and what was expected. Files that hold nothing usable (empty, binary, not UTF-8) are errors that name the file; a
UTF-8 byte-order mark (written by some Windows tools) is accepted.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

__all__ = ["DamagedFileWarning", "read_jsonl", "read_jsonl_lines", "read_text_file"]


class DamagedFileWarning(UserWarning):
    """A file was read in part: its torn last line (or a W&B run's damaged records) left out, everything else kept."""


def read_text_file(path: str | Path, *, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (a leading byte-order mark dropped); a binary file or one that is not UTF-8 is a
    ValueError naming it."""
    path = Path(path)
    data = path.read_bytes()
    if b"\x00" in data:
        at = data.index(b"\x00")
        raise ValueError(f"{path} is not a text {what}: binary data at byte {at}; is it the right file?")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not a UTF-8 text {what} (byte {exc.start}); is it the right file?") from exc


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, one per line (:func:`read_jsonl_lines` without the line numbers)."""
    return [row for _, row in read_jsonl_lines(path)]


def read_jsonl_lines(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every line of a JSON-lines file; blank lines are skipped, a torn last line is
    left out with a warning, any other line that is not a JSON object is a ValueError naming the file and the line."""
    path = Path(path)
    text = read_text_file(path, what="JSON-lines file")
    if not text.strip():
        raise ValueError(f"{path} is empty: no line was written yet (a run writes one per finished step)")
    *complete, tail = text.split("\n")  # tail: what follows the last newline, "" when the file ends with one
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        row = _object(line)
        if row is None:
            raise ValueError(
                f"{path}, line {number}: expected a JSON object ({{...}}, one per line), got {_start(line)}: the file "
                "is damaged or not a JSON-lines file (only a torn last line is left out); nothing was read"
            )
        rows.append((number, row))
    if tail.strip():
        row = _object(tail)
        if row is not None:  # a last line written without its newline, but whole
            rows.append((len(complete) + 1, row))
        else:
            warnings.warn(
                f"{path}: left out 1 torn line: its last line ({len(complete) + 1}) is cut short (its writer was "
                f"killed or the disk filled); kept the {len(rows)} complete line(s)",
                DamagedFileWarning,
                stacklevel=3,
            )
    if not rows:
        raise ValueError(f"{path} holds no JSON object on any line: is it a JSON-lines file?")
    return rows


def _object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _start(line: str) -> str:
    return repr(line if len(line) <= 40 else line[:37] + "...")
