"""``agl_lab.read_run``: a training run's rows, from whatever the run left on disk, one step at a time.

Sources (:func:`run_source` tells which a path is):

* ``verl_dump``: a verl ``trainer.rollout_data_dir``, one ``<global_step>.jsonl`` per step as verl's trainers write
  them (:mod:`agl_lab.files.verl_dump`: which field gives the trajectory and the group; token counts and advantages
  NaN, every row ``kept``);
* ``step_tables``: a folder of ``<step>.parquet`` or ``<step>.csv`` files with :data:`RUN_COLUMNS` (an Agent Lightning
  run recorded by the lab; a ``recording.json`` beside them is kept in ``attrs["recording"]``); ``table``: one
  CSV or Parquet file with those columns (any framework's rows: ``docs/reading-runs.md`` maps slime's, SkyRL's,
  AReaL's and xtuner's);
* ``lab_batch``: a folder :func:`agl_lab.files.batch_io.save_batch` wrote (read with numpy); ``verl_pickle``: a
  ``DataProto.save_to_disk`` file, unpickled only with ``trusted=True`` (unpickling runs its author's code).

Every step then goes through :mod:`agl_lab.files.run_sessions` (each session in one group, and one outcome per
session: ``outcome=``); a step file whose rows name another step is refused. A folder of steps streams:
:func:`iter_run_steps` reads one step at a time, so memory stays bounded by one step; ``steps=`` picks which
(:func:`parse_steps`). Notebook: ``notebooks/06_weighting_proposals.ipynb``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agl_lab.core.keys import ROLLOUT_DATA_DIR
from agl_lab.files.batch_io import META_FILE, TENSORS_FILE, BatchFileError
from agl_lab.files.outcome_rules import DEFAULT_OUTCOME, check_outcome
from agl_lab.files.run_rows import RUN_COLUMNS, read_safe_batch, rows_from_batch, tidy
from agl_lab.files.run_sessions import session_outcomes, total_sessions
from agl_lab.files.verl_dump import read_verl_step

__all__ = ["iter_run_steps", "parse_steps", "read_run", "run_source"]

_STEP_FILE = re.compile(r"^(\d+)\.(jsonl|parquet|csv)$")
RECORDING_FILE = "recording.json"


def read_run(
    path: str | os.PathLike,
    *,
    steps: Any = None,
    trajectory_column: str | None = None,
    group_column: str | None = None,
    trusted: bool = False,
    outcome: str = DEFAULT_OUTCOME,
) -> pd.DataFrame:
    """One tidy line per training row (:data:`RUN_COLUMNS`, :mod:`agl_lab.files.run_rows`) of the run at ``path``.

    ``steps``: which steps (:func:`parse_steps`; None: all). ``trajectory_column``/``group_column``: the field of a
    verl dump holding each row's trajectory or GRPO group (module docstring). ``trusted``: unpickle a verl
    ``DataProto.save_to_disk`` file. ``outcome``: how a session's outcome is read from its rows' scores where they
    differ (:data:`~agl_lab.files.outcome_rules.OUTCOMES`; every row's ``reward`` is then its session's). ``attrs``:
    ``source`` (:func:`run_source`), ``score_dtype``, ``steps``, ``sessions`` (:mod:`agl_lab.files.run_sessions`).
    """
    frames = list(
        iter_run_steps(
            path,
            steps=steps,
            trajectory_column=trajectory_column,
            group_column=group_column,
            trusted=trusted,
            outcome=outcome,
        )
    )
    table = pd.concat([frame for _, frame in frames], ignore_index=True) if frames else tidy_empty()
    table.attrs = {
        **(frames[0][1].attrs if frames else {}),
        "steps": [step for step, _ in frames],
        "sessions": total_sessions(frame.attrs["sessions"] for _, frame in frames),
    }
    return table


def iter_run_steps(
    path: str | os.PathLike,
    *,
    steps: Any = None,
    trajectory_column: str | None = None,
    group_column: str | None = None,
    trusted: bool = False,
    outcome: str = DEFAULT_OUTCOME,
) -> Iterator[tuple[int | None, pd.DataFrame]]:
    """``(step, rows)`` per step, in step order, each read when it is reached (see :func:`read_run`)."""
    check_outcome(outcome)
    for step, frame, where in _steps_as_held(Path(path), steps, trajectory_column, group_column, trusted):
        yield step, session_outcomes(frame, outcome=outcome, where=where)


def _steps_as_held(
    path: Path, steps: Any, trajectory_column: str | None, group_column: str | None, trusted: bool
) -> Iterator[tuple[int | None, pd.DataFrame, str]]:
    """``(step, rows, where)`` per step as the source holds them; ``where`` names the step's file in a refusal."""
    source = run_source(path)
    wanted = parse_steps(steps)
    attrs = {"source": source, "path": str(path)}
    if source in ("verl_dump", "step_tables"):
        files = _step_files(path, steps, wanted)
        recording = path / RECORDING_FILE
        if source == "step_tables" and recording.is_file():
            attrs["recording"] = json.loads(recording.read_text())
        for step, file in files:
            frame = (
                read_verl_step(file, step=step, trajectory_column=trajectory_column, group_column=group_column)
                if file.suffix == ".jsonl"
                else _table(file, default_step=step)
            )
            _check_step(file, step, frame)
            frame.attrs = {**frame.attrs, **attrs}
            yield step, frame, str(file)
        return
    if source == "table":
        table = _table(path, default_step=None)
        for step, frame in table.groupby("step", sort=True, dropna=False):
            step = None if pd.isna(step) else int(step)
            if step is None or wanted(step):
                frame = frame.reset_index(drop=True)
                frame.attrs = {**table.attrs, **attrs}
                yield step, frame, f"{path} (step {step})"
        return
    if source == "lab_batch":
        frame = read_safe_batch(path.parent if path.is_file() else path)
    else:
        from agl_lab.files.batch_io import load_batch

        frame = rows_from_batch(load_batch(path, trusted=trusted))
    step = None if frame["step"].isna().all() else int(frame["step"].iloc[0])
    if steps is not None and (step is None or not wanted(step)):
        raise ValueError(f"steps={steps!r} selects nothing from {path}: it is one batch (step {step})")
    frame.attrs = {**frame.attrs, **attrs}
    yield step, frame, str(path)


