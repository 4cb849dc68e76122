"""One long-form table from any reader's steps (``source, run, setting, seed, step, metric, value``), checked the
same way for every source (:mod:`agl_lab.curves.history`).

Each reader hands :func:`long_table` its steps as ``(where, step, {metric: value})``, ``where`` naming the file and
line. A step must be an integer (ints, integral floats as W&B writes them, integer text from a CSV): ``abc``, ``2.5``
or a missing step is a ValueError naming where, never a silent NA. A value is a number; ``None`` is a metric not
logged at that step; in agl_lab's and verl's files anything else is a ValueError (W&B's own runs also log text and
media, skipped there). NaN and ±inf are kept as logged and each file warns once (:class:`NonFiniteWarning`). A
metric logged twice at one step (a file two runs appended to, a step logged again after a restart) is a ValueError
naming both places: a history holds one value per metric and step, and averaging the two would be a guess.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["COLUMNS", "NonFiniteWarning", "finish", "gap", "long_table", "warn_non_finite"]

COLUMNS = ["source", "run", "setting", "seed", "step", "metric", "value"]
_WANDB_INTERNAL = re.compile(r"^_(step|runtime|timestamp|wandb)")


class NonFiniteWarning(UserWarning):
    """A file's metrics hold NaN or ±inf values: kept as logged (module docstring)."""


def long_table(
    steps: Iterable[tuple[str, Any, Mapping[str, Any]]],
    *,
    source: str,
    run: str,
    setting: Any,
    seed=None,
    origin: Any,
    strict: bool = True,
    warn: bool = True,
) -> pd.DataFrame:
    """The long-form table of ``(where, step, {metric: value})`` steps. A step must be an integer; a value must be a
    number or null (null: not logged) when ``strict``, else what is not a number is skipped (W&B's text, media)."""
    records = []
    logged: dict[tuple[int, str], str] = {}  # (step, metric) -> where it was logged first
    for where, step, row in steps:
        step = _step(step, where=where)
        for metric, value in row.items():
            if metric == "step" or _WANDB_INTERNAL.match(metric) or value is None:
                continue
            if not _is_number(value):
                if strict:
                    raise ValueError(f"{where}: {metric} must be a number (or null), got {value!r}")
                continue
            if (step, metric) in logged:
                raise ValueError(
                    f"{where}: {metric} is logged a second time at step {step} (first: {logged[step, metric]}): a "
                    "history holds one value per metric and step, and nothing was read (did two runs append to one "
                    "file? keep one)"
                )
            logged[step, metric] = where
            records.append((step, metric, float(value)))
    table = pd.DataFrame(records, columns=["step", "metric", "value"])
    table["source"], table["run"], table["setting"], table["seed"] = source, run, setting or run, seed
    table = finish(table)
    if warn:
        warn_non_finite(table, origin=origin)
    return table


def _step(value: Any, *, where: str) -> int:
    """A step as an integer: ints, integral floats (W&B writes 3.0) and integer text (CSV); else a ValueError."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float | np.floating) and np.isfinite(value) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+(\.0*)?\s*", value):
        return int(float(value))
    shown = "no step" if value is None else f"{value!r}"
    raise ValueError(f"{where}: the step must be an integer, got {shown}")


def warn_non_finite(table: pd.DataFrame, *, origin: Any) -> None:
    bad = table[~np.isfinite(table["value"].to_numpy(dtype=float))]
    if len(bad):
        counts = bad.groupby("metric").size()
        named = ", ".join(f"{metric} ({n})" for metric, n in list(counts.items())[:5])
        named += f" and {len(counts) - 5} more metric(s)" if len(counts) > 5 else ""
        warnings.warn(
            f"{origin}: kept {len(bad)} NaN/inf value(s) as logged: {named}; means and bands skip NaN",
            NonFiniteWarning,
            stacklevel=4,
        )


def finish(table: pd.DataFrame) -> pd.DataFrame:
    table["step"] = table["step"].astype("Int64")
    table["seed"] = pd.to_numeric(table["seed"], errors="coerce").astype("Int64")
    return table[COLUMNS].reset_index(drop=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


def gap(value: Any) -> bool:
    return isinstance(value, float | np.floating) and np.isnan(value)
