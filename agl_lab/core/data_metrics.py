"""verl's data metrics of a step's rows (``critic/*``, ``response_length/*``, ``prompt_length/*``), from verl's own
``compute_data_metrics``, without its two slow passes.

verl selects the response tokens of ``advantages`` and of ``returns`` with ``torch.masked_select``, and on a CPU each
of those is one serial pass: 57–68 ms at 10k rows × 512 tokens on 2 cores (``benchmarks/bench_batch_math.py``),
about half of the lab's whole step. :func:`data_metrics` takes the mask once as a numpy bool array (true where
``.bool()`` would be) and selects both tensors with numpy's boolean indexing (7 ms for both; torch's ``nonzero`` and
``index_select`` took 17 ms): the same 1-D tensors, values and order, as ``masked_select`` gives, so their mean, max
and min are the same bit for bit. verl's function then computes every key on the rows as they are, except that it
sees a one-column stand-in for those two tensors and the mask; the six numbers it took from the stand-in are replaced
by the selected ones. The keys, the warnings on an all-False mask and every other number stay verl's, whichever verl
is installed. ``tests/test_data_metrics.py`` compares the result with verl's function on the real rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics

from agl_lab.core.keys import CRITIC_TOKEN_STATS

__all__ = ["data_metrics"]


def data_metrics(batch: DataProto) -> dict[str, Any]:
    """``compute_data_metrics(batch=batch, use_critic=False)``, the same dict, with its token selections done once
    (see the module). ``batch`` is not modified."""
    tensors = batch.batch
    mask = tensors["response_mask"]  # (rows, R)
    unlike = any(tensors[key].shape != mask.shape or tensors[key].device != mask.device for key in CRITIC_TOKEN_STATS)
    if len(batch) == 0 or unlike or mask.device.type != "cpu":
        return compute_data_metrics(batch=batch, use_critic=False)  # empty, broadcast or on a GPU: verl's own way
    mask = mask.detach()
    chosen = (mask if mask.dtype == torch.bool else mask != 0).numpy()  # (rows, R) where .bool() is true (NaN too)
    selected = {key: _select(tensors[key], chosen) for key in CRITIC_TOKEN_STATS}  # (tokens,) each, row-major
    any_token = bool(chosen.any())
    stand_in_mask = torch.zeros(len(batch), 1, dtype=torch.bool)  # (rows, 1): one token where the rows have any
    stand_in_mask[0, 0] = any_token
    stand_in = tensors.copy()  # the same tensors but these three
    for key in CRITIC_TOKEN_STATS:
        stand_in[key] = torch.zeros(len(batch), 1, dtype=tensors[key].dtype)
    stand_in["response_mask"] = stand_in_mask
    metrics = compute_data_metrics(
        batch=DataProto(batch=stand_in, non_tensor_batch=batch.non_tensor_batch, meta_info=batch.meta_info),
        use_critic=False,
    )
    if any_token:  # else verl has said so and given NaN, as it does on the real rows
        for key, prefix in CRITIC_TOKEN_STATS.items():
            values = selected[key]  # (tokens,)
            metrics[f"{prefix}/mean"] = torch.mean(values).detach().item()
            metrics[f"{prefix}/max"] = torch.max(values).detach().item()
            metrics[f"{prefix}/min"] = torch.min(values).detach().item()
    return metrics


def _select(values: torch.Tensor, chosen: np.ndarray) -> torch.Tensor:
    """``values[chosen]`` in row-major order, as a contiguous 1-D tensor of ``values``' dtype: numpy's boolean
    indexing (one pass; bf16, which numpy lacks, moved as its 16-bit patterns)."""
    values = values.detach()
    if values.dtype == torch.bfloat16:
        return torch.from_numpy(values.view(torch.int16).numpy()[chosen]).view(torch.bfloat16)
    return torch.from_numpy(values.numpy()[chosen])
