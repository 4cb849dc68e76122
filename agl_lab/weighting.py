"""How much each rollout weighs in the policy gradient, under every loss normalization the field uses.

For one batch of rows the analysis runs the trainer's own steps: drops and mini-batch alignment with the
update cap (:func:`agl_lab.pipeline.select_rows`), rewards, then the advantage, rollout-level
(:func:`agl_lab.compute_rollout_level_advantage`) or verl's ``compute_advantage``. Each kept token t of
row i then gets a weight ``w = ∂L/∂ℓ``: how much the loss ``L`` of its PPO mini-batch moves with the token's
policy-gradient term ``ℓ = −A·ratio``. At ratio 1 (a step's first update) the gradient is ``−Σ w·A·∇log π``:

* ``weight`` of a rollout, ``Σ w`` over its kept tokens: its policy-gradient mass for a unit advantage;
* ``mass``, ``Σ w·A``: its actual mass, signed like its advantage;
* ``share``, weight / the batch's total weight; ``relative_weight`` = share × rollouts kept (1 = fair share).

Per mini-batch b with ``N_b`` trainable tokens and ``G_b`` rows (verl 0.9.1 hands ``agg_loss``
``batch_num_tokens`` and ``global_batch_size = ppo_mini_batch_size × rollout.n`` per mini-batch), a row of
``n`` tokens, a rollout of ``T`` kept tokens, ``N`` kept rows and ``R`` kept rollouts:

    token-mean                 w = 1 / N_b               seq-mean-token-sum          w = 1 / G_b
    seq-mean-token-mean        w = 1 / (n · G_b)         seq-mean-token-sum-norm     w = 1 / (G_b · H)
    per_rollout_mean:rows      w = 1 / (T · N)           per_rollout_mean:rollouts   w = 1 / (T · R)

``H`` is ``actor.loss_scale_factor``, else the batch's response width (verl's default; verl's no-padding
engine pads per micro-batch, so set ``loss_scale_factor`` for a constant). verl's four are closed forms of
``agg_loss``'s gradient, pinned in tests against autograd through ``agg_loss`` and the registered policy
losses; ``per_rollout_mean``'s come from the trainer's :func:`agl_lab.normalize_advantages_by_rollout`.
Mini-batches are consecutive chunks of the kept rows (verl's default ``actor.shuffle: false``; the
trainer's ``balance_batch`` reordering is not modelled). Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage, compute_response_mask

from agl_lab.advantage import compute_rollout_level_advantage
from agl_lab.config import compose_config
from agl_lab.loss import PER_ROLLOUT_MEAN_LOSS_MODE, normalize_advantages_by_rollout
from agl_lab.pipeline import advantage_kwargs, mini_batch_rows, select_rows
from agl_lab.rows import group_rows, non_tensor_ids, require_fields, rows_from_plan
from agl_lab.update_cap import same_reward_rows

__all__ = [
    "MODES",
    "MODE_LABELS",
    "VERL_MODES",
    "Weighting",
    "agg_loss_token_weights",
    "analyze_weighting",
    "loss_scale",
    "mode_from_config",
    "mode_settings",
    "seed_example",
]

VERL_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
MODES = (*VERL_MODES, "per_rollout_mean:rows", "per_rollout_mean:rollouts")
MODE_LABELS = {
    "token-mean": "token-mean",
    "token-sum": "token-sum",
    "seq-mean-token-sum": "seq-mean-\ntoken-sum",
    "seq-mean-token-mean": "seq-mean-\ntoken-mean",
    "seq-mean-token-sum-norm": "seq-mean-\ntoken-sum-norm",
    "per_rollout_mean:rows": "per_rollout_mean\n÷ rows (v1.0)",
    "per_rollout_mean:rollouts": "per_rollout_mean\n÷ rollouts (Eq. 16)",
}
_SUPPORTED = (*MODES, "token-sum")
# What the analysis reads; "a+b" = both, a tuple = any one of them.
_NEEDED_FIELDS = (
    "rollout_id_list",
    ("response_mask", "responses+attention_mask"),
    ("token_level_scores", "token_level_rewards"),
)
_ROW = "agl_lab_row"  # non-tensor column that survives select_rows' indexing: which input row each kept row is
FATES = ("kept", "dropped/marked", "dropped/same_reward", "dropped/random")


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
    modes: Sequence[str] = MODES,
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
    unknown = [m for m in modes if m not in _SUPPORTED]
    if unknown:
        raise ValueError(f"unknown weighting modes {unknown}: choose from {list(_SUPPORTED)}")
    if cfg.algorithm.get("use_kl_in_reward", False):
        raise ValueError(
            "the weighting analysis computes advantages without a KL penalty in the reward (it has no log-probs): "
            "set algorithm.use_kl_in_reward=false (Agent Lightning's examples do)"
        )
    require_fields(rows, _NEEDED_FIELDS, purpose=f"the weighting analysis ({', '.join(modes)})")
    slim = _slim(rows)
    rollouts = group_rows(non_tensor_ids(slim, "rollout_id_list"), field="rollout_id_list")
    kept_batch, metrics = select_rows(slim, cfg, seed=seed)
    index = kept_batch.non_tensor_batch[_ROW].astype(np.int64)
    mask = kept_batch.batch["response_mask"]  # (kept, R)
    tokens = mask.sum(dim=-1).numpy().astype(np.float64)  # (kept,)
    mini_bs = mini_batch_rows(cfg)
    mini_batch = np.arange(len(index)) // mini_bs  # (kept,)

    token_weights = {
        mode: _token_weights(mode, kept_batch, tokens=tokens, mini_batch=mini_batch, mini_bs=mini_bs, cfg=cfg)
        for mode in modes
    }
    advantage_sums = {}
    for level in rollout_levels:
        sums, level_metrics = _advantage_sums(kept_batch, cfg, rollout_level=bool(level))
        advantage_sums[bool(level)] = sums
        metrics.update(level_metrics)

    kept = _Kept(index, rollouts.codes[index], tokens, mini_batch, token_weights, advantage_sums)
    row_frame = _row_frame(slim, rollouts, kept, marked=_marked(slim))
    rollout_frame, totals, mini_batches = _frames(row_frame, rollouts, kept, modes, list(advantage_sums))
    return Weighting(row_frame, rollout_frame, totals, mini_batches, kept), metrics


def agg_loss_token_weights(
    loss_agg_mode: str,
    *,
    row_tokens: np.ndarray,
    mini_batch: np.ndarray,
    global_batch_size: int,
    horizon: float,
) -> np.ndarray:
    """∂ agg_loss / ∂ loss_mat for each row's trainable tokens (the same for all tokens of a row), dp_size 1.

    ``row_tokens``: (rows,) trainable tokens; ``mini_batch``: (rows,) mini-batch of each row; ``global_batch_size``:
    rows per mini-batch as verl passes it; ``horizon``: ``loss_scale_factor`` of ``seq-mean-token-sum-norm``.
    """
    row_tokens = np.asarray(row_tokens, dtype=np.float64)
    if loss_agg_mode == "token-mean":
        batch_num_tokens = np.bincount(mini_batch, weights=row_tokens)  # (mini_batches,)
        return 1.0 / np.maximum(batch_num_tokens[mini_batch], 1.0)
    if loss_agg_mode == "token-sum":
        return np.ones_like(row_tokens)
    if loss_agg_mode == "seq-mean-token-sum":
        return np.full_like(row_tokens, 1.0 / global_batch_size)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return np.full_like(row_tokens, 1.0 / (global_batch_size * horizon))
    if loss_agg_mode == "seq-mean-token-mean":
        return 1.0 / ((row_tokens + 1e-8) * global_batch_size)  # verl's 1e-8 guard against empty rows
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}: choose from {['token-sum', *VERL_MODES]}")


def loss_scale(batch: DataProto, cfg: DictConfig) -> float:
    """The step's total per-token loss weight ``Σ ∂L/∂ℓ`` over its trained rows, for the config's loss mode.

    ``batch``: the rows that reach the update (after drops). Summed over one pass of the PPO mini-batches:
    ``n_rollouts / n_rows`` under per_rollout_mean's v1.0 divisor (it drifts with the rows per rollout), 1
    under Eq. 16, one per mini-batch under token-mean. The trainer logs it as ``lab/loss_scale``.
    """
    if len(batch) == 0:
        return 0.0
    tokens = batch.batch["response_mask"].sum(dim=-1).numpy().astype(np.float64)  # (rows,)
    mini_bs = mini_batch_rows(cfg)
    weights = _token_weights(
        mode_from_config(cfg), batch, tokens=tokens, mini_batch=np.arange(len(tokens)) // mini_bs, mini_bs=mini_bs,
        cfg=cfg,
    )  # fmt: skip
    return float((weights * tokens).sum())


def mode_settings(mode: str) -> dict[str, str]:
    """The config keys (dotted) that select ``mode`` in Agent Lightning's trainer."""
    if mode not in _SUPPORTED:
        raise ValueError(f"unknown weighting mode {mode!r}: choose from {list(_SUPPORTED)}")
    if mode.startswith(f"{PER_ROLLOUT_MEAN_LOSS_MODE}:"):
        return {
            "actor_rollout_ref.actor.policy_loss.loss_mode": PER_ROLLOUT_MEAN_LOSS_MODE,
            "lab.per_rollout_divisor": mode.split(":", 1)[1],
        }
    return {"actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla", "actor_rollout_ref.actor.loss_agg_mode": mode}


