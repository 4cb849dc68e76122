"""verl's engines on the host CPU: a ``cpu`` platform in verl's platform registry (verl 0.9+), switched on for a block.

verl resolves one platform per process (``verl.plugin.platform.get_platform``): with no GPU it falls back to
``nvidia`` and asks for ``cuda`` device meshes and NCCL, and its FSDP engine is registered for ``cuda`` and ``npu``
only. ``lab.actor=verl`` on the CPU (:mod:`agl_lab.training.verl_actor`) needs verl to see the host as its device,
so for the block of :func:`cpu_platform`:

* ``PlatformCPU`` (device ``cpu``, collectives over ``gloo``, no profiler) is registered as ``cpu`` in verl's
  ``PlatformRegistry`` and made verl's current platform through ``set_platform``;
* verl's own, unchanged ``FSDPEngineWithLMHead`` is registered in its ``EngineRegistry`` for device ``cpu`` too.

On exit both registries and the current platform are as they were, so nothing outlives a run: another run, a test
or a notebook panel in the same process finds verl as it left it. ``PlatformCPU.is_platform_available`` is False,
so verl's auto-detection never picks it. The switch is process state: do not open two blocks from two threads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psutil
import torch

from agl_lab.config.verl_features import VERL_FEATURES

try:
    from verl.plugin.platform import PlatformBase, PlatformRegistry, platform_manager
except ModuleNotFoundError as missing:  # verl < 0.9.0 has no platform registry; the doctor refuses lab.actor=verl there
    raise ImportError(f"agl_lab.training.cpu_platform: {VERL_FEATURES['verl-actor'].problem()}") from missing

__all__ = ["CPU", "PlatformCPU", "cpu_platform"]

CPU = "cpu"  # the platform's name in verl's registries and its torch device type
_ENGINE_BACKENDS = ("fsdp", "fsdp2")  # actor.strategy values verl's FSDP engine serves


class _CPUDeviceModule:
    """``torch.cpu`` plus what verl calls on its device module (``get_torch_device()``) and ``torch.cpu`` lacks.

    The list comes from verl 0.9.1's calls: no caching allocator on the CPU (cache and memory-fraction calls do
    nothing, allocator counters are 0), the host's memory for ``mem_get_info``, torch's CPU generator for the RNG.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def ipc_collect() -> None:
        pass

    @staticmethod
    def set_per_process_memory_fraction(*args: Any, **kwargs: Any) -> None:
        pass

    @staticmethod
    def reset_peak_memory_stats(*args: Any) -> None:
        pass

    @staticmethod
    def memory_allocated(*args: Any) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def mem_get_info(*args: Any) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total  # (free, total) bytes, as torch.cuda.mem_get_info

    @staticmethod
    def get_device_name(*args: Any) -> str:
        return CPU

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(*args: Any) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, *args: Any) -> None:
        torch.set_rng_state(state)


class PlatformCPU(PlatformBase):
    """verl's platform interface on the host CPU: device ``cpu``, collectives over ``gloo``."""

    _device_module = _CPUDeviceModule()

    @property
    def device_name(self) -> str:
        return CPU

    @property
    def vendor_name(self) -> str:
        return CPU

    @property
    def device_module(self) -> Any:
        return self._device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: registering it must not turn a GPU host into a CPU one

    def current_device(self) -> str:
        # verl passes this to tensor.to(...) and torch.device(...): the device name, not an index
        return CPU

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # verl's Worker reads it; nothing on the CPU depends on it

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


@contextlib.contextmanager
def cpu_platform() -> Iterator[PlatformBase]:
    """For the block, verl's platform is ``cpu`` and its FSDP engine serves device ``cpu``; all restored on exit.

    Registration goes through verl's own ``register`` decorators; verl has no way back, so on exit the entries this
    block added are popped from the registries' dictionaries. Re-entrant: a nested block finds everything in place
    and changes nothing. Yields the current platform.
    """
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    with contextlib.ExitStack() as stack:
        if PlatformRegistry.get(CPU) is None:
            PlatformRegistry.register(platform=CPU)(PlatformCPU)
            stack.callback(PlatformRegistry._platforms.pop, CPU, None)
        engines = EngineRegistry._engines.get("language_model", {})
        missing = [backend for backend in _ENGINE_BACKENDS if CPU not in engines.get(backend, {})]
        if missing:  # register() asserts on a key registered before, so only the missing ones
            EngineRegistry.register(model_type="language_model", backend=missing, device=CPU)(FSDPEngineWithLMHead)
            for backend in missing:
                stack.callback(EngineRegistry._engines["language_model"][backend].pop, CPU, None)
        before = platform_manager._current_platform  # None while verl has not resolved one yet
        if not isinstance(before, PlatformCPU):
            _set_platform_quietly(PlatformRegistry.get(CPU)())
            stack.callback(setattr, platform_manager, "_current_platform", before)
        yield platform_manager.get_platform()


def _set_platform_quietly(platform: PlatformBase) -> None:
    # set_platform warns "Replacing already-initialised platform": expected here, the block restores it
    manager_logger = logging.getLogger(platform_manager.__name__)
    level = manager_logger.level
    manager_logger.setLevel(logging.ERROR)
    try:
        platform_manager.set_platform(platform)
    finally:
        manager_logger.setLevel(level)
