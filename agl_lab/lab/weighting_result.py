"""The weighting of one batch (:func:`agl_lab.lab.weighting.analyze_weighting`'s result): arrays and tables.

:class:`Weighting` keeps per kept row its layout (mini- and micro-batch), each mode's per-token weight and each
rollout-level setting's advantage, and derives the rest on demand: a :class:`RolloutView` (arrays for one mode and
setting: what the live panel draws, in a millisecond at 10,000 rows) and the tidy tables of the notebook
(``rows``, ``rollouts``, ``totals``, ``mini_batches``), built on first use. Notebook:
``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from agl_lab.core.groups import RolloutGroups
from agl_lab.core.keys import PARTIALLY_DROPPED_ROLLOUTS
from agl_lab.core.weights import TokenLayout
from agl_lab.lab.compact_rows import CompactRows

__all__ = ["RolloutView", "Weighting"]


@dataclass(frozen=True)
class RolloutView:
    """One (mode, rollout-level setting): one entry per rollout of the batch, in order of first appearance."""

    mode: str
    rollout_level: bool
    rollout_id: np.ndarray  # (rollouts,) object
    uid: np.ndarray  # (rollouts,) object
    rows: np.ndarray  # (rollouts,) rows as aggregated
    rows_kept: np.ndarray  # (rollouts,) rows that reach the update
    tokens_kept: np.ndarray  # (rollouts,) their trainable tokens
    reward: np.ndarray  # (rollouts,)
    advantage: np.ndarray  # (rollouts,) mean advantage per kept token (NaN: nothing kept)
    weight: np.ndarray  # (rollouts,) Σ w over kept tokens
    mass: np.ndarray  # (rollouts,) Σ w·A
    share: np.ndarray  # (rollouts,) weight / the batch's total weight
    relative_weight: np.ndarray  # (rollouts,) share × rollouts kept (1 = fair share)


@dataclass(frozen=True, eq=False)
class Weighting:
    """The analysis of one batch. Frames are tidy (one line per observation) and built on first use."""

    compact: CompactRows  # every input row
    rollout_groups: RolloutGroups  # input rows by rollout
    kept: np.ndarray  # (kept,) input row of each kept row, in the trainer's order
    fate: np.ndarray  # (rows,) object: one of agl_lab.core.pipeline.FATES
    partially_dropped: int | None  # rollouts trained in part, as the pipeline's Selection counted them
    layout: TokenLayout  # the kept rows as the update splits them
    token_weights: dict[str, np.ndarray]  # mode -> (kept,) weight of each trainable token of the row
    advantages: dict[bool, np.ndarray]  # rollout_level -> (kept,) the row's mean advantage per token
    modes: tuple[str, ...]
    _cache: dict[Any, np.ndarray] = field(default_factory=dict, repr=False)

    # ---- arrays -------------------------------------------------------------------------------------------

    @cached_property
    def rows_kept(self) -> np.ndarray:
        """(rollouts,) kept rows of each rollout."""
        return np.bincount(self.layout.rollout, minlength=self.rollout_groups.n_groups)

    @cached_property
    def tokens_kept(self) -> np.ndarray:
        return np.bincount(self.layout.rollout, weights=self.layout.row_tokens, minlength=self.rollout_groups.n_groups)

    @property
    def n_rollouts_kept(self) -> int:
        return int((self.rows_kept > 0).sum())

    def rollout_weight(self, mode: str) -> np.ndarray:
        """(rollouts,) Σ w over each rollout's kept tokens under ``mode``."""
        key = ("weight", mode)
        if key not in self._cache:
            row_weight = self.token_weights[mode] * self.layout.row_tokens  # (kept,)
            self._cache[key] = self._by_rollout(row_weight)
        return self._cache[key]

    def rollout_mass(self, mode: str, rollout_level: bool) -> np.ndarray:
        """(rollouts,) Σ w·A over each rollout's kept tokens."""
        row_mass = self.token_weights[mode] * self._advantage_sums(rollout_level)  # (kept,)
        return self._by_rollout(row_mass)

    def rollout_advantage(self, rollout_level: bool) -> np.ndarray:
        """(rollouts,) mean advantage per kept token; NaN for a rollout with nothing kept."""
        sums = self._by_rollout(self._advantage_sums(rollout_level))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.tokens_kept > 0, sums / self.tokens_kept, np.nan)

    def view(self, mode: str, rollout_level: bool) -> RolloutView:
        """Every rollout's numbers under one mode and rollout-level setting (what the live panel draws)."""
        weight = self.rollout_weight(mode)
        total = weight.sum()
        share = weight / total if total > 0 else np.full(len(weight), np.nan)
        first = self.rollout_groups.first_rows
        return RolloutView(
            mode=mode,
            rollout_level=rollout_level,
            rollout_id=self.rollout_groups.ids,
            uid=self._uid[first],
            rows=self.rollout_groups.sizes,
            rows_kept=self.rows_kept,
            tokens_kept=self.tokens_kept,
            reward=self.compact.reward[first],
            advantage=self.rollout_advantage(rollout_level),
            weight=weight,
            mass=self.rollout_mass(mode, rollout_level),
            share=share,
            relative_weight=share * self.n_rollouts_kept,
        )

    def relative_weights(self, modes: tuple[str, ...] | None = None) -> np.ndarray:
        """(modes, rollouts) each rollout's weight relative to a fair share, per mode."""
        out = []
        for mode in modes or self.modes:
            weight = self.rollout_weight(mode)
            total = weight.sum()
            out.append(weight / total * self.n_rollouts_kept if total > 0 else np.full(len(weight), np.nan))
        return np.stack(out) if out else np.zeros((0, self.rollout_groups.n_groups))

    # ---- tables -------------------------------------------------------------------------------------------

    @cached_property
    def rows(self) -> pd.DataFrame:
        """One line per input row (:meth:`row_frame`)."""
        return self.row_frame()

    def row_frame(self) -> pd.DataFrame:
        """One line per input row: ids, size, reward, fate, mini- and micro-batch (-1 when dropped)."""
        n = len(self.compact)
        batches = {}
        for name, values in (("mini_batch", self.layout.mini_batch), ("micro_batch", self.layout.micro)):
            column = np.full(n, -1, dtype=np.int64)
            column[self.kept] = values
            batches[name] = column
        frame = pd.DataFrame(
            {
                "row": np.arange(n),
                "rollout_id": self.compact.rollout_id,
                "uid": self._uid,
                "rows_in_rollout": self.rollout_groups.sizes[self.rollout_groups.codes],
                "trainable_tokens": self.compact.tokens,
                "reward": self.compact.reward,
                "fate": self.fate,
                **batches,
            }
        )
        frame.attrs[PARTIALLY_DROPPED_ROLLOUTS] = self.partially_dropped  # the Selection's count, for the cap figure
        return frame

    @cached_property
    def rollouts(self) -> pd.DataFrame:
        """One line per (mode, rollout_level, rollout)."""
        base = {
            "rollout_id": self.rollout_groups.ids,
            "uid": self._uid[self.rollout_groups.first_rows],
            "rows": self.rollout_groups.sizes,
            "rows_kept": self.rows_kept,
            "tokens_kept": self.tokens_kept.astype(np.int64),
            "reward": self.compact.reward[self._last_rows],  # every row's, or the outcome (per-turn, transition)
            "mini_batches": self._spread,
        }
        parts = []
        for mode in self.modes:
            for level in self.advantages:
                v = self.view(mode, level)
                parts.append(
                    {"mode": mode, "rollout_level": level, **base, "advantage": v.advantage, "weight": v.weight,
                     "mass": v.mass, "share": v.share, "relative_weight": v.relative_weight}
                )  # fmt: skip
        return _concat(parts, self.rollout_groups.n_groups)

    @cached_property
    def _last_rows(self) -> np.ndarray:
        """(rollouts,) each rollout's last row: its outcome's under per-turn rewards, its reward's like any other."""
        codes = self.rollout_groups.codes
        return len(codes) - 1 - np.unique(codes[::-1], return_index=True)[1]

    @cached_property
    def totals(self) -> pd.DataFrame:
        """One line per (mode, rollout_level): the batch's total loss scale, mass, what was trained, the spread."""
        lines = []
        alive = self.rows_kept > 0
        for mode in self.modes:
            weight = self.rollout_weight(mode)
            living = weight[alive]
            ratio = living.max() / living.min() if len(living) and living.min() > 0 else np.nan
            for level in self.advantages:
                lines.append(
                    {"mode": mode, "rollout_level": level, "total_weight": weight.sum(),
                     "total_mass": self.rollout_mass(mode, level).sum(), "rows_kept": len(self.kept),
                     "rollouts_kept": self.n_rollouts_kept, "mini_batches": self._n_mini_batches,
                     "weight_ratio": ratio}
                )  # fmt: skip
        return pd.DataFrame(lines)

    @cached_property
    def mini_batches(self) -> pd.DataFrame:
        """One line per (mode, rollout_level, mini_batch): rows, rollouts, total weight and mass."""
        n_mb, mb = self._n_mini_batches, self.layout.mini_batch
        pairs = np.unique(np.stack([self.layout.rollout, mb]), axis=1) if len(mb) else np.zeros((2, 0), int)
        parts = []
        for mode in self.modes:
            row_weight = self.token_weights[mode] * self.layout.row_tokens
            for level in self.advantages:
                row_mass = self.token_weights[mode] * self._advantage_sums(level)
                parts.append(
                    {"mode": mode, "rollout_level": level, "mini_batch": np.arange(n_mb),
                     "rows": np.bincount(mb, minlength=n_mb), "rollouts": np.bincount(pairs[1], minlength=n_mb),
                     "total_weight": np.bincount(mb, weights=row_weight, minlength=n_mb),
                     "total_mass": np.bincount(mb, weights=row_mass, minlength=n_mb)}
                )  # fmt: skip
        return _concat(parts, n_mb)

    def summary(self, *, rollout_level: bool = True) -> pd.DataFrame:
        """One line per mode: the batch's total loss scale, the heaviest/lightest rollout ratio, what was trained."""
        frame = self.totals[self.totals["rollout_level"] == rollout_level].set_index("mode")
        return frame.drop(columns="rollout_level")

    def pivot(self, value: str = "weight", *, rollout_level: bool = True) -> pd.DataFrame:
        """``value`` of each rollout (columns) under each mode (rows), with the total: for small batches."""
        frame = self.rollouts[self.rollouts["rollout_level"] == rollout_level]
        table = frame.pivot(index="mode", columns="rollout_id", values=value)
        table = table.loc[frame["mode"].unique(), list(dict.fromkeys(frame["rollout_id"]))]
        return table.assign(total=table.sum(axis=1)).rename_axis(columns=None)

    def row_table(self, mode: str, *, rollout_level: bool, rollout_id: Any = None) -> pd.DataFrame:
        """``rows`` plus each row's ``advantage`` (mean over its tokens), ``weight`` and ``mass`` for one setting;
        only ``rollout_id``'s rows when given."""
        n = len(self.compact)
        columns = {
            "advantage": (self.advantages[rollout_level], np.nan),
            "weight": (self.token_weights[mode] * self.layout.row_tokens, 0.0),
            "mass": (self.token_weights[mode] * self._advantage_sums(rollout_level), 0.0),
        }
        frame = self.rows.copy() if rollout_id is None else self.row_frame_of(rollout_id)
        for name, (values, fill) in columns.items():
            full = np.full(n, fill)
            full[self.kept] = values
            frame[name] = full[frame["row"].to_numpy()]
        return frame

    def row_frame_of(self, rollout_id: Any) -> pd.DataFrame:
        """:meth:`row_frame`'s lines of one rollout (what the panel shows for a clicked rollout)."""
        code = np.flatnonzero(self.rollout_groups.ids == rollout_id)
        if not len(code):
            raise KeyError(f"no rollout {rollout_id!r} in this batch")
        rows = np.flatnonzero(self.rollout_groups.codes == code[0])
        return self.rows.iloc[rows].reset_index(drop=True)

    def by_mini_batch(self, mode: str, *, rollout_level: bool) -> pd.DataFrame:
        """One line per (mini_batch, rollout_id) for one setting: a rollout's rows can land in several mini-batches."""
        frame = pd.DataFrame(
            {
                "mini_batch": self.layout.mini_batch,
                "rollout_id": self.compact.rollout_id[self.kept],
                "rows": 1,
                "weight": self.token_weights[mode] * self.layout.row_tokens,
                "mass": self.token_weights[mode] * self._advantage_sums(rollout_level),
            }
        )
        return frame.groupby(["mini_batch", "rollout_id"], sort=False, as_index=False).sum()

    # ---- helpers ------------------------------------------------------------------------------------------

    @cached_property
    def _uid(self) -> np.ndarray:
        return self.compact.data_id if self.compact.data_id is not None else np.arange(len(self.compact))

    @cached_property
    def _spread(self) -> np.ndarray:
        """(rollouts,) mini-batches a rollout's kept rows land in."""
        lay = self.layout
        pairs = np.unique(np.stack([lay.rollout, lay.mini_batch]), axis=1) if lay.n_rows else np.zeros((2, 0), int)
        return np.bincount(pairs[0], minlength=self.rollout_groups.n_groups)

    @property
    def _n_mini_batches(self) -> int:
        return int(self.layout.mini_batch.max(initial=-1)) + 1

    def _advantage_sums(self, rollout_level: bool) -> np.ndarray:
        return self.advantages[rollout_level] * self.layout.row_tokens  # (kept,) Σ_t A·mask

    def _by_rollout(self, per_row: np.ndarray) -> np.ndarray:
        return np.bincount(self.layout.rollout, weights=per_row, minlength=self.rollout_groups.n_groups)


def _concat(parts: list[dict[str, Any]], length: int) -> pd.DataFrame:
    """Stack per-setting column dicts (scalars broadcast) into one frame, column by column: faster than concat."""
    if not parts:
        return pd.DataFrame()
    columns = {}
    for key in parts[0]:
        columns[key] = np.concatenate([np.broadcast_to(np.asarray(p[key]), (length,)) for p in parts])
    return pd.DataFrame(columns)