def run_source(path: str | os.PathLike) -> str:
    """Which kind of run or batch ``path`` is (module docstring); a path that is none of them is a BatchFileError."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no batch or run at {path}: give a run (verl's {ROLLOUT_DATA_DIR}, <step>.parquet/.csv tables, an "
            "agl_lab run directory), a batch (save_batch's folder; a verl dump with trusted=True) or a table"
        )
    if path.is_dir():
        kinds = {m.group(2) for p in path.iterdir() if (m := _STEP_FILE.match(p.name))}
        if kinds == {"jsonl"}:
            return "verl_dump"
        if kinds and kinds <= {"parquet", "csv"}:
            return "step_tables"
        if kinds:
            raise BatchFileError(f"{path} mixes step files of kinds {sorted(kinds)}: keep one kind per folder")
        if (path / META_FILE).exists():
            return "lab_batch"
        if (path / "metrics.jsonl").exists():
            raise BatchFileError(
                f"{path} is an agl_lab run directory: it logged each step's diagnostics (metrics.jsonl), not its rows; "
                f"agl_lab.weighting_diagnostics({str(path)!r}) reads those"
            )
        raise BatchFileError(
            f"{path} is neither a batch (no {META_FILE}: save one with agl_lab.files.batch_io.save_batch) nor a run "
            f"(no <step>.jsonl files as verl's {ROLLOUT_DATA_DIR} holds, no <step>.parquet or <step>.csv tables, "
            "no metrics.jsonl as agl-lab train writes)"
        )
    if path.name in (META_FILE, TENSORS_FILE):
        return "lab_batch"
    if path.suffix in (".parquet", ".csv"):
        return "table"
    if path.suffix == ".jsonl":
        return "verl_dump"
    return "verl_pickle"


def parse_steps(steps: Any) -> Callable[[int], bool]:
    """Which steps to read: None (all), an int, ``"A-B"`` (inclusive; ``"A-"``, ``"-B"``, ``"1,3,5-7"``), a list or
    set of ints, a ``range``, a ``slice`` (half-open, as Python's), or a pair ``(A, B)`` (a tuple: A to B inclusive)."""
    if steps is None:
        return lambda step: True
    if isinstance(steps, bool) or isinstance(steps, float):
        raise ValueError(f"steps must be steps (e.g. '1-100', [1, 5], (1, 100)), got {steps!r}")
    if isinstance(steps, int | np.integer):
        return lambda step: step == int(steps)
    if isinstance(steps, range):
        return lambda step: step in steps
    if isinstance(steps, slice):
        start, stop, every = steps.start, steps.stop, steps.step or 1
        return lambda step: (
            (start is None or step >= start) and (stop is None or step < stop) and (step - (start or 0)) % every == 0
        )
    if isinstance(steps, tuple) and len(steps) == 2 and all(isinstance(s, int | np.integer | None) for s in steps):
        return _inclusive(steps[0], steps[1])
    if isinstance(steps, str):
        tests = [_range_text(part.strip(), steps) for part in steps.split(",") if part.strip()]
        if not tests:
            raise ValueError(f"steps={steps!r} names no step: write e.g. '1-100' or '3,5,8-10'")
        return lambda step: any(test(step) for test in tests)
    if isinstance(steps, Iterable):
        chosen = set()
        for value in steps:
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"steps must list integer steps, got {value!r} in {steps!r}")
            chosen.add(int(value))
        return lambda step: step in chosen
    raise ValueError(f"steps must be '1-100', a list of steps, a pair (A, B) or a slice, got {steps!r}")


