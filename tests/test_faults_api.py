"""Fault suite, the API: what a notebook passes — numpy integers, floats, booleans and arrays, pandas Series, ranges —
is taken where Python's ints and lists are; anything else is a TypeError naming the parameter, never an internal
AttributeError or numpy's "truth value of an array is ambiguous"; a count is an integer (never a bool or a float),
an empty list a ValueError naming the parameter; and messages name the user's key, not an internal class."""

import re

import numpy as np
import pandas as pd
import pytest
import torch

from agl_lab import compare_settings, compose_config, diagnose, normalize_advantages_by_rollout, short_run_config, train
from agl_lab.cli import main
from agl_lab.curves.effects import compare_metrics
from agl_lab.curves.history import read_history
from agl_lab.studies.demo import run_demo
from agl_lab.studies.sweep_plan import plan_sweep
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


def test_a_table_of_the_wrong_kind_or_no_metrics_is_named(tmp_path):
    with pytest.raises(TypeError, match="table must be a long-form history, a pandas DataFrame .* got dict"):
        compare_settings({"setting": ["a"], "seed": [0]}, baseline="a")  # AttributeError before
    table = pd.DataFrame({"setting": ["a"], "seed": [0], "step": [1], "metric": ["m"], "value": [1.0]})
    with pytest.raises(ValueError, match=r"metrics must name at least one metric \(a list of names\), got \[\]"):
        compare_metrics(table, baseline="a", metrics=[])  # pandas' "No objects to concatenate" before


MASK = torch.ones(2, 2)


@pytest.mark.parametrize("rows", [True, 2.7, np.float64(2.0)], ids=["bool", "float", "numpy_float"])
def test_a_row_count_is_an_integer(rows):
    with pytest.raises(ValueError, match=f"num_trained_rows must be an integer .*, got {type(rows).__name__}"):
        normalize_advantages_by_rollout(MASK, MASK, ["a", "b"], num_trained_rows=rows)  # True was taken as 1 row


def test_a_numpy_row_count_is_taken():
    out = normalize_advantages_by_rollout(MASK, MASK, ["a", "b"], num_trained_rows=np.int64(2))
    torch.testing.assert_close(out, MASK / 4)  # each row: its rollout's 2 tokens x 2 rows


def test_check_names_the_users_key_for_a_group_beyond_the_example_batch(capsys):
    limits = [f"agentlightning.trace_aggregator.trajectory_max_{part}_length=16" for part in ("prompt", "response")]
    assert main(["check", "actor_rollout_ref.rollout.n=1100", *limits]) == 0  # a valid config
    out = capsys.readouterr().out
    assert (
        "Example batch skipped: actor_rollout_ref.rollout.n=1100: the example batch's generator makes at most 1024"
        in out
    )
    assert "SyntheticKnobs" not in out  # "SyntheticKnobs.rollouts_per_prompt must be an integer in [1, 1024]" before
