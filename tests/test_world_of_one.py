"""A world of one for verl's worker: the process group and the environment come and go with it.

The platform half needs verl's platform registry (verl 0.9.0 on); under verl 0.8.0 the block is refused instead.
"""

import os

import pytest
import torch
import torch.distributed as dist

from agl_lab import ConfigError
from agl_lab.config.verl_features import VERL_FEATURES
from agl_lab.training.world_of_one import WORKER_ENV, worker_start, world_of_one
from conftest import only_if

CPU = torch.device("cpu")
PLATFORMS = VERL_FEATURES["verl-actor"]
if PLATFORMS.available():
    from verl.plugin.platform import get_platform, platform_manager


@only_if(not PLATFORMS.available())
def test_an_older_verl_is_refused_naming_the_verl_it_needs_and_nothing_is_left():
    refusal = r"lab.actor=verl needs verl's platform registry \(verl\.plugin\) .* \(verl 0\.9\.0 or newer\)"
    with pytest.raises(ImportError, match=refusal):
        with world_of_one(CPU):
            pass
    assert not dist.is_initialized()


@only_if(PLATFORMS.available())
def test_a_one_rank_gloo_group_and_the_cpu_platform_for_the_block_then_neither():
    before = platform_manager._current_platform
    with world_of_one(CPU):
        assert dist.is_initialized() and dist.get_world_size() == 1 and dist.get_rank() == 0
        assert dist.get_backend() == "gloo" and get_platform().device_name == "cpu"
        total = torch.tensor([3.0])
        dist.all_reduce(total)  # collectives work: a world of one sums to itself
        assert total.item() == 3.0
    assert not dist.is_initialized() and platform_manager._current_platform is before


@only_if(PLATFORMS.available())
def test_a_group_the_caller_made_is_used_and_left_alone():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        with world_of_one(CPU):
            assert dist.group.WORLD is group
        assert dist.is_initialized() and dist.group.WORLD is group
    finally:
        dist.destroy_process_group()


@only_if(PLATFORMS.available())
def test_a_device_verl_has_no_platform_for_is_refused_naming_the_fix():
    with pytest.raises(ConfigError, match="use lab.device=cpu or cuda"):
        with world_of_one(torch.device("meta")):
            pass
    assert not dist.is_initialized()


def test_the_worker_environment_comes_and_goes_exactly(monkeypatch):
    monkeypatch.setenv("RANK", "5")  # e.g. a torchrun job: the worker still sees rank 0 of 1, then 5 again
    monkeypatch.delenv("MASTER_PORT", raising=False)
    before = dict(os.environ)
    with worker_start():
        assert {key: os.environ[key] for key in WORKER_ENV} == WORKER_ENV
        os.environ["REDIS_STORE_SERVER_HOST"] = "x"  # what verl's Worker writes back
        os.environ["MASTER_PORT"] = "29500"
        del os.environ["PATH"]
    assert dict(os.environ) == before


def test_the_environment_is_restored_when_the_block_fails():
    before = dict(os.environ)
    with pytest.raises(RuntimeError, match="boom"):
        with worker_start():
            os.environ["AGL_LAB_TEST_LEFTOVER"] = "1"
            raise RuntimeError("boom")
    assert dict(os.environ) == before
