"""A world of one process for verl's workers inside the lab, and everything it touches given back afterwards.

verl's workers expect to be one rank of a Ray/torchrun job: a default ``torch.distributed`` process group, the
job's variables in the environment, verl's platform for the device, on a GPU host the process pinned to the GPU's
NUMA node. :mod:`agl_lab.training.verl_actor` runs one in the lab's process, so that state must come and go with
it: several runs in one process (tests, sweeps, the notebook panel) must each find the process as the last left it.

* :func:`world_of_one` (for the worker's lifetime): verl's platform for the device (``cpu`` switched on through
  :func:`agl_lab.training.cpu_platform.cpu_platform`; on CUDA verl's own ``nvidia`` with the device made current)
  and a default process group of one rank on an in-process ``HashStore`` (no port: tests cannot collide), both
  undone on exit. A caller's own one-rank group is used and left alone.
* :func:`worker_start` (around the worker's construction): the variables verl's ``Worker.__init__`` reads, then
  the environment exactly as before (it also writes ``MASTER_PORT``, ``REDIS_STORE_SERVER_HOST``, ...), and the
  CPU affinity as before.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist

from agl_lab.config.compose import ConfigError
from agl_lab.core.keys import ACTOR_BACKEND, DEVICE

__all__ = ["WORKER_ENV", "worker_start", "world_of_one"]

# What verl's Worker requires in the environment: rank 0 of one. The address is never dialled (the store is in-process).
WORKER_ENV = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0",
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}  # fmt: skip


@contextlib.contextmanager
def world_of_one(device: torch.device) -> Iterator[None]:
    """verl's platform for ``device`` and a one-rank process group for the block; both as before afterwards."""
    with _verl_platform(device), _process_group(device):
        yield


@contextlib.contextmanager
def worker_start() -> Iterator[None]:
    """:data:`WORKER_ENV` for the block; afterwards ``os.environ`` and the CPU affinity are exactly as before."""
    with _restored_environ(WORKER_ENV), _kept_cpu_affinity():
        yield


@contextlib.contextmanager
def _verl_platform(device: torch.device) -> Iterator[None]:
    if device.type == "cpu":
        from agl_lab.training.cpu_platform import cpu_platform  # verl 0.9+ only (agl_lab.config.verl_features)

        with cpu_platform():
            yield
        return
    from verl.plugin.platform import get_platform

    if device.type != "cuda" or get_platform().device_name != "cuda":
        raise ConfigError(
            f"{ACTOR_BACKEND}=verl runs on the CPU or one CUDA device; {DEVICE} resolved to {device} "
            f"and verl's platform "
            f"is {get_platform().device_name!r}: use {DEVICE}=cpu or cuda (or {ACTOR_BACKEND}=lab)"
        )
    before = torch.cuda.current_device()
    # verl's get_device_id() is torch.cuda.current_device(); lab.device=cuda (or auto) names no index: the current one
    torch.cuda.set_device(before if device.index is None else device.index)
    try:
        yield
    finally:
        torch.cuda.set_device(before)


@contextlib.contextmanager
def _process_group(device: torch.device) -> Iterator[None]:
    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise RuntimeError(
                f"{ACTOR_BACKEND}=verl trains in a world of one process; torch.distributed has "
                f"{dist.get_world_size()} ranks"
            )
        yield
        return
    backend = "gloo" if device.type == "cpu" else "cpu:gloo,cuda:nccl"  # what verl itself asks for on a GPU
    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _restored_environ(values: dict[str, str]) -> Iterator[None]:
    before = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        for key in set(os.environ) - set(before):
            del os.environ[key]
        for key, value in before.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


@contextlib.contextmanager
def _kept_cpu_affinity() -> Iterator[None]:
    # verl's TrainingWorker calls set_numa_affinity(): on a GPU host (libnuma, pynvml) it pins the process to a node
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        yield
    finally:
        if affinity is not None and os.sched_getaffinity(0) != affinity:
            os.sched_setaffinity(0, affinity)
