"""Which rows reach the PPO update: marked rows out, then mini-batch alignment and the update cap.

Trace aggregation makes the row count of a step vary, but verl updates in whole PPO mini-batches of
``ppo_mini_batch_size × rollout.n`` rows. Agent Lightning therefore keeps ``floor(n / mini_bs) × mini_bs``
rows, at most ``mini_bs × agentlightning.max_ppo_update_times`` (null = no cap; the docs recommend 2).
The surplus is dropped per row: first from uid groups whose rewards are all equal (with GRPO their
advantages are zero, so they carry no signal), then at random from the rest. v1.0 draws from an
unseeded global RNG; here ``seed`` makes the choice reproducible.

A row drop can train a rollout in part (some of its rows kept, some dropped). ``drop_unit="rollout"`` (the lab-only
``lab.cap_drop_unit=rollout``; the default ``row`` is Agent Lightning's) drops whole rollouts instead, in Agent
Lightning's order: rollouts of same-reward groups first, then the others, each in a seeded random order. It walks
that order and drops each rollout while fewer rows than the surplus are gone, so whether a rollout is dropped depends
on the rollouts before it, never on its own row count (a rule that only took rollouts fitting the rest of the surplus
dropped 1-row rollouts 7x as often as 4-row ones). The last rollout dropped may take more rows than the surplus: the
step then trains fewer rows than Agent Lightning would (``training/n_sample_trained``; less than the largest rollout
fewer), in as many PPO updates or fewer, the last mini-batch short (the lab's actor trains it, each row weighing
what it weighs in a full one; verl's actor engine needs whole mini-batches, so ``lab.actor=verl`` refuses this
unit). A step Agent Lightning trains is never skipped: when the walk would drop every row (one rollout holds more
rows than the step may train), that rollout is trained in part, with a warning. A rollout is otherwise trained
whole or not at all (``lab/partially_dropped_rollouts`` counts the others). Notebook:
``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from verl import DataProto

from agl_lab.core.groups import group_key, group_rows, non_tensor_ids, uniform_groups
from agl_lab.core.keys import (
    CAP_DROP_UNIT,
    MAX_PPO_UPDATE_TIMES,
    N_SAMPLE_COLLECTED,
    N_SAMPLE_DROPPED_MARKED,
    N_SAMPLE_DROPPED_RANDOM,
    N_SAMPLE_DROPPED_SAME_REWARD,
    N_SAMPLE_TRAINED,
    PARTIALLY_DROPPED_ROLLOUTS,
)
from agl_lab.core.ranges import Constraint
from agl_lab.core.rows import require_matrix, take_rows

__all__ = [
    "DROP_UNITS",
    "CAP_RANGE",
    "CapPlan",
    "EmptyBatchWarning",
    "apply_update_cap",
    "drop_marked_rows",
    "marked_rows_kept",
    "partially_dropped",
    "partially_dropped_count",
    "plan_update_cap",
    "same_reward_rows",
    "warn_no_trainable_batch",
]


# What max_ppo_update_times may be: the one rule, here beside the cap, which checks its own arguments by it; the
# config's table (agl_lab.config.constraints) holds this same object, so the doctor and the function agree.
CAP_RANGE = Constraint(
    "integer",
    low=1,
    nullable=True,
    why=": a cap below 1 drops every row, so no step trains",
    null_means="no cap",
    fix=f"set {MAX_PPO_UPDATE_TIMES}=null (no cap) or 2 (recommended)",
)

# What the cap drops: single rows (Agent Lightning) or whole rollouts (lab.cap_drop_unit=rollout, lab-only).
DROP_UNITS = ("row", "rollout")


class EmptyBatchWarning(UserWarning):
    """Nothing is left to train on after the drops; the step should be skipped."""


def warn_no_trainable_batch(n_rows: int, mini_batch_size: int, *, stacklevel: int = 2) -> None:
    """Agent Lightning's warning for a step the drops empty (its text, with the counts); every caller warns here."""
    warnings.warn(
        f"no trainable batch after drop+floor ({n_rows} rows < one mini-batch of {mini_batch_size} rows); "
        "skipping this training step",
        EmptyBatchWarning,
        stacklevel=stacklevel + 1,
    )


def drop_marked_rows(batch: DataProto) -> tuple[DataProto, dict[str, int]]:
    """Remove rows flagged ``is_drop_mask`` (prompt over the aggregator's limit); count them."""
    keep, metrics = marked_rows_kept(batch)
    return (batch if len(keep) == len(batch) else take_rows(batch, keep)), metrics


