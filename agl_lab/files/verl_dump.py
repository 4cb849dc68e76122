"""verl's rollout dump (``trainer.rollout_data_dir``) read as the run table, one ``<global_step>.jsonl`` at a time.

verl's trainers write each step's rows after the update (``RayPPOTrainer._write_generations``, the same in the v1
trainer): ``input`` and ``output`` (decoded text), ``gts``, ``score`` (the row's summed ``token_level_scores``),
``step``, every reward-extra field of the batch's length, ``request_id`` when the batch has one, and in the v1 trainer
``uid`` = the row's key ``{uid}_{session}_{index}`` (``trainer_base._log_rollout_data``). Read here:

* the lines: each parsed once (msgspec; Python's json where a file holds what strict JSON lacks, the ``NaN`` and
  ``Infinity`` that ``json.dumps`` writes for such scores), blank lines skipped; a line that is not one JSON object
  (cut short, split by a newline, a list) refuses the file, naming the line. A field some row lacks is None there;
* the trajectory (the session): ``trajectory_column`` when named, else ``request_id``, else the v1 key's
  ``{uid}_{session}``; a row that has none of them is a session of its own, named by its file and line
  (``3.jsonl:17``): verl's own agent loops make one row per sample, ``RayPPOTrainer`` writes ``request_id`` only when
  the batch has one, and beside a loop that sets it one that does not gets None (``AgentLoopWorker._postprocess``
  fills an extra field a loop leaves out). Unless some row's prompt continues another's prompt and response
  (whitespace aside): those are turns of one multi-output session the file does not name, and the file is refused
  saying which lines and how to name the field;
* the group: ``group_column`` when named, else the v1 key's ``{uid}``, else a ``uid`` field (a reward-extra), else the
  prompt text of the trajectory's first row (later rows of a multi-turn trajectory carry the history in theirs);
* the row: the v1 key's index, else the order of the trajectory's rows in the file;
* ``response_tokens`` and ``advantage``: NaN (the dump keeps neither); ``kept``: every row (it holds the batch the
  step trained); the scores' dtype is not kept either, and is read as verl's float32 (Agent Lightning keeps bf16
  scores, whose GRPO rounds in bf16).

:func:`write_verl_dump` writes such a file from verl rows with verl's own code (the shipped
``data/verl_rollout_dump``, the tests and the benchmark use it): no reimplementation of the format to drift from it.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd

from agl_lab.core.keys import ROLLOUT_DATA_DIR
from agl_lab.files.batch_io import BatchFileError
from agl_lab.files.run_rows import tidy

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["read_verl_step", "word_tokenizer", "write_verl_dump"]

_V1_KEY = re.compile(r"^(.*)_(\d+)_(\d+)$")  # verl v1's row key: {uid}_{session}_{index}
_DECODER = msgspec.json.Decoder()


def read_verl_step(
    file: Path, *, step: int, trajectory_column: str | None = None, group_column: str | None = None
) -> pd.DataFrame:
    """One ``<step>.jsonl`` of verl's rollout dump as the tidy table (module docstring)."""
    rows = _dump_rows(file)
    fields = set().union(*rows)  # a field any row has, as a table's columns (a row without it: None)
    if not fields:
        return tidy(step=step, group=[], trajectory=[], response_tokens=[], reward=[], advantage=[], kept=[])
    absent = [field for field in ("input", "output", "score") if field not in fields]
    if absent:
        raise BatchFileError(
            f"{file} has no {' or '.join(map(repr, absent))} field: verl's rollout dump ({ROLLOUT_DATA_DIR}) writes "
            f"them on every row; this file has {sorted(fields)}"
        )
    for name, column in (("trajectory_column", trajectory_column), ("group_column", group_column)):
        if column is not None and column not in fields:
            raise ValueError(f"{name}={column!r} is not a field of {file}: it has {sorted(fields)}")
    v1 = _v1_keys(pd.Series(_field(rows, "uid"))) if "uid" in fields else None
    trajectory, unnamed = _sessions(file, rows, fields, trajectory_column or "request_id", v1)
    if group_column:
        group = _field(rows, group_column)
    elif v1 is not None:
        group = v1[0].to_numpy()
    elif "uid" in fields:
        group = _field(rows, "uid")
    else:  # the prompt of the trajectory's first row (the first that has one)
        group = _first_prompts(_field(rows, "input"), trajectory)
    row = v1[2].astype(np.int64).to_numpy() if v1 is not None and not trajectory_column else None
    table = tidy(
        step=_steps(rows, step) if "step" in fields else step,
        group=group,
        trajectory=trajectory,
        row=row,
        response_tokens=np.full(len(rows), np.nan),
        reward=np.array(list(map(dict.get, rows, itertools.repeat("score"))), dtype=np.float64),  # None: NaN
        advantage=np.full(len(rows), np.nan),
        kept=True,
    )
    table.attrs["unnamed_rows"] = unnamed
    return table


