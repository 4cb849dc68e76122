"""Fault suite, the API: what a notebook passes — numpy integers, floats, booleans and arrays, pandas Series, ranges —
is taken where Python's ints and lists are; anything else is a TypeError naming the parameter, never an internal
AttributeError or numpy's "truth value of an array is ambiguous"."""

import re

import numpy as np
import pandas as pd
import pytest

from agl_lab import compose_config, diagnose, short_run_config, train
from agl_lab.curves.history import read_history
from agl_lab.training.demo import run_demo
from agl_lab.training.sweep_plan import plan_sweep
from conftest import TINY_RUN


def test_numpy_values_are_taken_as_python_values():
    cfg = compose_config(
        {
            "lab": {"seed": np.int64(3), "rewrite_prob": np.float64(0.25)},
            "data.train_batch_size": np.int32(4),
            "algorithm.enable_rollout_level_advantage": np.bool_(False),
            "trainer.logger": np.array(["file", "console"]),
        }
    )
    assert (cfg.lab.seed, cfg.lab.rewrite_prob, cfg.data.train_batch_size) == (3, 0.25, 4)
    assert cfg.algorithm.enable_rollout_level_advantage is False and list(cfg.trainer.logger) == ["file", "console"]
    assert type(cfg.lab.seed) is int
    assert short_run_config(dotlist=np.array(["lab.seed=4"])).lab.seed == 4


@pytest.mark.parametrize(
    "seeds",
    [np.arange(2), pd.Series([0, 1]), [np.int64(0), np.uint8(1)]],
    ids=["array", "series", "numpy_ints"],
)
def test_a_sweep_takes_seeds_as_a_notebook_holds_them(tmp_path, seeds):
    cells = plan_sweep({"a": np.array(["lab.max_turns=3"])}, seeds, sweep_dir=tmp_path / "s", dotlist=TINY_RUN)
    assert [cell.seed for cell in cells] == [0, 1] and all(type(cell.seed) is int for cell in cells)


SEEDS = "seeds must be the lab.seed of each cell (a list of integers)"
DOTLIST = "dotlist must be Hydra overrides like 'key.path=value' (a list of strings)"


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (lambda: compose_config(["lab.seed=1"]), "overrides must be a mapping of config keys to values, got list"),
        (lambda: compose_config(dotlist=5), DOTLIST),
        (lambda: compose_config(dotlist=["lab.seed=1", 3]), f"{DOTLIST}, but it holds int 3"),
        (lambda: short_run_config(overrides="lab.seed=1"), "overrides must be a mapping"),
        (lambda: plan_sweep(["a"], [0], sweep_dir="s"), "settings must be a mapping of setting name"),
        (lambda: plan_sweep({"a": "lab.seed=1"}, [0], sweep_dir="s"), "settings['a'] must be the setting's"),
        (lambda: plan_sweep({"a": []}, "01", sweep_dir="s"), f"{SEEDS}, got a str"),
        (lambda: plan_sweep({"a": []}, 3, sweep_dir="s"), f"{SEEDS}, got int 3"),
        (lambda: plan_sweep({"a": []}, [0, True], sweep_dir="s"), f"{SEEDS}, but it holds bool True"),
        (lambda: plan_sweep({"a": []}, [0.5], sweep_dir="s"), "but it holds float 0.5"),
        (lambda: plan_sweep({"a": []}, [0], sweep_dir=3), "sweep_dir must be a path (str or pathlib.Path), got int 3"),
        (lambda: plan_sweep({"a": []}, [0], sweep_dir="s", overrides=[1]), "overrides must be a mapping"),
        (lambda: train({"lab": {}}), "cfg must be a composed config"),
        (lambda: diagnose({"lab": {}}), "cfg must be a composed config"),
        (lambda: read_history(3), "path must be a path (str or pathlib.Path), got int 3"),
        (lambda: run_demo(dotlist=5), "dotlist must be Hydra overrides"),
    ],
    ids=[
        "compose_overrides_list", "compose_dotlist_int", "compose_dotlist_item", "short_run_overrides_str",
        "sweep_settings_list", "sweep_items_str", "sweep_seeds_str", "sweep_seeds_int", "sweep_seeds_bool",
        "sweep_seeds_float", "sweep_dir_int", "sweep_overrides_list", "train_dict", "diagnose_dict",
        "read_history_int", "demo_dotlist_int",
    ],
)  # fmt: skip
def test_a_wrong_type_is_a_type_error_naming_the_parameter(tmp_path, monkeypatch, call, text):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=re.escape(text)):
        call()
    assert list(tmp_path.iterdir()) == []  # refused before anything was created