def tidy_empty() -> pd.DataFrame:
    return tidy(step=[], group=[], trajectory=[], response_tokens=[], reward=[], advantage=[], kept=[])


def _inclusive(first: int | None, last: int | None) -> Callable[[int], bool]:
    return lambda step: (first is None or step >= first) and (last is None or step <= last)


def _range_text(part: str, whole: str) -> Callable[[int], bool]:
    match = re.fullmatch(r"(\d*)\s*-\s*(\d*)", part)
    if part.isdigit():
        return _inclusive(int(part), int(part))
    if match and (match.group(1) or match.group(2)):
        first, last = (int(g) if g else None for g in match.groups())
        return _inclusive(first, last)
    raise ValueError(f"steps={whole!r}: cannot read {part!r}; write a step (5), a range (1-100, 50-, -10) or both")


def _step_files(path: Path, steps: Any, wanted: Callable[[int], bool]) -> list[tuple[int, Path]]:
    files = sorted((int(m.group(1)), p) for p in path.iterdir() if (m := _STEP_FILE.match(p.name)))
    twice = [(step, a.name, b.name) for (step, a), (other, b) in zip(files, files[1:], strict=False) if step == other]
    if twice:
        step, first, second = twice[0]
        raise BatchFileError(f"{path} holds step {step} twice ({first}, {second}): keep one file a step")
    chosen = [(step, file) for step, file in files if wanted(step)]
    if not chosen:
        raise ValueError(
            f"steps={steps!r} selects none of {path}'s steps ({files[0][0]}..{files[-1][0]}, {len(files)} files)"
        )
    return chosen


def _check_step(file: Path, step: int, frame: pd.DataFrame) -> None:
    """Refuse a step file whose rows name another step than its name (verl writes ``{global_steps}.jsonl`` with
    ``step = global_steps`` on every row: a renamed or merged file)."""
    if (frame["step"].to_numpy(dtype=np.int64, na_value=step) == step).all():  # a row naming no step names none other
        return
    other = sorted(int(s) for s in frame["step"].dropna().unique() if int(s) != step)
    if other:
        raise BatchFileError(
            f"{file} is step {step} by its name, but {int((frame['step'] != step).sum())} of its rows say step "
            f"{other[:5]}{' ...' if len(other) > 5 else ''}: a step file holds the rows of the step it is named after "
            "(a renamed or merged file?); name it after its rows' step, or split it by step"
        )


def _table(file: Path, *, default_step: int | None) -> pd.DataFrame:
    """A CSV or Parquet file with (some of) :data:`RUN_COLUMNS`; absent columns NaN."""
    try:
        table = pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
    except Exception as exc:  # pyarrow and the csv parser raise their own types
        raise BatchFileError(f"{file} could not be read as a table ({type(exc).__name__}: {exc})") from exc
    present = [c for c in RUN_COLUMNS if c in table.columns]
    if not present:
        raise BatchFileError(f"{file} has none of the run columns {RUN_COLUMNS}: it has {list(table.columns)}")
    value = {c: table[c].to_numpy() if c in table.columns else None for c in RUN_COLUMNS}
    n = len(table)
    step = value["step"] if value["step"] is not None else default_step
    frame = tidy(
        step=step,
        group=value["group"],
        trajectory=value["trajectory"],
        row=value["row"],
        response_tokens=_or_nan(value["response_tokens"], n),
        reward=_or_nan(value["reward"], n),
        advantage=_or_nan(value["advantage"], n),
        kept=value["kept"] if value["kept"] is not None else pd.array([pd.NA] * n, dtype="boolean"),
    )
    frame.attrs["score_dtype"] = "float32"  # verl's token_level_scores unless a recording says otherwise
    return frame


def _or_nan(values: Any, n: int) -> np.ndarray:
    return np.full(n, np.nan) if values is None else np.asarray(values, dtype=np.float64)
