"""How much each rollout weighs in the policy gradient, under every loss mode of the catalogue.

For one batch of rows the analysis runs the trainer's own steps: drops and mini-batch alignment with the
update cap (:func:`agl_lab.core.pipeline.plan_selection`), rewards, then the advantage, rollout-level
(:func:`agl_lab.compute_rollout_level_advantage`) or verl's ``compute_advantage``. Each kept token then gets
its mode's weight ``w = ∂L/∂ℓ`` (:mod:`agl_lab.core.weights`; the modes and their formulas are the catalogue
:data:`agl_lab.LOSS_MODES`). At ratio 1 (a step's first update) the gradient is ``−Σ w·A·∇log π``:

* ``weight`` of a rollout, ``Σ w`` over its kept tokens: its policy-gradient mass for a unit advantage;
* ``mass``, ``Σ w·A``: its actual mass, signed like its advantage;
* ``share``, weight / the batch's total weight; ``relative_weight`` = share × rollouts kept (1 = fair share).

Mini-batches are consecutive chunks of the kept rows (verl's default ``actor.shuffle: false``; the trainer's
``balance_batch`` reordering is not modelled). Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage, compute_response_mask

from agl_lab.config.modes import LOSS_MODES
from agl_lab.core.advantage import compute_rollout_level_advantage
from agl_lab.core.groups import as_arrays, group_rows, non_tensor_ids
from agl_lab.core.pipeline import advantage_kwargs, mini_batch_rows, plan_selection
from agl_lab.core.rows import require_fields
from agl_lab.core.update_cap import EmptyBatchWarning
from agl_lab.lab.loss_scale import token_layout

__all__ = ["Weighting", "analyze_weighting"]

# What the analysis reads; "a+b" = both, a tuple = any one of them.
_NEEDED_FIELDS = (
    "rollout_id_list",
    ("response_mask", "responses+attention_mask"),
    ("token_level_scores", "token_level_rewards"),
)


@dataclass(frozen=True)
class Weighting:
    """The analysis of one batch. Frames are tidy (one line per observation); see :func:`analyze_weighting`."""

    rows: pd.DataFrame  # one line per input row: ids, size, reward, fate under the cap, mini_batch (-1: dropped)
    rollouts: pd.DataFrame  # one line per (mode, rollout_level, rollout)
    totals: pd.DataFrame  # one line per (mode, rollout_level): the batch's total loss scale and spread
    mini_batches: pd.DataFrame  # one line per (mode, rollout_level, mini_batch)
    _kept: _Kept

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

    def row_table(self, mode: str, *, rollout_level: bool) -> pd.DataFrame:
        """``rows`` plus each row's ``advantage`` (mean over its tokens), ``weight`` and ``mass`` for one setting."""
        kept = self._kept
        frame = self.rows.copy()
        n = len(frame)
        tokens = np.maximum(kept.tokens, 1)
        columns = {
            "advantage": kept.advantage_sums[rollout_level] / tokens,
            "weight": kept.token_weights[mode] * kept.tokens,
            "mass": kept.token_weights[mode] * kept.advantage_sums[rollout_level],
        }
        for name, values in columns.items():
            full = np.full(n, np.nan if name == "advantage" else 0.0)
            full[kept.index] = values
            frame[name] = full
        return frame

    def by_mini_batch(self, mode: str, *, rollout_level: bool) -> pd.DataFrame:
        """One line per (mini_batch, rollout) for one setting: a rollout's rows can land in several mini-batches."""
        kept = self._kept
        frame = pd.DataFrame(
            {
                "mini_batch": kept.mini_batch,
                "rollout_id": self.rows["rollout_id"].to_numpy()[kept.index],
                "rows": 1,
                "weight": kept.token_weights[mode] * kept.tokens,
                "mass": kept.token_weights[mode] * kept.advantage_sums[rollout_level],
            }
        )
        return frame.groupby(["mini_batch", "rollout_id"], sort=False, as_index=False).sum()


@dataclass(frozen=True)
class _Kept:
    index: np.ndarray  # (kept,) input row of each kept row, in the trainer's order
    codes: np.ndarray  # (kept,) rollout code (index into Weighting.rollouts' rollout order)
    tokens: np.ndarray  # (kept,) trainable tokens
    mini_batch: np.ndarray  # (kept,)
    token_weights: dict[str, np.ndarray]  # mode -> (kept,) weight of each trainable token of the row
    advantage_sums: dict[bool, np.ndarray]  # rollout_level -> (kept,) Σ_t A·mask of the row


