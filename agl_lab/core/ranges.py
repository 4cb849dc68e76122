"""A number's accepted range, and the words that say it: the one type every range rule in the package is written in.

The rules themselves sit in :data:`agl_lab.config.constraints.CONSTRAINTS`, the table the doctor checks a config
against. A rule that the batch math must also enforce on its own arguments (``max_ppo_update_times``, whose range
:mod:`agl_lab.core.update_cap` checks when called from Python) is written once beside that math and placed in the
table from there, so the config's check and the function's check are the same object. The class lives in ``core/``,
the lowest layer, for that reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Constraint", "show_number"]


@dataclass(frozen=True)
class Constraint:
    """A number's accepted values: ``kind``, a lower and upper bound (each included unless ``*_open``), null or not."""

    kind: Literal["integer", "number"]
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    why: str = ""  # what goes wrong otherwise, after the value
    text: str | None = None  # an exact message where Agent Lightning has one ({value} filled in)
    fix: str | None = None  # the fix, where a better one than "set it in range" exists
    null_means: str | None = None  # what null does, where it is a choice of its own ("no cap"), as the CLI shows it

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return False
        if self.kind == "integer" and not isinstance(value, int):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def describe(self) -> str:
        """What the value must be, in words: ``a positive integer``, ``null (no cap) or a positive integer``."""
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            span = f"in {left}{show_number(self.low)}, {show_number(self.high)}{right}"
        elif self.kind == "integer" and self.low == 1:
            span = "a positive integer"
        elif self.low is not None:
            kind = "an integer" if self.kind == "integer" else "a number"
            span = f"{kind} {'>' if self.low_open else '>='} {show_number(self.low)}"
        else:
            span = "an integer" if self.kind == "integer" else "a number"
        null = f"null ({self.null_means})" if self.null_means else "null"
        return f"{null} or {span}" if self.nullable else span

    def problem(self, value: Any) -> str | None:
        """``None`` when ``value`` is accepted, else what is wrong in words (``must be …, got …`` and why)."""
        if self.accepts(value):
            return None
        if self.text:
            return self.text.format(value=value)
        shown = "null" if value is None else repr(value)
        return f"must be {self.describe()}, got {shown}{self.why}"


def show_number(value: Any) -> str:
    """``2`` for ``2.0``, the value itself otherwise: how a rule prints its bounds and defaults."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() and abs(value) < 1e15 else str(value)
