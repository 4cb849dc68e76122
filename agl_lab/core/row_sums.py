"""Exact per-row sums: each row's trainable tokens and float64 row sums, block by block.

Every weighting, loss scale and diagnostic divides by token counts; a bf16 mask summed in its own dtype rounds past 256
tokens, and a (rows, R) float64 copy of a 10k-row step costs more than the arithmetic on it. These two helpers count
exactly, for every mask dtype, without that copy.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["row_blocks", "trainable_tokens"]


def trainable_tokens(response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's trainable tokens, (rows,) float64, exact for every mask dtype (int, bool, float32, bf16).

    A bf16 mask summed in its own dtype rounds past 256 tokens (257 becomes 256); float64 counts exactly to 2**53.
    The mask is read, never written. A bool mask is counted as integers (exact, the same float64 values, without a
    (rows, R) float64 copy: the diagnostics count every step).
    """
    mask = response_mask.detach()  # (rows, R)
    if mask.dtype == torch.bool:
        return mask.sum(dim=-1, dtype=torch.int32).to(torch.float64)  # (rows,)
    return torch.cat([mask[rows].to(torch.float64).sum(dim=-1) for rows in row_blocks(mask)])  # (rows,)


def row_blocks(values: torch.Tensor) -> list[slice]:
    """Consecutive blocks of ``values``' rows whose float64 copies fit in a CPU cache (~4 MiB), at least 2 rows each.

    A (rows, R) float64 temporary costs more to allocate and write than the arithmetic on it; block by block the same
    row sums come out bit for bit: torch reduces each row of a multi-row tensor alone, in one order (one row alone
    could be split across threads, hence 2 rows at least).
    """
    rows = values.shape[0]
    per_block = max(2, 2**19 // max(values[0].numel() if rows else 1, 1))
    bounds = np.linspace(0, rows, max(rows // per_block, 1) + 1).round().astype(np.int64)
    return [slice(int(start), int(stop)) for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]