def analyze_weighting(
    rows: DataProto,
    cfg: DictConfig,
    *,
    modes: Sequence[str] = tuple(LOSS_MODES),
    rollout_levels: Sequence[bool] = (True, False),
    seed: int | None = None,
) -> tuple[Weighting, dict[str, Any]]:
    """Every rollout's weight and mass in ``rows`` under each of ``modes`` × ``rollout_levels``.

    ``cfg`` (a composed config) supplies the estimator, ``rollout.n``, ``ppo_mini_batch_size``,
    ``max_ppo_update_times`` and ``lab.seed`` (``seed`` overrides it); the loss-mode and rollout-level keys
    in it are ignored, since every requested combination is computed. ``rows`` is not modified. Returns the
    :class:`Weighting` and the metrics of the drop and rollout-level steps. When the cap leaves no row the
    step would be skipped: weights are all 0 (an ``EmptyBatchWarning`` says so).
    """
    unknown = [m for m in modes if m not in LOSS_MODES]
    if unknown:
        raise ValueError(f"unknown loss modes {unknown}: choose from {list(LOSS_MODES)}")
    if cfg.algorithm.get("use_kl_in_reward", False):
        raise ValueError(
            "the weighting analysis computes advantages without a KL penalty in the reward (it has no log-probs): "
            "set algorithm.use_kl_in_reward=false (Agent Lightning's examples do)"
        )
    require_fields(rows, _NEEDED_FIELDS, purpose=f"the weighting analysis ({', '.join(modes)})")
    slim = _slim(rows)
    rollouts = group_rows(non_tensor_ids(slim, "rollout_id_list"), field="rollout_id_list")
    selection = plan_selection(slim, cfg, seed=seed)
    kept_batch, index = selection.batch, selection.kept
    if len(index) == 0:
        warnings.warn(
            f"no trainable batch after drop+floor ({len(rows)} rows < one mini-batch of {mini_batch_rows(cfg)} "
            "rows); the trainer skips this step",
            EmptyBatchWarning,
            stacklevel=2,
        )
    layout = token_layout(kept_batch, cfg, rollout=rollouts.codes[index])
    token_weights = {mode: LOSS_MODES[mode].weight(layout) for mode in modes}
    advantage_sums, metrics = {}, dict(selection.metrics)
    for level in rollout_levels:
        sums, level_metrics = _advantage_sums(kept_batch, cfg, rollout_level=bool(level))
        advantage_sums[bool(level)] = sums
        metrics.update(level_metrics)

    kept = _Kept(index, layout.rollout, layout.row_tokens, layout.mini_batch, token_weights, advantage_sums)
    row_frame = _row_frame(slim, rollouts, kept, fate=selection.fate)
    rollout_frame, totals, mini_batches = _frames(row_frame, rollouts, kept, modes, list(advantage_sums))
    return Weighting(row_frame, rollout_frame, totals, mini_batches, kept), metrics


def _slim(rows: DataProto) -> DataProto:
    """Only the fields steps 1–4 read: selection then copies a fraction of the batch."""
    tensors = {}
    if "response_mask" in rows.batch.keys():
        tensors["response_mask"] = rows.batch["response_mask"]
    else:
        tensors["response_mask"] = compute_response_mask(rows)
    # the drop step and verl's metrics read scores; a dump taken after step 3 may only carry the rewards
    scores = "token_level_scores" if "token_level_scores" in rows.batch.keys() else "token_level_rewards"
    tensors["token_level_scores"] = rows.batch[scores]
    if "is_drop_mask" in rows.batch.keys():
        tensors["is_drop_mask"] = rows.batch["is_drop_mask"]
    non_tensors = as_arrays(rows.non_tensor_batch)  # lists, tuples, Series: numpy columns (tuple ids stay 1-D)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(rows.meta_info))


def _advantage_sums(batch: DataProto, cfg: DictConfig, *, rollout_level: bool) -> tuple[np.ndarray, dict[str, Any]]:
    """Trainer steps 3–4 (rewards = scores, then the advantage) on a copy; Σ_t A·mask per row."""
    if len(batch) == 0:
        return np.zeros(0), {}
    work = DataProto(batch=batch.batch.copy(), non_tensor_batch=dict(batch.non_tensor_batch), meta_info={})
    work.batch["token_level_rewards"] = work.batch["token_level_scores"]
    kwargs = advantage_kwargs(cfg)
    metrics: dict[str, Any] = {}
    if rollout_level:
        work, metrics = compute_rollout_level_advantage(work, **kwargs)
    else:
        work = compute_advantage(work, **kwargs)
    mask = work.batch["response_mask"]  # (kept, R)
    sums = (work.batch["advantages"].double() * mask).sum(dim=-1)  # (kept,): bf16 advantages summed in float64
    return sums.numpy(), metrics


