"""Turns inside rows: which of a row's tokens belong to which LLM call, and the reward each call earned.

A row's trainable tokens come in runs. At the ``transition`` level a row is one call, one run. At the
``trajectory`` level it is every call trace aggregation merged, each call's response (mask 1) after the observation
that preceded it (mask 0); verl's multi-turn agent loop lays its rows out the same way (assistant tokens 1, tool and
user tokens 0). A **turn** here is a maximal run of trainable tokens together with the untrainable tokens after it,
up to the next run: a reward that truncation pushed onto a trailing observation token still counts for its turn.

A turn's reward is the sum of ``token_level_rewards`` over its tokens (a reward on a token before the row's first run
counts for the first turn). With per-turn rewards (:mod:`agl_lab.core.turn_rewards`) that is the call's intermediate
reward, and a rollout's last turn holds its outcome; with Agent Lightning's one reward per rollout, every row's last
turn holds the rollout's reward and its other turns 0.

Limit: two calls with nothing untrainable between them read as one turn. A chat template always puts tokens there,
the lab's task puts its answer there, and the synthetic generator refuses per-turn rewards at the trajectory level
without observation tokens. The per-turn estimators (:mod:`agl_lab.core.turn_estimators`) read rows through these
functions. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["broadcast_turns", "last_turn_values", "turn_ids", "turn_values"]


def turn_ids(response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's turn in its row (int64, -1 before the row's first trainable token) and each row's turn count.

    ``response_mask``: (rows, R), any dtype (non-zero = trainable). Returns ``(ids, counts)``: (rows, R) and (rows,).
    """
    trainable = response_mask.detach() != 0  # (rows, R)
    before = F.pad(trainable[:, :-1], (1, 0), value=False)  # (rows, R): the previous token was trainable
    starts = trainable & ~before  # (rows, R): a run of trainable tokens begins here
    return starts.long().cumsum(dim=-1) - 1, starts.sum(dim=-1)


def turn_values(values: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ ``values`` over each turn's tokens, in float64: (rows, K) with K the most turns of a row, and (rows,) counts.

    Entries past a row's last turn are 0. ``values`` and ``response_mask``: (rows, R).
    """
    _same_shape(values, response_mask)
    ids, counts = turn_ids(response_mask)  # (rows, R), (rows,)
    width = max(int(counts.max()) if counts.numel() else 0, 1)
    out = torch.zeros(values.shape[0], width, dtype=torch.float64, device=values.device)  # (rows, K)
    out.scatter_add_(1, ids.clamp_min(0), values.detach().double())
    out[counts == 0] = 0.0  # a row without a trainable token has no turn
    return out, counts


def last_turn_values(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(rows,) float64: Σ ``values`` over each row's last turn (0 for a row without a trainable token).

    On a rollout's last row that is its outcome, under per-turn rewards and under Agent Lightning's placement alike.
    Equal bit for bit to reading :func:`turn_values`' last turn, without its (rows, R) float64 and int64 tensors (the
    diagnostics call this every step): the last turn starts at the row's last run of trainable tokens (at column 0 for
    a one-turn row, whose leading tokens count for it), and its non-zero values are added in token order from 0.0,
    as ``scatter_add_`` adds them (a zero never changes a sum that starts at +0.0).

    Both the runs' starts and the non-zero values are few (about one per turn and one per row), so the (rows, R)
    work is three passes over bool tensors (trainable, run starts, the values' non-zeros) and the rest runs on the
    coordinates ``nonzero`` lists in row-major order.
    """
    _same_shape(values, response_mask)
    rows, width = response_mask.shape
    out = np.zeros(rows, dtype=np.float64)  # (rows,)
    if rows == 0 or width == 0:
        return torch.from_numpy(out).to(values.device)
    mask = response_mask.detach()
    trainable = mask if mask.dtype == torch.bool else mask != 0  # (rows, R)
    later = (trainable[:, 1:] > trainable[:, :-1]).cpu().numpy()  # (rows, R - 1): a run starts one column right
    first_row = np.flatnonzero(trainable[:, 0].cpu().numpy())  # rows whose first run starts at column 0
    start_row, start_col = np.divmod(np.flatnonzero(later), max(width - 1, 1))  # numpy's scan of a sparse bool: fast
    start_row = np.concatenate([first_row, start_row])  # (starts,)
    start_col = np.concatenate([np.zeros(len(first_row), np.int64), start_col + 1])  # (starts,)
    counts = np.bincount(start_row, minlength=rows)  # (rows,): runs of trainable tokens, i.e. turns
    last_start = np.zeros(rows, dtype=np.int64)  # (rows,)
    np.maximum.at(last_start, start_row, start_col)
    first = np.where(counts >= 2, last_start, 0)  # (rows,): the last turn's first column
    value_row, value_col = values.detach().nonzero(as_tuple=True)  # row-major: each row's tokens in order
    value_row, value_col = value_row.cpu().numpy(), value_col.cpu().numpy()
    taken = (counts[value_row] > 0) & (value_col >= first[value_row])  # (non-zeros,)
    picked = values.detach()[torch.from_numpy(value_row[taken]), torch.from_numpy(value_col[taken])]  # (taken,)
    np.add.at(out, value_row[taken], picked.double().cpu().numpy())  # in order, unbuffered
    return torch.from_numpy(out).to(values.device)  # (rows,)


def broadcast_turns(per_turn: torch.Tensor, response_mask: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
    """(rows, R) in ``dtype``: each trainable token gets its turn's entry of ``per_turn`` (rows, K); others 0."""
    ids, _ = turn_ids(response_mask)  # (rows, R)
    if per_turn.shape[1] == 0:
        return torch.zeros(response_mask.shape, dtype=dtype, device=response_mask.device)
    gathered = per_turn.gather(1, ids.clamp(0, per_turn.shape[1] - 1))  # (rows, R)
    return (gathered * (response_mask.detach() != 0)).to(dtype)


def _same_shape(values: torch.Tensor, response_mask: torch.Tensor) -> None:
    if values.shape != response_mask.shape:
        raise ValueError(
            f"values have shape {tuple(values.shape)} but response_mask has {tuple(response_mask.shape)}: both must "
            "be (rows, response_length)"
        )