def marked_rows_kept(batch: DataProto) -> tuple[np.ndarray, dict[str, int]]:
    """(kept,) indices of the rows not flagged ``is_drop_mask``, and the counters of :func:`drop_marked_rows`.

    ``training/n_sample_dropped/marked`` is logged only when the batch has ``is_drop_mask``, as Agent Lightning does.
    """
    n = len(batch)
    metrics = {N_SAMPLE_COLLECTED: n}
    if batch.batch is None or "is_drop_mask" not in batch.batch.keys():
        return np.arange(n, dtype=np.int64), metrics
    marked = batch.batch["is_drop_mask"]
    if marked.shape != (n,):
        raise ValueError(f"batch['is_drop_mask'] must have shape ({n},) (one flag per row), got {tuple(marked.shape)}")
    keep = np.flatnonzero(~marked.bool().cpu().numpy()).astype(np.int64)  # (kept,)
    metrics[N_SAMPLE_DROPPED_MARKED] = n - len(keep)
    return keep, metrics


@dataclass(frozen=True)
class CapPlan:
    """Which rows the alignment and cap keep, and why each other row goes (indices into the batch, ascending)."""

    kept: np.ndarray  # (kept,) int64
    dropped_same_reward: np.ndarray  # (n_same,) int64: surplus rows from uid groups with one reward throughout
    dropped_random: np.ndarray  # (n_random,) int64: surplus rows drawn at random from the others

    @property
    def metrics(self) -> dict[str, int]:
        return {
            N_SAMPLE_DROPPED_SAME_REWARD: len(self.dropped_same_reward),
            N_SAMPLE_DROPPED_RANDOM: len(self.dropped_random),
            N_SAMPLE_TRAINED: len(self.kept),
        }


def apply_update_cap(
    batch: DataProto,
    *,
    mini_batch_size: int,
    max_ppo_update_times: int | None = None,
    seed: int | None = None,
    drop_unit: str = "row",
) -> tuple[DataProto, dict[str, int]]:
    """Keep whole PPO mini-batches of rows (at most ``max_ppo_update_times`` of them); drop the surplus.

    ``mini_batch_size`` is counted in rows: the trainer passes ``ppo_mini_batch_size × rollout.n``. ``drop_unit``:
    ``row`` (Agent Lightning) or ``rollout`` (whole rollouts only; module docstring).
    Returns the kept rows in their original order and ``training/n_sample_dropped/same_reward``,
    ``training/n_sample_dropped/random`` and ``training/n_sample_trained``. When nothing is left the
    empty batch is returned with an :class:`EmptyBatchWarning`.
    """
    plan = plan_update_cap(
        batch, mini_batch_size=mini_batch_size, max_ppo_update_times=max_ppo_update_times, seed=seed,
        drop_unit=drop_unit,
    )  # fmt: skip
    if len(plan.kept) < len(batch):
        batch = take_rows(batch, plan.kept)
    if len(batch) == 0:
        warn_no_trainable_batch(len(plan.dropped_random) + len(plan.dropped_same_reward), mini_batch_size)
    return batch, plan.metrics


def plan_update_cap(
    batch: DataProto,
    *,
    mini_batch_size: int,
    max_ppo_update_times: int | None = None,
    seed: int | None = None,
    drop_unit: str = "row",
) -> CapPlan:
    """What :func:`apply_update_cap` keeps and drops, without touching ``batch``: the trainer's draw, with reasons."""
    if drop_unit not in DROP_UNITS:
        raise ValueError(f"{CAP_DROP_UNIT} must be one of {list(DROP_UNITS)}, got {drop_unit!r}")
    if isinstance(mini_batch_size, bool) or not isinstance(mini_batch_size, int | np.integer) or mini_batch_size < 1:
        raise ValueError(
            f"mini_batch_size must be a positive number of rows (ppo_mini_batch_size × rollout.n), "
            f"got {mini_batch_size!r}"
        )
    cap = int(max_ppo_update_times) if isinstance(max_ppo_update_times, np.integer) else max_ppo_update_times
    if cap_problem := CAP_RANGE.problem(cap):
        raise ValueError(f"{MAX_PPO_UPDATE_TIMES} {cap_problem}; {CAP_RANGE.fix}")
    n = len(batch)
    n_kept = n // mini_batch_size * mini_batch_size
    if max_ppo_update_times is not None:
        n_kept = min(n_kept, mini_batch_size * int(max_ppo_update_times))
    n_to_drop = n - n_kept
    if n_to_drop == 0:
        empty = np.zeros(0, dtype=np.int64)
        return CapPlan(kept=np.arange(n, dtype=np.int64), dropped_same_reward=empty, dropped_random=empty)
    rng = np.random.default_rng(seed)
    same = same_reward_rows(batch)  # (same_rows,)
    if drop_unit == "rollout":
        drop_same, drop_random = _whole_rollouts(batch, same, n_kept=n_kept, rng=rng)
    else:
        drop_same = rng.permutation(same)[:n_to_drop]
        others = np.setdiff1d(np.arange(n), drop_same, assume_unique=True)
        drop_random = rng.permutation(others)[: n_to_drop - len(drop_same)]
    keep = np.ones(n, dtype=bool)
    keep[drop_same] = False
    keep[drop_random] = False
    return CapPlan(
        kept=np.flatnonzero(keep).astype(np.int64),
        dropped_same_reward=np.sort(drop_same).astype(np.int64),
        dropped_random=np.sort(drop_random).astype(np.int64),
    )


