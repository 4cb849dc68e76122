"""verl's rollout dump (``trainer.rollout_data_dir``) read as the run table, one ``<global_step>.jsonl`` at a time.

verl's trainers write each step's rows after the update (``RayPPOTrainer._write_generations``, the same in the v1
trainer): ``input`` and ``output`` (decoded text), ``gts``, ``score`` (the row's summed ``token_level_scores``),
``step``, every reward-extra field of the batch's length, ``request_id`` when the batch has one, and in the v1 trainer
``uid`` = the row's key ``{uid}_{session}_{index}`` (``trainer_base._log_rollout_data``). Read here:

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
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from agl_lab.core.keys import ROLLOUT_DATA_DIR
from agl_lab.files.batch_io import BatchFileError
from agl_lab.files.run_rows import tidy

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["read_verl_step", "word_tokenizer", "write_verl_dump"]

_V1_KEY = re.compile(r"^(.*)_(\d+)_(\d+)$")  # verl v1's row key: {uid}_{session}_{index}


def read_verl_step(
    file: Path, *, step: int, trajectory_column: str | None = None, group_column: str | None = None
) -> pd.DataFrame:
    """One ``<step>.jsonl`` of verl's rollout dump as the tidy table (module docstring)."""
    try:
        dump = pd.read_json(file, lines=True, dtype=False, convert_dates=False) if file.stat().st_size else None
    except ValueError as exc:
        raise BatchFileError(f"{file} is not JSON lines ({exc}): is it verl's rollout dump?") from exc
    if dump is None or dump.empty:
        return tidy(step=step, group=[], trajectory=[], response_tokens=[], reward=[], advantage=[], kept=[])
    absent = [field for field in ("input", "output", "score") if field not in dump.columns]
    if absent:
        raise BatchFileError(
            f"{file} has no {' or '.join(map(repr, absent))} field: verl's rollout dump ({ROLLOUT_DATA_DIR}) writes "
            f"them on every row; this file has {sorted(dump.columns)}"
        )
    for name, column in (("trajectory_column", trajectory_column), ("group_column", group_column)):
        if column is not None and column not in dump.columns:
            raise ValueError(f"{name}={column!r} is not a field of {file}: it has {sorted(dump.columns)}")
    v1 = _v1_keys(dump["uid"]) if "uid" in dump.columns else None
    trajectory, unnamed = _sessions(file, dump, trajectory_column or "request_id", v1)
    if group_column:
        group = dump[group_column].to_numpy()
    elif v1 is not None:
        group = v1[0].to_numpy()
    elif "uid" in dump.columns:
        group = dump["uid"].to_numpy()
    else:  # the prompt of the trajectory's first row
        group = dump["input"].groupby(pd.Series(trajectory), sort=False).transform("first").to_numpy()
    row = v1[2].astype(np.int64).to_numpy() if v1 is not None and not trajectory_column else None
    steps = dump["step"] if "step" in dump.columns else step
    table = tidy(
        step=steps,
        group=group,
        trajectory=trajectory,
        row=row,
        response_tokens=np.full(len(dump), np.nan),
        reward=dump["score"].to_numpy(dtype=np.float64),
        advantage=np.full(len(dump), np.nan),
        kept=True,
    )
    table.attrs["unnamed_rows"] = unnamed
    return table


def _sessions(file: Path, dump: pd.DataFrame, column: str, v1: pd.DataFrame | None) -> tuple[np.ndarray, int]:
    """(rows,) each row's session (module docstring) and how many rows named none: ``column``'s value, else verl v1's
    ``{uid}_{session}``, else the row's file and line (``3.jsonl:17``), a session of its own; refused where a row
    without a named session continues another's prompt and response."""
    named = dump[column].to_numpy(dtype=object) if column in dump.columns else np.full(len(dump), None, dtype=object)
    if v1 is not None:
        named = np.where(pd.isna(named), (v1[0] + "_" + v1[1]).to_numpy(dtype=object), named)
    unnamed = np.flatnonzero(pd.isna(named))
    if len(unnamed):
        named = named.copy()
        named[unnamed] = [f"{file.name}:{line + 1}" for line in unnamed]
        turn = _continued(dump["input"].tolist(), dump["output"].tolist(), np.isin(np.arange(len(dump)), unnamed))
        if turn is not None:
            rows = "its rows carry" if len(unnamed) == len(dump) else f"{len(unnamed)} of its rows carry"
            raise BatchFileError(
                f"{file}: line {turn[1] + 1}'s prompt continues line {turn[0] + 1}'s prompt and response (turns of "
                f"one multi-output session), but {rows} no session id (no {column}, no uid in verl v1's "
                "{uid}_{session}_{index} form): dump the batch's request_id (verl writes it when the batch has one) "
                "or name the field that holds the session (--trajectory-column, read_run(..., trajectory_column=...))"
            )
    return named, len(unnamed)


def _continued(prompts: list[Any], responses: list[Any], unnamed: np.ndarray) -> tuple[int, int] | None:
    """A pair ``(i, j)`` where row ``j``'s prompt begins with row ``i``'s prompt and response (whitespace aside: the
    decoded texts join as the token ids did) and one of the two names no session, or None. Sorted once: the prompts
    that begin with a text follow it in sorted order, so one bisection per row finds one."""
    squeezed = ["".join(str(text).split()) for text in prompts]
    keyed = sorted((text, row) for row, text in enumerate(squeezed))
    keys = [key for key, _ in keyed]
    for i, (prompt, response) in enumerate(zip(squeezed, responses, strict=True)):
        turn = prompt + "".join(str(response or "").split())
        if len(turn) == len(prompt):
            continue  # no response: nothing to continue
        at = bisect.bisect_left(keys, turn)
        if at < len(keys) and keys[at].startswith(turn) and (unnamed[i] or unnamed[keyed[at][1]]):
            return i, keyed[at][1]
    return None


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
