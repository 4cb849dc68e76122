"""`agl-lab sweep`'s grid: dotlist items with several values become named settings, the rest applies to all."""

import re

import pytest

from agl_lab import ConfigError, short_run_config
from agl_lab.config.grid import sweep_grid


def test_every_combination_is_one_named_setting_and_single_values_apply_to_all():
    settings, common = sweep_grid(
        [
            "algorithm.enable_rollout_level_advantage=true,false",
            "lab.seed=3",
            "agentlightning.max_ppo_update_times=null,2",
        ]
    )
    assert common == ["lab.seed=3"]
    # 2 × 2 settings, the first key varying slowest; each named after its values
    assert settings == {
        "enable_rollout_level_advantage-true+max_ppo_update_times-null": (
            "algorithm.enable_rollout_level_advantage=true",
            "agentlightning.max_ppo_update_times=null",
        ),
        "enable_rollout_level_advantage-true+max_ppo_update_times-2": (
            "algorithm.enable_rollout_level_advantage=true",
            "agentlightning.max_ppo_update_times=2",
        ),
        "enable_rollout_level_advantage-false+max_ppo_update_times-null": (
            "algorithm.enable_rollout_level_advantage=false",
            "agentlightning.max_ppo_update_times=null",
        ),
        "enable_rollout_level_advantage-false+max_ppo_update_times-2": (
            "algorithm.enable_rollout_level_advantage=false",
            "agentlightning.max_ppo_update_times=2",
        ),
    }
    for items in settings.values():  # each setting composes: one value per key again
        short_run_config(dotlist=[*common, *items])


def test_ranges_quoted_text_and_folder_safe_names():
    settings, common = sweep_grid(["lab.max_turns=range(2,4)", "trainer.project_name='a b',a_b"])
    assert common == []
    assert list(settings) == [
        "max_turns-2+project_name-a_b",
        "max_turns-2+project_name-a_b_",  # 'a b' and a_b make the same folder name: the second gets a _
        "max_turns-3+project_name-a_b",
        "max_turns-3+project_name-a_b_",
    ]
    assert settings["max_turns-2+project_name-a_b"] == ("lab.max_turns=2", "trainer.project_name='a b'")
    assert settings["max_turns-3+project_name-a_b_"] == ("lab.max_turns=3", "trainer.project_name=a_b")


def test_without_several_values_there_are_no_settings():
    assert sweep_grid(["lab.seed=1", "+trainer.extra=2"]) == ({}, ["lab.seed=1", "+trainer.extra=2"])


def test_items_that_cannot_be_enumerated_or_parsed_are_named_at_once():
    with pytest.raises(ConfigError) as err:
        sweep_grid(["lab.rewrite_prob=interval(0,1)", "data.train_batch_size=[1", "lab.seed=0,1"])
    lines = str(err.value).splitlines()
    assert lines[0] == "config has problems:" and len(lines) == 3
    assert re.search(r"lab.rewrite_prob=interval\(0,1\): a continuous range cannot be swept; list the values", lines[1])
    assert lines[2].startswith("  - data.train_batch_size=[1: ") and "write key.path=value" in lines[2]