def mode_from_config(cfg: DictConfig) -> str:
    """The weighting mode a composed config trains with (other verl losses aggregate like ``vanilla``)."""
    actor = cfg.actor_rollout_ref.actor
    if actor.policy_loss.loss_mode == PER_ROLLOUT_MEAN_LOSS_MODE:
        return f"{PER_ROLLOUT_MEAN_LOSS_MODE}:{cfg.lab.per_rollout_divisor}"
    return str(actor.loss_agg_mode)


def seed_example() -> tuple[DataProto, DictConfig]:
    """Agent Lightning's worked example: rollout A = rows of 2 and 1 tokens, B = one row of 3, all 3 rows trained.

    A succeeded (reward 1), B failed (reward 0), both on one prompt; one mini-batch of 3 rows, no cap.
    """
    rows = rows_from_plan([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3])])
    cfg = compose_config(
        overrides={
            "algorithm": {"adv_estimator": "grpo"},
            "actor_rollout_ref": {"rollout": {"n": 1}, "actor": {"ppo_mini_batch_size": 3}},
        }
    )
    return rows, cfg


def _slim(rows: DataProto) -> DataProto:
    """Only the fields steps 1–4 read, plus the input row index: selection then copies a fraction of the batch."""
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
    non_tensors = dict(rows.non_tensor_batch)
    non_tensors[_ROW] = np.arange(len(rows), dtype=np.int64)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(rows.meta_info))


