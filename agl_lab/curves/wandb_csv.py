"""A CSV exported from the W&B UI, read cell by cell: every row has the header's fields, or the file is refused.

W&B's chart and run-history exports hold a ``Step`` column and one column per ``<run> - <metric>`` (``__MIN``/``__MAX``
band columns beside them), or plain metric columns for one run. :func:`csv_steps` reads them with Python's ``csv``
module rather than letting a parser fill gaps: a **ragged** row (more or fewer fields than the header: a file cut,
edited or concatenated) would shift values into the wrong columns, so it is refused with the file, the line and
the counts; a cell that is not a number is refused the same way (an empty cell is a step the run did not log). A file
that does not end with a newline may be cut in the middle of its last number (``0.`` of ``0.75``), which would read
as a whole, wrong number: that last line is left out with a :class:`~agl_lab.files.jsonl.DamagedFileWarning` (add the
newline if the file is complete). A header without rows warns and reads as no steps. Steps are checked by
:mod:`agl_lab.curves.history`, which every reader shares.
"""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

from agl_lab.files.jsonl import DamagedFileWarning, read_text_file

__all__ = ["STEP_COLUMNS", "csv_steps"]

STEP_COLUMNS = ("step", "_step", "global_step")  # a W&B export's step column, in any case
_WANDB_INTERNAL = re.compile(r"^_(step|runtime|timestamp|wandb)")


def csv_steps(path: Path) -> Iterator[tuple[str, str, object, dict[str, float]]]:
    """``(where, run, step, {metric: value})`` per data row and run, ``where`` = ``"<path>, line N"``; the step as
    written (the caller checks it). Raises ValueError naming the file and line for anything it cannot read whole."""
    text = read_text_file(path, what="CSV file")
    if not text.strip():
        raise ValueError(f"{path} is empty: export the run history as CSV from the W&B UI")
    lines = text.split("\n")
    if not text.endswith("\n") and len(lines) > 1:
        warnings.warn(
            f"{path}: left out 1 torn line: its last line ({len(lines)}) has no end of line, so it may be cut in the "
            "middle of a number; add a newline at the end if the file is complete",
            DamagedFileWarning,
            stacklevel=4,
        )
        text = "\n".join(lines[:-1]) + "\n"
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = next(reader)
    except csv.Error as exc:
        raise ValueError(f"{path} is not a readable CSV: {exc}") from exc
    step = next((i for i, name in enumerate(header) if name.strip().lower() in STEP_COLUMNS), None)
    if step is None:
        raise ValueError(f"{path} has no Step column; export the chart or run history as CSV from the W&B UI")
    columns = {
        i: name.rpartition(" - ")
        for i, name in enumerate(header)
        if i != step and not name.endswith(("__MIN", "__MAX")) and not _WANDB_INTERNAL.match(name)
    }
    if not columns:
        raise ValueError(f"{path} has no metric columns")
    rows = 0
    try:
        for fields in reader:
            where = f"{path}, line {reader.line_num}"
            if not any(field.strip() for field in fields):
                continue
            if len(fields) != len(header):
                raise ValueError(
                    f"{where}: expected {len(header)} fields (the header's), got {len(fields)}: the file is damaged "
                    "(a row cut, edited or joined) and its values would land in the wrong columns; nothing was read"
                )
            rows += 1
            by_run: dict[str, dict[str, float]] = {}
            for i, (run, _, metric) in columns.items():
                cell = fields[i].strip()
                if cell:
                    by_run.setdefault(run or path.stem, {})[metric] = _number(cell, where=where, column=header[i])
            for run, values in by_run.items():
                yield where, run, fields[step].strip(), values
    except csv.Error as exc:
        raise ValueError(f"{path}, line {reader.line_num}: not a readable CSV row ({exc})") from exc
    if rows == 0:
        warnings.warn(f"{path} holds a header but no rows: no step was exported", UserWarning, stacklevel=4)


def _number(cell: str, *, where: str, column: str) -> float:
    try:
        return float(cell)  # "nan", "inf" and "-inf" included: history.py keeps them and says so
    except ValueError:
        raise ValueError(
            f"{where}, column {column!r}: expected a number (or an empty cell for a step not logged), got {cell!r}"
        ) from None
