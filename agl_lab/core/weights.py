"""Per-token loss weights: how much each trained token counts in its PPO mini-batch's loss, per loss mode.

A token t of row i with policy-gradient term ``ℓ = −A·ratio`` gets the weight ``w = ∂L/∂ℓ`` in the loss ``L``
of its mini-batch; at ratio 1 (a step's first update) the gradient is ``−Σ w·A·∇log π``. Every function here
takes the kept rows' :class:`TokenLayout` (in the trainer's order) and returns ``w`` for each row's trainable
tokens, shape (kept,) — the same for all tokens of a row in every mode here. Per mini-batch b with ``N_b``
trainable tokens and ``G`` rows (verl 0.9.1 hands ``agg_loss`` ``batch_num_tokens`` and
``global_batch_size = ppo_mini_batch_size × rollout.n`` per mini-batch), a row of ``n`` tokens, a rollout of
``T`` kept tokens, ``N`` kept rows and ``R`` kept rollouts:

    token-mean                 w = 1 / N_b               seq-mean-token-sum          w = 1 / G
    seq-mean-token-mean        w = 1 / (n · G)           seq-mean-token-sum-norm     w = 1 / (G · H)
    token-sum                  w = 1                     per_rollout_mean            w = 1 / (T · N), or 1 / (T · R)

``H`` is ``actor.loss_scale_factor``, else the batch's response width (verl's default). verl's modes are closed
forms of ``agg_loss``'s gradient, pinned in tests against autograd through ``agg_loss``; ``per_rollout_mean``'s
come from the trainer's own :func:`agl_lab.core.loss.normalize_advantages_by_rollout`. The catalogue that names
these functions, with their labels and sources, is :mod:`agl_lab.config.modes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agl_lab.core.loss import normalize_advantages_by_rollout

__all__ = [
    "TokenLayout",
    "per_rollout_mean_rollouts",
    "per_rollout_mean_rows",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "token_mean",
    "token_sum",
]


@dataclass(frozen=True)
class TokenLayout:
    """What a mode's weights can depend on: the kept rows, in the order the actor update sees them."""

    row_tokens: np.ndarray  # (kept,) float64: trainable tokens of each row
    rollout: np.ndarray  # (kept,) int64: rollout code of each row
    mini_batch: np.ndarray  # (kept,) int64: PPO mini-batch of each row (consecutive chunks of mini_batch_rows)
    mini_batch_rows: int  # G: rows per mini-batch, verl's global_batch_size
    horizon: float  # H: actor.loss_scale_factor, else the response width

    @property
    def n_rows(self) -> int:
        return len(self.row_tokens)


def token_mean(layout: TokenLayout) -> np.ndarray:
    batch_num_tokens = np.bincount(layout.mini_batch, weights=layout.row_tokens)  # (mini_batches,)
    return 1.0 / np.maximum(batch_num_tokens[layout.mini_batch], 1.0)


def token_sum(layout: TokenLayout) -> np.ndarray:
    return np.ones(layout.n_rows)


def seq_mean_token_sum(layout: TokenLayout) -> np.ndarray:
    return np.full(layout.n_rows, 1.0 / layout.mini_batch_rows)


def seq_mean_token_sum_norm(layout: TokenLayout) -> np.ndarray:
    return np.full(layout.n_rows, 1.0 / (layout.mini_batch_rows * layout.horizon))


def seq_mean_token_mean(layout: TokenLayout) -> np.ndarray:
    return 1.0 / ((layout.row_tokens + 1e-8) * layout.mini_batch_rows)  # verl's 1e-8 guard against empty rows


def per_rollout_mean_rows(layout: TokenLayout) -> np.ndarray:
    return _per_rollout_mean(layout, divisor="rows")


def per_rollout_mean_rollouts(layout: TokenLayout) -> np.ndarray:
    return _per_rollout_mean(layout, divisor="rollouts")


def _per_rollout_mean(layout: TokenLayout, *, divisor: str) -> np.ndarray:
    if layout.n_rows == 0:
        return np.zeros(0)
    # The trainer's own normalization applied to a unit advantage gives each token's weight, and the
    # per_rollout_mean loss sums, so ∂L/∂ℓ is that weight. The normalization reads the mask only through its
    # row sums, so a (kept, 1) column of token counts stands in for the (kept, R) mask at 1/R of the cost
    # (tests check both against the loss's autograd gradient).
    counts = torch.from_numpy(np.asarray(layout.row_tokens, dtype=np.float64)).unsqueeze(-1)  # (kept, 1)
    unit = normalize_advantages_by_rollout(
        torch.ones_like(counts), counts, layout.rollout, num_trained_rows=layout.n_rows, divisor=divisor
    )  # (kept, 1)
    return unit.squeeze(-1).numpy()
