"""Per-token loss weights: how much each trained token counts in its optimizer step's loss, per loss normalization.

A token t of row i with policy-gradient term ``ℓ = −A·ratio`` (or ``−A·c·log π``) gets the weight
``w = −(1/A)·∂L/∂log π`` in the loss ``L`` the optimizer applies for its mini-batch (micro-batch losses summed,
gradients averaged over data-parallel ranks), at ratio 1 (a step's first update); the gradient is then
``−Σ w·A·∇log π``. Every function takes the kept rows' :class:`TokenLayout` (in the trainer's order) and returns
``w`` for each row's trainable tokens, shape (kept,): the same for all tokens of a row in every mode here.

Symbols: a row of ``n`` trainable tokens; PPO mini-batch b (one optimizer step) with ``N_b`` tokens and ``G`` rows
(verl's ``global_batch_size = ppo_mini_batch_size × rollout.n``); micro-batch μ with ``B_μ`` rows and ``N_μ``
tokens, ``M_b`` micro-batches in mini-batch b over all ``D`` data-parallel ranks; a rollout of ``T`` kept tokens
in ``k`` kept rows; ``N`` kept rows and ``R`` kept rollouts in the step; a prompt group (uid) with ``T_p`` tokens
in mini-batch b, which holds ``P_b`` groups; ``H`` = ``actor.loss_scale_factor``, else the response width.

    verl loss_agg_mode        token-mean 1/N_b · token-sum 1 · seq-mean-token-sum 1/G · seq-mean-token-mean
                              1/(n·G) · seq-mean-token-sum-norm 1/(G·H)
    verl policy losses        sapo 1/(n·G) (forces seq-mean-token-mean) · geo_mean 1/(n·B_μ·D) (a plain mean over
                              the micro-batch's rows; the engine sums micro-batches without dividing)
    Agent Lightning           per_rollout_mean 1/(T·N) (v1.0) or 1/(T·R) (Eq. 16)
    TRL GRPO loss_type        grpo 1/(n·G) · bnpo 1/(N_μ·M_b) · dr_grpo 1/(G·H) · dapo 1/N_b
    SkyRL loss_reduction      prompt_mean 1/(P_b·T_p)
    agl_lab                   rollout_mean 1/(R·k·n): mean over rollouts of the mean over their rows (uni-agent
                              #185's session mean)
    verl PR #7580 (proposed)  session_equal N/(R·k·n·G) · partition_preserving k/(T·G): seq-mean-token-mean with
                              each row's loss_weight 1/k or n/mean(n), rescaled to mean 1 over the step's N rows
                              (revision 2; agl_lab.core.row_weights)

verl's closed forms are pinned in tests against autograd through ``agg_loss`` and the registered losses;
``per_rollout_mean``'s equal the trainer's own :func:`agl_lab.core.loss.normalize_advantages_by_rollout` (tested).
The catalogue that names these functions, with labels, sources and what each depends on, is
:mod:`agl_lab.config.modes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agl_lab.core import row_weights

__all__ = [
    "TokenLayout",
    "geo_mean",
    "per_rollout_mean_rollouts",
    "per_rollout_mean_rows",
    "rollout_mean",
    "sapo",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "partition_preserving",
    "seq_mean_token_sum_norm",
    "session_equal",
    "skyrl_prompt_mean",
    "token_layout",
    "token_mean",
    "token_sum",
    "trl_bnpo",
    "trl_dapo",
    "trl_dr_grpo",
    "trl_grpo",
]


@dataclass(frozen=True)
class TokenLayout:
    """What a mode's weights can depend on: the kept rows, in the order the actor update sees them."""

    row_tokens: np.ndarray  # (kept,) float64: trainable tokens of each row
    rollout: np.ndarray  # (kept,) int64: rollout code of each row
    mini_batch: np.ndarray  # (kept,) int64: PPO mini-batch (optimizer step) of each row
    mini_batch_rows: int  # G: rows per mini-batch, verl's global_batch_size
    horizon: float  # H: actor.loss_scale_factor, else the response width
    micro_batch: np.ndarray | None = None  # (kept,) int64: micro-batch over all ranks; None: one per mini-batch
    dp_size: int = 1  # D: data-parallel ranks (gradients averaged over them)
    group: np.ndarray | None = None  # (kept,) int64: prompt group (uid) code; None: each rollout its own

    @property
    def n_rows(self) -> int:
        return len(self.row_tokens)

    @property
    def micro(self) -> np.ndarray:
        return self.mini_batch if self.micro_batch is None else self.micro_batch

    @property
    def groups(self) -> np.ndarray:
        return self.rollout if self.group is None else self.group