def _dump_rows(file: Path) -> list[dict[str, Any]]:
    """The JSON object of each non-blank line of ``file``, each line parsed once. msgspec (a dependency) parses the
    strict JSON that verl's ``json.dumps`` writes for finite scores; a file it refuses is parsed line by line with
    Python's json, which also reads the ``NaN`` and ``Infinity`` that ``json.dumps`` writes for such scores, and whose
    refusal names the line."""
    data = file.read_bytes()
    try:
        rows = _DECODER.decode_lines(data)
    except msgspec.DecodeError:
        rows = None
    if rows is not None and set(map(type, rows)) <= {dict}:
        return rows
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BatchFileError(f"{file} is not JSON lines ({exc}): is it verl's rollout dump?") from exc
    rows = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BatchFileError(
                f"{file} is not JSON lines (line {number}: {exc}): is it verl's rollout dump?"
            ) from exc
        if not isinstance(row, dict):
            raise BatchFileError(
                f"{file} is not JSON lines (line {number} is {type(row).__name__}, not an object): is it verl's "
                "rollout dump?"
            )
        rows.append(row)
    return rows


def _field(rows: list[dict[str, Any]], name: str) -> np.ndarray:
    """(rows,) object: each row's ``name`` as parsed (None where the row lacks it); lists and tuples stay whole."""
    return np.fromiter(map(dict.get, rows, itertools.repeat(name)), dtype=object, count=len(rows))


def _steps(rows: list[dict[str, Any]], step: int) -> Any:
    """Each row's ``step``: the file's ``step`` when every row says it (verl writes ``global_steps`` on each)."""
    said = list(map(dict.get, rows, itertools.repeat("step")))
    return step if all(type(value) is int and value == step for value in said) else said


def _first_prompts(prompts: np.ndarray, trajectory: np.ndarray) -> np.ndarray:
    """(rows,) the prompt of each row's trajectory's first row that has one (pandas' ``first``: nulls skipped)."""
    codes, _ = pd.factorize(trajectory)  # (rows,) every row names its trajectory here (_sessions)
    if not pd.isna(prompts).any():
        seen = np.maximum.accumulate(codes)  # a trajectory's first row: the first whose code exceeds those before
        first_rows = np.flatnonzero(np.r_[True, seen[1:] > seen[:-1]])  # (trajectories,)
        return prompts[first_rows[codes]]
    return pd.Series(prompts).groupby(codes, sort=False).transform("first").to_numpy()


def _sessions(
    file: Path, rows: list[dict[str, Any]], fields: set[str], column: str, v1: pd.DataFrame | None
) -> tuple[np.ndarray, int]:
    """(rows,) each row's session (module docstring) and how many rows named none: ``column``'s value, else verl v1's
    ``{uid}_{session}``, else the row's file and line (``3.jsonl:17``), a session of its own; refused where a row
    without a named session continues another's prompt and response."""
    named = _field(rows, column) if column in fields else np.full(len(rows), None, dtype=object)
    if v1 is not None:
        named = np.where(pd.isna(named), (v1[0] + "_" + v1[1]).to_numpy(dtype=object), named)
    unnamed = np.flatnonzero(pd.isna(named))
    if len(unnamed):
        named = named.copy()
        named[unnamed] = [f"{file.name}:{line + 1}" for line in unnamed]
        turn = _continued(
            [_text(row.get("input")) for row in rows],
            [_text(row.get("output")) for row in rows],
            np.isin(np.arange(len(rows)), unnamed),
        )
        if turn is not None:
            said = "its rows carry" if len(unnamed) == len(rows) else f"{len(unnamed)} of its rows carry"
            raise BatchFileError(
                f"{file}: line {turn[1] + 1}'s prompt continues line {turn[0] + 1}'s prompt and response (turns of "
                f"one multi-output session), but {said} no session id (no {column}, no uid in verl v1's "
                "{uid}_{session}_{index} form): dump the batch's request_id (verl writes it when the batch has one) "
                "or name the field that holds the session (--trajectory-column, read_run(..., trajectory_column=...))"
            )
    return named, len(unnamed)