def _token_weights(
    mode: str, batch: DataProto, *, tokens: np.ndarray, mini_batch: np.ndarray, mini_bs: int, cfg: DictConfig
) -> np.ndarray:
    if not mode.startswith(f"{PER_ROLLOUT_MEAN_LOSS_MODE}:"):
        horizon = cfg.actor_rollout_ref.actor.get("loss_scale_factor", None) or batch.batch["response_mask"].shape[-1]
        return agg_loss_token_weights(
            mode, row_tokens=tokens, mini_batch=mini_batch, global_batch_size=mini_bs, horizon=float(horizon)
        )
    if len(batch) == 0:
        return np.zeros(0)
    # The trainer's own normalization applied to a unit advantage gives each token's weight, and the
    # per_rollout_mean loss sums, so ∂L/∂ℓ is that weight. The normalization reads the mask only through its
    # row sums, so a (kept, 1) column of token counts stands in for the (kept, R) mask at 1/R of the cost
    # (tests/test_weighting.py checks both against the loss's autograd gradient).
    counts = torch.from_numpy(tokens).unsqueeze(-1)  # (kept, 1)
    unit = normalize_advantages_by_rollout(
        torch.ones_like(counts),
        counts,
        batch.non_tensor_batch["rollout_id_list"],
        num_trained_rows=len(batch),
        divisor=mode.split(":", 1)[1],
    )  # (kept, 1)
    return unit.squeeze(-1).numpy()


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
    sums = (work.batch["advantages"] * mask).sum(dim=-1)  # (kept,)
    return sums.double().numpy(), metrics


def _marked(batch: DataProto) -> np.ndarray:
    if "is_drop_mask" not in batch.batch.keys():
        return np.zeros(len(batch), dtype=bool)
    return batch.batch["is_drop_mask"].bool().numpy()


def _row_frame(slim: DataProto, rollouts, kept: _Kept, *, marked: np.ndarray) -> pd.DataFrame:
    n = len(slim)
    group_key = "data_id_list" if "data_id_list" in slim.non_tensor_batch else None
    fate = np.full(n, FATES[0], dtype=object)
    fate[marked] = "dropped/marked"
    capped = np.ones(n, dtype=bool)
    capped[kept.index] = False
    capped &= ~marked
    if capped.any():
        # The cap drops same-reward groups' rows first and only then others, so a dropped row is a
        # same_reward drop exactly when its uid group had one reward (rows without a group id are their own).
        survivors = np.flatnonzero(~marked)
        groups = slim.non_tensor_batch[group_key][survivors] if group_key else survivors.astype(object)
        probe = DataProto.from_dict(
            tensors={"token_level_scores": slim.batch["token_level_scores"][torch.from_numpy(survivors)]},
            non_tensors={"uid": groups},
        )
        same = np.zeros(n, dtype=bool)
        same[survivors[same_reward_rows(probe)]] = True
        fate[capped & same] = "dropped/same_reward"
        fate[capped & ~same] = "dropped/random"
    mini_batch = np.full(n, -1, dtype=np.int64)
    mini_batch[kept.index] = kept.mini_batch
    frame = pd.DataFrame({"row": np.arange(n), "rollout_id": slim.non_tensor_batch["rollout_id_list"]})
    frame["uid"] = slim.non_tensor_batch[group_key] if group_key else frame["row"]
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