def _row_frame(slim: DataProto, rollouts, kept: _Kept, *, fate: np.ndarray) -> pd.DataFrame:
    n = len(slim)
    mini_batch = np.full(n, -1, dtype=np.int64)
    mini_batch[kept.index] = kept.mini_batch
    frame = pd.DataFrame({"row": np.arange(n), "rollout_id": slim.non_tensor_batch["rollout_id_list"]})
    groups = slim.non_tensor_batch.get("data_id_list")
    frame["uid"] = groups if groups is not None else frame["row"]
    frame["rows_in_rollout"] = rollouts.sizes[rollouts.codes]
    frame["trainable_tokens"] = slim.batch["response_mask"].sum(dim=-1).numpy()
    frame["reward"] = slim.batch["token_level_scores"].sum(dim=-1).double().numpy()
    frame["fate"] = fate
    frame["mini_batch"] = mini_batch
    return frame


def _frames(
    row_frame: pd.DataFrame, rollouts, kept: _Kept, modes: Sequence[str], levels: list[bool]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    n_rollouts = rollouts.n_groups
    first = rollouts.first_rows
    rows_kept = np.bincount(kept.codes, minlength=n_rollouts)  # (rollouts,)
    tokens_kept = np.bincount(kept.codes, weights=kept.tokens, minlength=n_rollouts)  # (rollouts,)
    n_kept_rollouts = int((rows_kept > 0).sum())
    pairs = np.unique(np.stack([kept.codes, kept.mini_batch]), axis=1) if len(kept.codes) else np.zeros((2, 0), int)
    spread = np.bincount(pairs[0], minlength=n_rollouts)  # (rollouts,): mini-batches a rollout's rows land in
    base = {
        "rollout_id": rollouts.ids,
        "uid": row_frame["uid"].to_numpy()[first],
        "rows": rollouts.sizes,
        "rows_kept": rows_kept,
        "tokens_kept": tokens_kept.astype(np.int64),
        "reward": row_frame["reward"].to_numpy()[first],
        "mini_batches": spread,
    }
    n_mb = int(kept.mini_batch.max(initial=-1)) + 1
    parts, totals, batches = [], [], []
    for mode in modes:
        row_weight = kept.token_weights[mode] * kept.tokens  # (kept,)
        weight = np.bincount(kept.codes, weights=row_weight, minlength=n_rollouts)  # (rollouts,)
        total = weight.sum()
        share = weight / total if total > 0 else np.full(n_rollouts, np.nan)
        mb_weight = np.bincount(kept.mini_batch, weights=row_weight, minlength=n_mb)  # (mini_batches,)
        for level in levels:
            row_mass = kept.token_weights[mode] * kept.advantage_sums[level]  # (kept,)
            mass = np.bincount(kept.codes, weights=row_mass, minlength=n_rollouts)
            advantage = np.bincount(kept.codes, weights=kept.advantage_sums[level], minlength=n_rollouts)
            with np.errstate(invalid="ignore", divide="ignore"):
                advantage = np.where(tokens_kept > 0, advantage / tokens_kept, np.nan)
            parts.append(
                {
                    "mode": mode,
                    "rollout_level": level,
                    **base,
                    "advantage": advantage,
                    "weight": weight,
                    "mass": mass,
                    "share": share,
                    "relative_weight": share * n_kept_rollouts,
                }
            )
            alive = weight[rows_kept > 0]
            totals.append(
                {
                    "mode": mode,
                    "rollout_level": level,
                    "total_weight": total,
                    "total_mass": mass.sum(),
                    "rows_kept": len(kept.index),
                    "rollouts_kept": n_kept_rollouts,
                    "mini_batches": n_mb,
                    "weight_ratio": alive.max() / alive.min() if len(alive) and alive.min() > 0 else np.nan,
                }
            )
            batches.append(
                {
                    "mode": mode,
                    "rollout_level": level,
                    "mini_batch": np.arange(n_mb),
                    "rows": np.bincount(kept.mini_batch, minlength=n_mb),
                    "rollouts": np.bincount(pairs[1], minlength=n_mb),
                    "total_weight": mb_weight,
                    "total_mass": np.bincount(kept.mini_batch, weights=row_mass, minlength=n_mb),
                }
            )
    rollout_frame = _concat(parts, n_rollouts)
    mini_batch_frame = _concat(batches, n_mb)
    return rollout_frame, pd.DataFrame(totals), mini_batch_frame


def _concat(parts: list[dict[str, Any]], length: int) -> pd.DataFrame:
    """Stack per-setting column dicts (scalars broadcast) into one frame, column by column: faster than concat."""
    if not parts:
        return pd.DataFrame()
    columns = {}
    for key in parts[0]:
        columns[key] = np.concatenate([np.broadcast_to(np.asarray(p[key]), (length,)) for p in parts])
    return pd.DataFrame(columns)