def token_layout(
    row_tokens: np.ndarray,
    rollout: np.ndarray,
    *,
    mini_batch_rows: int,
    horizon: float,
    micro_batch_rows: int | None = None,
    dp_size: int = 1,
    group: np.ndarray | None = None,
) -> TokenLayout:
    """The layout of kept rows as verl's actor update splits them: ranks, then mini-batches, then micro-batches.

    verl hands rank d the d-th contiguous chunk of the batch; each rank cuts its chunk into mini-batches of
    ``G / D`` rows (mini-batch b of the step is the b-th of every rank) and those into micro-batches of
    ``micro_batch_rows`` rows (None: one micro-batch per rank and mini-batch). With ``dp_size=1`` mini-batches are
    consecutive chunks of ``G`` rows, as in the lab trainer.
    """
    n = len(row_tokens)
    if mini_batch_rows < 1 or dp_size < 1 or mini_batch_rows % dp_size:
        raise ValueError(
            f"a mini-batch of {mini_batch_rows} rows (ppo_mini_batch_size × rollout.n) cannot be split over "
            f"{dp_size} data-parallel ranks: choose a dp size that divides it"
        )
    if micro_batch_rows is not None and micro_batch_rows < 1:
        raise ValueError(f"micro-batches must hold at least 1 row, got ppo_micro_batch_size_per_gpu={micro_batch_rows}")
    per_rank_mini = mini_batch_rows // dp_size
    micro = per_rank_mini if micro_batch_rows is None else min(micro_batch_rows, per_rank_mini)
    micro_per_rank = -(-per_rank_mini // micro)  # ceil
    position = np.arange(n)
    shard = max(-(-n // dp_size), 1)  # rows per rank (n is a multiple of G, so of D, after alignment)
    rank, local = np.divmod(position, shard)
    mini, offset = np.divmod(local, per_rank_mini)
    micro_batch = (mini * dp_size + rank) * micro_per_rank + offset // micro
    return TokenLayout(
        row_tokens=np.asarray(row_tokens, dtype=np.float64),
        rollout=np.asarray(rollout, dtype=np.int64),
        mini_batch=mini.astype(np.int64),
        mini_batch_rows=int(mini_batch_rows),
        horizon=float(horizon),
        micro_batch=micro_batch.astype(np.int64),
        dp_size=int(dp_size),
        group=None if group is None else np.asarray(group, dtype=np.int64),
    )


# --- verl 0.9.1: agg_loss's loss_agg_mode --------------------------------------------------------------------


def token_mean(layout: TokenLayout) -> np.ndarray:
    batch_num_tokens = np.bincount(layout.mini_batch, weights=layout.row_tokens)  # (mini_batches,) over all ranks
    return 1.0 / np.maximum(batch_num_tokens[layout.mini_batch], 1.0)


def token_sum(layout: TokenLayout) -> np.ndarray:
    return np.ones(layout.n_rows)


def seq_mean_token_sum(layout: TokenLayout) -> np.ndarray:
    return np.full(layout.n_rows, 1.0 / layout.mini_batch_rows)


def seq_mean_token_sum_norm(layout: TokenLayout) -> np.ndarray:
    return np.full(layout.n_rows, 1.0 / (layout.mini_batch_rows * layout.horizon))


def seq_mean_token_mean(layout: TokenLayout) -> np.ndarray:
    return 1.0 / ((layout.row_tokens + 1e-8) * layout.mini_batch_rows)  # verl's 1e-8 guard against empty rows


# --- verl 0.9.1: registered policy losses that aggregate their own way ----------------------------------------


def sapo(layout: TokenLayout) -> np.ndarray:
    # sapo calls agg_loss with "seq-mean-token-mean" whatever loss_agg_mode says; its soft gate's slope at ratio 1
    # is σ'(0)·4 = 1, so the weight is seq-mean-token-mean's
    return seq_mean_token_mean(layout)


def geo_mean(layout: TokenLayout) -> np.ndarray:
    # torch.mean over the micro-batch's rows of −Ā·exp(mean_t log-ratio): Ā = A·n/(n+1e-8), ∂/∂log π = 1/(n+1e-8);
    # the engine adds micro-batch losses without dividing, and ranks average gradients (÷D)
    n = layout.row_tokens
    rows_in_micro = np.bincount(layout.micro)[layout.micro]  # (kept,) B_μ
    return n / (n + 1e-8) ** 2 / (rows_in_micro * layout.dp_size)


# --- Agent Lightning: per_rollout_mean ---------------------------------------------------------------------------


def per_rollout_mean_rows(layout: TokenLayout) -> np.ndarray:
    return _per_rollout_mean(layout, divisor="rows")


def per_rollout_mean_rollouts(layout: TokenLayout) -> np.ndarray:
    return _per_rollout_mean(layout, divisor="rollouts")


def _per_rollout_mean(layout: TokenLayout, *, divisor: str) -> np.ndarray:
    # The trainer's normalization (agl_lab.core.loss.normalize_advantages_by_rollout) on a unit float64 advantage:
    # each token weighs 1 / max(T·N, 1) (or T·R), T the rollout's tokens; the per_rollout_mean loss sums, so ∂L/∂ℓ is
    # that weight. In numpy, so the diagnostics load no torch; tests hold it equal to the normalization and to the
    # loss's autograd gradient.
    if layout.n_rows == 0:
        return np.zeros(0)
    tokens = np.bincount(layout.rollout, weights=layout.row_tokens)  # (rollouts,) T
    count = layout.n_rows if divisor == "rows" else np.count_nonzero(np.bincount(layout.rollout))  # rollouts present
    return 1.0 / np.maximum(tokens[layout.rollout] * count, 1.0)


# --- TRL GRPOTrainer loss_type (trl 1.16): G = per_device_train_batch_size × gradient accumulation × processes ---


def trl_grpo(layout: TokenLayout) -> np.ndarray:
    # per-sequence token mean (count clamped at 1), mean over the micro-batch, ÷ accumulation, DDP mean
    return 1.0 / (np.maximum(layout.row_tokens, 1.0) * layout.mini_batch_rows)


def trl_bnpo(layout: TokenLayout) -> np.ndarray:
    # tokens summed ÷ this micro-batch's tokens (clamped at 1), ÷ accumulation steps, DDP mean: 1/(N_μ·M_b)
    micro = layout.micro
    if len(micro) == 0:
        return np.zeros(0)
    micro_tokens = np.bincount(micro, weights=layout.row_tokens)  # (micro-batches,)
    mini_of_micro = np.full(len(micro_tokens), -1)
    mini_of_micro[micro] = layout.mini_batch  # every row of a micro-batch is in the same mini-batch
    micro_count = np.bincount(mini_of_micro[mini_of_micro >= 0])  # (mini-batches,) M_b
    return 1.0 / (np.maximum(micro_tokens[micro], 1.0) * micro_count[layout.mini_batch])


def trl_dr_grpo(layout: TokenLayout) -> np.ndarray:
    # tokens summed ÷ (sequences × max_completion_length): the response limit plays H's part
    return np.full(layout.n_rows, 1.0 / (layout.mini_batch_rows * layout.horizon))


def trl_dapo(layout: TokenLayout) -> np.ndarray:
    # tokens summed ÷ the generation batch's tokens (× GA / steps_per_generation, 1 by default): the step's tokens
    return token_mean(layout)


# --- SkyRL loss_reduction ----------------------------------------------------------------------------------------


def skyrl_prompt_mean(layout: TokenLayout) -> np.ndarray:
    # token mean within each prompt group of the mini-batch, then a mean over the mini-batch's groups
    cell = _codes(layout.mini_batch, layout.groups)  # (kept,) one code per (mini-batch, group)
    cell_tokens = np.bincount(cell, weights=layout.row_tokens)  # (cells,) T_p
    cell_mini = np.zeros(len(cell_tokens), dtype=np.int64)
    cell_mini[cell] = layout.mini_batch
    groups_per_mini = np.bincount(cell_mini, weights=(cell_tokens > 0).astype(float))  # (mini-batches,) P_b
    return 1.0 / (np.maximum(cell_tokens[cell], 1.0) * np.maximum(groups_per_mini[layout.mini_batch], 1.0))


# --- agl_lab: rollout_mean ----------------------------------------------------------------------------------------


def rollout_mean(layout: TokenLayout) -> np.ndarray:
    # mean over the step's rollouts of the mean over their rows of each row's token mean (rows without a
    # trainable token have no mean and are left out of k and R)
    alive = layout.row_tokens > 0
    rows = np.bincount(layout.rollout, weights=alive.astype(float))  # (rollouts,) k
    n_rollouts = max(int((rows > 0).sum()), 1)
    return 1.0 / (n_rollouts * np.maximum(rows[layout.rollout], 1.0) * np.maximum(layout.row_tokens, 1.0))


# --- verl PR #7580 (open: proposed, not released; revision of 2026-09-19): loss_weight under seq-mean-token-mean ---


def session_equal(layout: TokenLayout) -> np.ndarray:
    # loss_weight 1/k rescaled to mean 1 over the step's rows (× N/R) on seq-mean-token-mean's 1/(n·G): each
    # rollout's mass is N/(R·G) however many rows it became
    return row_weights.loss_weights(layout.row_tokens, layout.rollout, mode="session_equal") * seq_mean_token_mean(
        layout
    )


def partition_preserving(layout: TokenLayout) -> np.ndarray:
    # loss_weight n / mean(n) = n·k/T (mean 1 over the step's rows already, unless a rollout has no token) on
    # 1/(n·G): w = k/(T·G) (verl's 1e-8 kept), a rollout's mass k/G as unweighted
    weight = row_weights.loss_weights(layout.row_tokens, layout.rollout, mode="partition_preserving")
    return weight * seq_mean_token_mean(layout)


def _codes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """One code per distinct (first, second) pair of non-negative integer arrays (not necessarily dense)."""
    if len(first) == 0:
        return np.zeros(0, dtype=np.int64)
    key = first * (int(second.max()) + 1) + second
    return np.unique(key, return_inverse=True)[1].reshape(-1) if key.max() > 8 * len(key) + 1024 else key