def partially_dropped(rows: DataProto, kept: DataProto) -> dict[str, int]:
    """``lab/partially_dropped_rollouts``: the rollouts of ``rows`` with some but not all of their rows in ``kept``
    (dropped as marked or by the cap); empty without ``rollout_id_list``. A lab metric, beside Agent Lightning's."""
    if "rollout_id_list" not in rows.non_tensor_batch or "rollout_id_list" not in kept.non_tensor_batch:
        return {}
    everyone = group_rows(non_tensor_ids(rows, "rollout_id_list"), field="rollout_id_list")
    lookup = pd.Index(everyone.ids)
    codes = lookup.get_indexer(non_tensor_ids(kept, "rollout_id_list"))  # (kept,) its rollout among rows'
    return {PARTIALLY_DROPPED_ROLLOUTS: _partial(everyone.sizes, codes)}


def partially_dropped_count(rows: DataProto, kept: np.ndarray) -> int | None:
    """How many rollouts of ``rows`` keep some but not all of their rows, ``kept`` being (kept,) indices into
    ``rows``; None without ``rollout_id_list``. The pipeline's :class:`~agl_lab.core.pipeline.Selection` counts here."""
    if "rollout_id_list" not in rows.non_tensor_batch:
        return None
    rollouts = group_rows(non_tensor_ids(rows, "rollout_id_list"), field="rollout_id_list")
    return _partial(rollouts.sizes, rollouts.codes[kept])


def _partial(sizes: np.ndarray, kept_codes: np.ndarray) -> int:
    """Rollouts (of ``sizes`` rows each) with some but not all rows among ``kept_codes`` (each kept row's rollout)."""
    some = np.bincount(kept_codes, minlength=len(sizes))  # (rollouts,) rows kept
    return int(((some > 0) & (some < sizes)).sum())


def _whole_rollouts(
    batch: DataProto, same: np.ndarray, *, n_kept: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``drop_unit="rollout"`` drops (module docstring): (same-reward rows, others)."""
    if "rollout_id_list" not in batch.non_tensor_batch:
        raise ValueError(
            f"{CAP_DROP_UNIT}=rollout needs non_tensor_batch['rollout_id_list'] (which rows form one rollout): add "
            f"it, or use {CAP_DROP_UNIT}=row"
        )
    rollouts = group_rows(non_tensor_ids(batch, "rollout_id_list"), field="rollout_id_list")
    sizes = rollouts.sizes  # (rollouts,)
    same_rollout = np.zeros(rollouts.n_groups, dtype=bool)
    same_rollout[rollouts.codes[same]] = True  # a rollout's rows share its uid group, so all of them are same-reward
    order = np.concatenate(
        [rng.permutation(np.flatnonzero(same_rollout)), rng.permutation(np.flatnonzero(~same_rollout))]
    )  # (rollouts,)
    surplus = len(batch) - n_kept
    before = np.concatenate([[0], np.cumsum(sizes[order])[:-1]])  # (rollouts,) rows dropped before each in the walk
    walked = order[before < surplus]  # dropped while fewer than the surplus were gone
    dropped = np.zeros(rollouts.n_groups, dtype=bool)
    dropped[walked] = True
    rows = np.flatnonzero(dropped[rollouts.codes])  # (dropped rows,)
    if len(rows) == len(batch) and n_kept > 0:  # never skip a step Agent Lightning trains: the last one in part
        last = walked[-1]
        members = np.flatnonzero(rollouts.codes == last)
        spared = np.sort(rng.permutation(members)[:n_kept])
        warnings.warn(
            f"{CAP_DROP_UNIT}=rollout: rollout {str(rollouts.ids[last])!r} has {len(members)} rows, more than the "
            f"{n_kept} this step may train; {n_kept} of its rows are trained (it counts in "
            f"{PARTIALLY_DROPPED_ROLLOUTS}) rather than skipping the step",
            stacklevel=4,
        )
        rows = np.setdiff1d(rows, spared, assume_unique=True)
    is_same = same_rollout[rollouts.codes[rows]]
    return rows[is_same], rows[~is_same]


def same_reward_rows(batch: DataProto) -> np.ndarray:
    """Indices of rows whose uid group (``uid``, else ``data_id_list``) has one reward for every row."""
    key = group_key(batch)
    if key is None or len(batch) == 0:
        return np.zeros(0, dtype=np.int64)
    groups = group_rows(non_tensor_ids(batch, key), field=key)
    # Summed and compared in the scores' own dtype, as Agent Lightning does: in bf16 (its scores' dtype) rewards
    # that round to one bf16 value are the same reward.
    scores = require_matrix(batch, "token_level_scores", floating=True, finite=True).sum(dim=-1)  # (rows,)
    return np.flatnonzero(uniform_groups(groups, scores)[groups.codes])
