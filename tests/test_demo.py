"""The demo's summary table, from hand-made histories (the real runs are tested through `agl-lab demo` in test_cli)."""

from pathlib import Path

import pandas as pd
import pytest

from agl_lab import TrainResult, short_run_config
from agl_lab.demo import DEMO_SETTINGS, _markdown, summarize


def result(dotlist, *, success):
    """A 5-step run: 2 mini-batches trained per step (64 rows at rollout.n=8, ppo_mini_batch_size=4 -> 32 rows)."""
    n = len(success)
    history = pd.DataFrame(
        {
            "step": range(1, n + 1),
            "lab/success_rate": success,
            "training/n_sample": [96] * n,
            "training/n_rollouts": [64] * n,
            "training/n_sample_trained": [64] * n,
            "training/n_sample_dropped/same_reward": [20] * n,
            "training/n_sample_dropped/random": [12] * n,
        }
    )
    return TrainResult(
        run_dir=Path("/runs/x"),
        history=history,
        timings=pd.DataFrame(),
        stopped=False,
        wandb_run=None,
        config=short_run_config(dotlist=dotlist),
    )


def test_summary_has_one_line_per_setting_with_its_settings_and_early_and_late_success():
    runs = {name: result(items, success=[0.1, 0.2, 0.3, 0.4, 0.9]) for name, items in DEMO_SETTINGS.items()}
    summary = summarize(runs, walls={"both_on": 12.34})
    assert summary["setting"].tolist() == ["both_on", "both_off", "both_on_cap2"]
    assert summary["rollout_level_advantage"].tolist() == [True, False, True]
    assert summary["loss_mode"].tolist() == ["per_rollout_mean", "vanilla", "per_rollout_mean"]
    assert summary["max_ppo_update_times"].tolist() == ["null", "null", 2]
    first = summary.iloc[0]
    # 5 steps: 20% = 1 step at each end
    assert first["success_first_20pct"] == pytest.approx(0.1) and first["success_last_20pct"] == pytest.approx(0.9)
    assert first["rows_per_rollout"] == pytest.approx(1.5)  # 96 rows / 64 rollouts
    assert first["updates_per_step"] == pytest.approx(2.0)  # 64 trained rows / (4 prompts x 8 rollouts)
    assert (first["dropped_same_reward"], first["dropped_random"]) == (100, 60)
    assert first["wall_s"] == 12.3 and pd.isna(summary["wall_s"][1])


def test_markdown_table_has_a_header_a_rule_and_one_line_per_row():
    table = _markdown(pd.DataFrame({"setting": ["a", "b"], "x": [0.123456, 2.0]}))
    assert table.splitlines() == ["| setting | x |", "|---|---|", "| a | 0.123 |", "| b | 2 |"]