def _text(value: Any) -> Any:
    """A missing text as pandas held it (NaN), so a row without a prompt compares as it always did."""
    return math.nan if value is None else value


def _continued(prompts: list[Any], responses: list[Any], unnamed: np.ndarray) -> tuple[int, int] | None:
    """A pair ``(i, j)`` where row ``j``'s prompt begins with row ``i``'s prompt and response (whitespace aside: the
    decoded texts join as the token ids did) and one of the two names no session, or None. Sorted once: the prompts
    that begin with a text follow it in sorted order, so one bisection per row finds one. A response is squeezed only
    as far as the longest prompt reaches (a longer turn begins no prompt): a whole sample's response, as verl's own
    agent loops write it, can be a hundred times its prompt."""
    squeezed = ["".join(str(text).split()) for text in prompts]
    keyed = sorted((text, row) for row, text in enumerate(squeezed))
    keys = [key for key, _ in keyed]
    longest = max(map(len, keys), default=0)
    for i, (prompt, response) in enumerate(zip(squeezed, responses, strict=True)):
        said = _squeezed_within(str(response or ""), longest - len(prompt))
        if not said:
            continue  # no response: nothing to continue; None: a turn longer than every prompt
        turn = prompt + said
        at = bisect.bisect_left(keys, turn)
        if at < len(keys) and keys[at].startswith(turn) and (unnamed[i] or unnamed[keyed[at][1]]):
            return i, keyed[at][1]
    return None


def _squeezed_within(text: str, most: int) -> str | None:
    """``text`` without whitespace, or None where that is longer than ``most`` characters: squeezed a growing prefix
    at a time (the squeezed prefix of a text is a prefix of the squeezed text)."""
    if most < 0:
        return None
    reach = most + 1
    while True:
        said = "".join(text[:reach].split())
        if len(said) > most:
            return None
        if reach >= len(text):
            return said
        reach *= 2


def _v1_keys(uid: pd.Series) -> pd.DataFrame | None:
    """verl v1's per-row keys split into uid, session and index, or None when ``uid`` is a group id instead."""
    parts = uid.astype(str).str.extract(_V1_KEY)
    if parts.isna().any().any() or uid.duplicated().any():
        return None
    return parts


def write_verl_dump(
    rows: DataProto,
    folder: str | os.PathLike,
    *,
    step: int,
    request_ids: str | None = "rollout_id_list",
    reward_extra: dict[str, Any] | None = None,
    tokenizer: Any = None,
) -> Path:
    """``rows`` dumped as step ``step`` into ``folder`` by verl's own ``RayPPOTrainer._log_rollout_data`` on a bare
    trainer (no Ray, no workers; only what it reads is set): it decodes prompts and responses, sums
    ``token_level_scores``, and its dump thread writes ``<step>.jsonl`` with ``_write_generations``. Returns the file.

    ``request_ids``: the non-tensor field written as verl's ``request_id`` (a multi-output agent loop's trajectory;
    None: none, as a batch without one); ``reward_extra``: more per-row fields, as a reward function returns them;
    ``tokenizer``: what decodes the token ids (default :func:`word_tokenizer`).
    """
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    if request_ids is not None:
        non_tensors = dict(
            rows.non_tensor_batch, request_id=np.asarray(rows.non_tensor_batch[request_ids], dtype=object)
        )
        rows = DataProto(batch=rows.batch, non_tensor_batch=non_tensors, meta_info=dict(rows.meta_info))
    trainer = object.__new__(RayPPOTrainer)
    vocabulary = int(max(rows.batch["prompts"].max(), rows.batch["responses"].max())) + 1
    trainer.tokenizer = tokenizer if tokenizer is not None else word_tokenizer(vocabulary)
    trainer.global_steps = step
    trainer._init_dump_executor()
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints "Dumped generations to ..."
        trainer._log_rollout_data(rows, dict(reward_extra or {}), {}, str(folder))
        trainer._shutdown_dump_executor()
    return Path(folder) / f"{step}.jsonl"


def word_tokenizer(vocabulary: int) -> Any:
    """A Hugging Face fast tokenizer over ``vocabulary`` ids: id i decodes to the word ``w<i>``, id 0 is padding."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, **{f"w{i}": i for i in range(1, vocabulary)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>")
