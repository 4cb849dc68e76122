"""A panel's settings as the agl-lab train line that reruns them, and a run's config read back."""

import shlex

import pytest
from omegaconf import OmegaConf

from agl_lab import short_run_config
from agl_lab.config.compose import compose_from
from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.ui.run_command import run_config, train_command, train_commands, train_dotlist


def test_the_command_holds_only_what_differs_from_agl_lab_trains_own_base():
    assert train_command(short_run_config()) == "agl-lab train"
    items = ["lab.seed=3", "trainer.total_training_steps=5", "lab.curve_smoothing=0.8", "lab.curve_overlay=[runs/a]"]
    cfg = short_run_config(dotlist=[*items, "lab.run_dir=/tmp/x"])  # the run directory is per run: left out
    assert sorted(train_dotlist(cfg)) == sorted(items)
    view = {"lab.curve_smoothing": 0.0, "lab.curve_overlay": []}  # the curve panel's keys, set on the config
    line = train_command(cfg, view).split()
    assert line[2:] == ["trainer.total_training_steps=5", "lab.seed=3", "lab.curve_smoothing=0.0"]


def test_the_line_composes_the_same_config_when_a_shell_splits_it():
    cfg = short_run_config(dotlist=["lab.curve_overlay=['runs/a b',sweeps/s/c]", "algorithm.adv_estimator=rloo"])
    line = train_command(cfg)
    argv = shlex.split(line)
    assert argv[:2] == ["agl-lab", "train"]
    again = compose_from("short-run", dotlist=argv[2:])  # what agl-lab train composes from it
    assert OmegaConf.to_container(again) == OmegaConf.to_container(cfg)


def test_a_folder_without_a_config_is_refused_by_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no config.yaml: pick a run directory"):
        run_config(tmp_path)


def test_a_sweep_is_one_line_per_setting_and_seed_with_the_panels_own_keys():
    view = {"lab.curve_smoothing": 0.8, "lab.curve_overlay": []}
    lines = train_commands(DEMO_SETTINGS, view, seeds=[0, 1], dotlist=["trainer.total_training_steps=3"]).splitlines()
    assert len(lines) == 2 * len(DEMO_SETTINGS)
    off = [line for line in lines if "trainer.experiment_name=both_off" in line]
    assert len(off) == 2 and all("lab.curve_smoothing=0.8" in line and "total_training_steps=3" in line for line in off)
    again = compose_from("short-run", dotlist=shlex.split(off[1])[2:])
    assert again.lab.seed == 1 and again.algorithm.enable_rollout_level_advantage is False  # both_off's key
