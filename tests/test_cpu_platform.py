"""verl's ``cpu`` platform: switched on for a block through verl's own registries, everything as before after it.

verl's platform registry exists from verl 0.9.0 on; under verl 0.8.0 this module checks the clear refusal instead.
"""

import importlib
from importlib.metadata import version

import pytest
import torch
from verl.utils.device import get_device_id, get_device_name, get_nccl_backend, get_torch_device
from verl.workers.engine import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

from agl_lab.config.verl_features import VERL_FEATURES
from conftest import only_if

PLATFORMS = VERL_FEATURES["verl-actor"]
if PLATFORMS.available():
    from verl.plugin.platform import PlatformRegistry, get_platform, platform_manager

    from agl_lab.training.cpu_platform import CPU, PlatformCPU, cpu_platform


@only_if(not PLATFORMS.available())
def test_an_older_verl_gets_an_import_error_naming_the_verl_it_needs():
    with pytest.raises(ImportError) as caught:
        importlib.import_module("agl_lab.training.cpu_platform")
    assert str(caught.value) == (
        "agl_lab.training.cpu_platform: lab.actor=verl needs verl's platform registry (verl.plugin) to run verl's "
        f"actor in the lab (verl 0.9.0 or newer); this environment has verl {version('verl')} (Agent Lightning 1.0.x "
        "installs 0.8.0)"
    )


def registries():
    engines = EngineRegistry._engines["language_model"]
    return dict(PlatformRegistry._platforms), {backend: dict(keys) for backend, keys in engines.items()}


@only_if(PLATFORMS.available())
def test_inside_the_block_verl_sees_the_host_cpu_and_serves_its_fsdp_engine_there():
    before, registered = platform_manager._current_platform, registries()
    with cpu_platform() as platform:
        assert isinstance(platform, PlatformCPU) and get_platform() is platform
        assert PlatformRegistry.get("cpu") is PlatformCPU  # through verl's registry, by name
        assert (get_device_name(), get_device_id(), get_nccl_backend()) == ("cpu", "cpu", "gloo")
        assert get_torch_device() is platform.device_module
        assert torch.device(get_device_id()).type == "cpu"  # verl passes the id to torch.device(...) and .to(...)
        for backend in ("fsdp", "fsdp2"):  # verl's own engine class, unchanged
            assert EngineRegistry.get_engine_cls("language_model", backend) is FSDPEngineWithLMHead
    assert platform_manager._current_platform is before
    assert registries() == registered


@only_if(PLATFORMS.available())
def test_the_device_module_has_what_verl_calls_with_the_cpus_meaning():
    device = PlatformCPU().device_module
    assert device.is_available() and device.device_count() == 1  # torch.cpu's own
    device.synchronize()
    device.empty_cache()
    device.ipc_collect()
    device.set_per_process_memory_fraction(0.5)
    assert device.memory_allocated() == device.max_memory_reserved() == 0  # no caching allocator
    free, total = device.mem_get_info()
    assert 0 < free <= total  # the host's memory, as torch.cuda.mem_get_info reports the GPU's
    assert device.get_device_name() == CPU
    state = device.get_rng_state()
    device.manual_seed(7)
    first = torch.rand(3)
    device.manual_seed(7)
    assert torch.equal(torch.rand(3), first)  # torch's CPU generator
    device.set_rng_state(state)
    assert torch.equal(torch.get_rng_state(), state)


@only_if(PLATFORMS.available())
def test_it_is_never_auto_detected_and_a_nested_block_changes_nothing():
    assert not PlatformCPU().is_platform_available(use_smi_check=True)  # a GPU host stays a GPU host
    before, registered = platform_manager._current_platform, registries()
    with cpu_platform() as outer:
        inside = registries()
        with cpu_platform() as inner:
            assert inner is outer and registries() == inside
        assert get_platform() is outer and registries() == inside
    assert platform_manager._current_platform is before and registries() == registered


@only_if(PLATFORMS.available())
def test_an_unresolved_platform_stays_unresolved():
    before = platform_manager._current_platform
    platform_manager._current_platform = None  # verl has not resolved one yet in this process
    try:
        with cpu_platform() as platform:
            assert platform.device_name == "cpu"
        assert platform_manager._current_platform is None
    finally:
        platform_manager._current_platform = before
