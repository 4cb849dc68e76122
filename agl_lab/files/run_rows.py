"""A run's rows as one tidy table: one line per training row, the same columns whatever wrote them.

:data:`RUN_COLUMNS` (``agl_lab.read_run`` returns them; a column its source lacks is NaN, never guessed):

==================  =================================================================================================
``step``            the training step (verl's ``global_steps``); NA for a lone batch that does not say
``group``           the GRPO group (verl's ``uid``; Agent Lightning's ``data_id_list``)
``trajectory``      the rollout the row came from (Agent Lightning's ``rollout_id_list``; verl's ``request_id``)
``row``             the row's place in its trajectory, 0 first, in the order the source holds the rows
``response_tokens`` trainable tokens (the response mask's sum); NaN where the source keeps no tokens
``reward``          the row's reward: the sum of its ``token_level_scores`` (verl's dump: ``score``)
``advantage``       the estimator's advantage per trainable token, before any loss's normalization; NaN if not kept
``kept``            whether the step trained the row (False: marked or dropped by the cap)
==================  =================================================================================================

This module makes the table from a batch's arrays: a verl ``DataProto`` (:func:`rows_from_batch`) or the lab's safe
batch format read with numpy alone (:func:`read_safe_batch`: safetensors parsed here, bf16 included, so reading a
batch file loads neither torch nor verl). ``attrs["score_dtype"]`` keeps the scores' dtype: the advantage is
computed in it (:mod:`agl_lab.lab.grpo_numpy`). The run readers are :mod:`agl_lab.files.run_readers`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from agl_lab.files.batch_header import (
    SAFETENSORS_DTYPES,
    TENSORS_FILE,
    BatchFileError,
    check_stored,
    read_batch_header,
    tensor_specs,
)
from agl_lab.files.batch_io import non_tensor_columns

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["RUN_COLUMNS", "read_safe_batch", "rows_from_arrays", "rows_from_batch", "tidy"]

RUN_COLUMNS = ["step", "group", "trajectory", "row", "response_tokens", "reward", "advantage", "kept"]
# the tensors the table reads (the rest of a batch, token ids above all, is never decoded)
_READ = ("response_mask", "attention_mask", "token_level_scores", "token_level_rewards", "advantages", "is_drop_mask")
_NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4",
                       "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}  # fmt: skip


def rows_from_batch(batch: DataProto, *, step: int | None = None) -> pd.DataFrame:
    """The table of a verl ``DataProto`` (a trained batch, a ``save_to_disk`` dump, the lab's rows)."""
    if batch.batch is None:
        raise BatchFileError("the DataProto holds no tensors: there are no rows to read")
    tensors, dtypes = {}, {}
    for key in _READ:
        if key in batch.batch.keys():
            value = batch.batch[key].detach().cpu()
            dtypes[key] = str(value.dtype).removeprefix("torch.")
            tensors[key] = value.float().numpy() if value.is_floating_point() else value.numpy()
    if "responses" in batch.batch.keys():
        tensors["response_width"] = batch.batch["responses"].shape[-1]
    meta_step = batch.meta_info.get("global_steps") if batch.meta_info else None
    return rows_from_arrays(
        tensors, batch.non_tensor_batch, step=step if step is not None else meta_step, dtypes=dtypes
    )


def read_safe_batch(path: str | os.PathLike, *, step: int | None = None) -> pd.DataFrame:
    """The table of a batch directory :func:`agl_lab.files.batch_io.save_batch` wrote, read with numpy only (its
    checksums verified as :func:`~agl_lab.files.batch_io.load_batch` verifies them)."""
    path = Path(path)
    header = read_batch_header(path, stacklevel=3)
    specs, start = tensor_specs(path / TENSORS_FILE)
    check_stored(path, header, specs)
    tensors, dtypes = _read_safetensors(path / TENSORS_FILE, specs, start, keys=_READ)
    if "responses" in header.get("tensors", {}):
        tensors["response_width"] = int(header["tensors"]["responses"]["shape"][-1])
    meta_step = header.get("meta_info", {}).get("global_steps")
    return rows_from_arrays(
        tensors, non_tensor_columns(header), step=step if step is not None else meta_step, dtypes=dtypes
    )


def rows_from_arrays(
    tensors: Mapping[str, Any],
    non_tensors: Mapping[str, np.ndarray],
    *,
    step: int | None,
    dtypes: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The table from a batch's tensors as numpy arrays (rows first) and its id columns (module docstring)."""
    n = len(next(iter(non_tensors.values()))) if non_tensors else 0
    for key in _READ:
        if key in tensors:
            n = len(tensors[key])
            break
    mask = tensors.get("response_mask")
    if mask is None and "attention_mask" in tensors and "response_width" in tensors:
        mask = tensors["attention_mask"][:, -int(tensors["response_width"]) :]  # verl's compute_response_mask
    mask = None if mask is None else np.asarray(mask, dtype=np.float64)  # (rows, R)
    tokens = mask.sum(axis=-1) if mask is not None else np.full(n, np.nan)  # (rows,)
    score_key = "token_level_scores" if "token_level_scores" in tensors else "token_level_rewards"
    scores = tensors.get(score_key)
    reward = np.asarray(scores, dtype=np.float64).sum(axis=-1) if scores is not None else np.full(n, np.nan)
    advantage = np.full(n, np.nan)
    if "advantages" in tensors and mask is not None:
        advantage = (np.asarray(tensors["advantages"], dtype=np.float64) * mask).sum(axis=-1) / np.maximum(tokens, 1.0)
    kept = (
        ~np.asarray(tensors["is_drop_mask"], dtype=bool).reshape(n) if "is_drop_mask" in tensors else np.ones(n, bool)
    )
    frame = tidy(
        step=step,
        group=_ids(non_tensors, ("data_id_list", "uid"), n),
        trajectory=_ids(non_tensors, ("rollout_id_list", "request_id"), n),
        response_tokens=tokens,
        reward=reward,
        advantage=advantage,
        kept=kept,
    )
    frame.attrs["score_dtype"] = (dtypes or {}).get(score_key, "float32")
    return frame


def tidy(
    *,
    step: Any,
    group: Any,
    trajectory: Any,
    response_tokens: Any,
    reward: Any,
    advantage: Any,
    kept: Any,
    row: Any = None,
) -> pd.DataFrame:
    """:data:`RUN_COLUMNS` from per-row values (scalars broadcast; ``row`` counted within ``trajectory`` when None).

    Built in one DataFrame call from whole arrays (a reader calls it once per step: inserting column by column and
    broadcasting through Python lists cost more than parsing the step's file)."""
    reward = np.asarray(reward, dtype=np.float64)  # (rows,)
    n = len(reward)
    trajectory = _column(trajectory, n)  # (rows,) object
    return pd.DataFrame(
        {
            "step": _int64(step, n),
            "group": _column(group, n),
            "trajectory": trajectory,
            "row": _counted(trajectory) if row is None else pd.array(np.asarray(row, dtype=np.float64), dtype="Int64"),
            "response_tokens": np.asarray(response_tokens, dtype=np.float64),
            "reward": reward,
            "advantage": np.asarray(advantage, dtype=np.float64),
            "kept": _boolean(kept, n),
        }
    )


def _int64(values: Any, n: int) -> pd.api.extensions.ExtensionArray:
    """(rows,) Int64: a Python or numpy integer broadcast without a list, anything else as pandas converts it."""
    if isinstance(values, int | np.integer) and not isinstance(values, bool | np.bool_):
        return pd.arrays.IntegerArray(np.full(n, values, dtype=np.int64), np.zeros(n, dtype=bool))
    return pd.array([values] * n if np.ndim(values) == 0 else values, dtype="Int64")


def _counted(trajectory: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """(rows,) Int64: each row's place among its trajectory's rows in the order held (NA where no trajectory)."""
    known = ~pd.isna(trajectory)  # (rows,)
    codes, _ = pd.factorize(trajectory[known])  # (known rows,) ids compare as Python values, as groupby groups them
    order = np.argsort(codes, kind="stable")  # (known rows,) by trajectory, then as held
    ranked = codes[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])  # (trajectories,) each one's first in `order`
    place = np.empty(len(codes), dtype=np.int64)
    place[order] = np.arange(len(codes)) - np.repeat(starts, np.diff(np.r_[starts, len(codes)]))
    values = np.zeros(len(trajectory), dtype=np.int64)
    values[known] = place
    return pd.arrays.IntegerArray(values, ~known)


def _boolean(values: Any, n: int) -> pd.api.extensions.ExtensionArray:
    """(rows,) boolean: a bool broadcast without a list, anything else as pandas converts it."""
    if isinstance(values, bool | np.bool_):
        return pd.arrays.BooleanArray(np.full(n, bool(values)), np.zeros(n, dtype=bool))
    return pd.array(values if np.ndim(values) else [values] * n, dtype="boolean")


def _column(values: Any, n: int) -> np.ndarray:
    """One id per row as an object array: ids compare as Python values (``1 == 1.0``), tuples stay whole."""
    if values is None:
        return np.full(n, None, dtype=object)
    if isinstance(values, np.ndarray | pd.Series) and np.asarray(values).ndim == 1:
        return np.asarray(values).astype(object)
    out = np.empty(n, dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def _ids(columns: Mapping[str, np.ndarray], keys: tuple[str, ...], n: int) -> np.ndarray | None:
    for key in keys:
        if key in columns:
            values = columns[key]
            if len(values) != n:
                raise BatchFileError(f"non_tensor_batch[{key!r}] has {len(values)} entries for {n} rows")
            return values
    return None


def _read_safetensors(
    path: Path, specs: dict[str, dict[str, Any]], start: int, *, keys: tuple[str, ...]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors ``keys`` of a safetensors file as numpy arrays (bf16 widened to float32 exactly), and their dtypes;
    ``specs`` and ``start``: its header and where its bytes begin (:func:`~agl_lab.files.batch_header.tensor_specs`).
    The bytes are little endian, row-major."""
    try:
        data = path.read_bytes()
        tensors, dtypes = {}, {}
        for key in keys:
            if key not in specs:
                continue
            spec = specs[key]
            begin, end = (start + offset for offset in spec["data_offsets"])
            raw = np.frombuffer(data[begin:end], dtype=_NUMPY_DTYPES[spec["dtype"]]).reshape(spec["shape"])
            if spec["dtype"] == "BF16":  # bf16 is float32's top half: widen bit for bit
                raw = (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
            tensors[key] = raw
            dtypes[key] = SAFETENSORS_DTYPES[spec["dtype"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BatchFileError(f"{path} is corrupt ({type(exc).__name__}: {exc}); save the batch again") from exc
    return tensors, dtypes
