"""Every random draw of a run from ``lab.seed``, including the draws that libraries make from torch's global generator.

The lab's own draws take generators of their own, seeded per (stream, step) from ``lab.seed`` (the tasks, the
sampler, the drops, the tiny model's weights). Two draws happen inside libraries that read torch's process-wide
generator instead: peft's initial LoRA adapter (``lora_A`` is ``kaiming_uniform_``, :mod:`agl_lab.training.lora`) and
dropout in a model that has any (the tiny model and SmolLM2 have none). Left alone, these depend on what the process
drew before: two cells of a sweep run one after another in one Ray worker would start from different adapters.
:func:`seeded_torch` runs such a block with the global generator seeded from ``lab.seed`` and gives the caller's
generator state back afterwards, so nothing outside the block changes.

Streams (the second number of :func:`derived_seed`): 3 the sampler, 4 the drops (:mod:`agl_lab.training.train_step`),
5 the actor update, 6 the LoRA adapter's initial weights, 7 the step batches of :mod:`agl_lab.training.step_batch`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["LORA_INIT_STREAM", "UPDATE_STREAM", "derived_seed", "seeded_torch"]

UPDATE_STREAM = 5
LORA_INIT_STREAM = 6


def derived_seed(seed: int, *stream: int) -> int:
    """A seed for one stream of ``seed``'s randomness (e.g. ``(stream, step)``), independent of every other stream."""
    return int(np.random.SeedSequence([int(seed), *stream]).generate_state(1)[0])


@contextlib.contextmanager
def seeded_torch(seed: int, *, device: torch.device | None = None) -> Iterator[None]:
    """Run the block with torch's global generator (and ``device``'s, on CUDA) seeded with ``seed``; the caller's
    generator states are restored when it ends."""
    cuda = [device.index or 0] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        yield
