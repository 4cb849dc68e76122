import re

import pandas as pd
import pytest

from agl_lab import compose_config
from agl_lab.config.modes import mode_from_config
from agl_lab.lab.batch_io import load_batch, sample_batch_path
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from agl_lab.lab.weighting import analyze_weighting
from agl_lab.ui.weighting_panel import WeightingPanel

KNOBS = SyntheticKnobs(n_prompts=4, rollouts_per_prompt=4, break_prob=0.4, seed=5)


@pytest.fixture
def panel():
    return WeightingPanel(knobs=KNOBS, dpi=30)  # small images: the tests read the pixels' bytes, not the pixels


def expected(panel, *, level=None):
    """The analysis the panel should show, computed directly from its widgets' values (as config overrides)."""
    knobs = panel.knobs_from_widgets()
    rows, _ = synthetic_rows(knobs)
    cfg = compose_config(overrides={"algorithm": {"adv_estimator": "grpo"}}, dotlist=panel.dotlist())
    level = panel.settings()["rollout_level"] if level is None else level
    result, _ = analyze_weighting(rows, cfg, rollout_levels=(level,), seed=panel.settings()["seed"])
    return result


def images(panel):
    return {name: bytes(figure.image.value) for name, figure in panel.figures.items()}


def test_initial_panel_shows_the_direct_analysis(panel):
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts)
    assert all(value.startswith(b"\x89PNG") for value in images(panel).values())
    assert panel.error is None
    assert "PPO mini-batch = ppo_mini_batch_size × rollout.n = 4 rows" in panel.status.value  # 1 prompt × 4


def test_setting_the_cap_recomputes_the_table(panel):
    before = images(panel)
    panel.controls["cap"].value = 1
    assert panel.settings()["max_ppo_update_times"] == 1
    assert "agentlightning.max_ppo_update_times=1" in panel.dotlist()
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts)
    assert panel.result.totals["rows_kept"].unique().tolist() == [4]  # one mini-batch of 4 rows
    after = images(panel)
    assert after["weights"] != before["weights"] and after["cap"] != before["cap"]
    assert after["rows"] == before["rows"]  # same batch: the histogram is not redrawn


def test_mini_batch_and_seed_change_which_rows_are_kept(panel):
    panel.controls["cap"].value = 2
    panel.controls["ppo_mini_batch_size"].value = 2
    pd.testing.assert_frame_equal(panel.result.rows, expected(panel).rows)
    assert (panel.result.rows["fate"] == "kept").sum() == 16  # 2 mini-batches of 2 prompts × 4 rows
    first = panel.result.rows["fate"].tolist()
    panel.controls["seed"].value = 11  # a new seed: another batch, and other rows dropped
    pd.testing.assert_frame_equal(panel.result.rows, expected(panel).rows)
    assert panel.result.rows["fate"].tolist() != first


def test_changing_the_loss_mode_redraws_two_figures_without_recomputing(panel):
    result, before = panel.result, images(panel)
    panel.controls["mode"].value = "seq-mean-token-mean"
    assert panel.result is result  # all modes were computed already
    after = images(panel)
    assert {name for name in after if after[name] != before[name]} == {"weights", "mass"}
    assert "seq-mean-token-mean" in panel.summary.value
    assert mode_from_config(compose_config(dotlist=panel.dotlist())) == "seq-mean-token-mean"


def test_rollout_level_toggle_shows_the_other_advantage(panel):
    on = panel.result
    panel.controls["rollout_level"].value = False
    assert set(panel.result.rollouts["rollout_level"]) == {False}
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts)
    assert "algorithm.enable_rollout_level_advantage=false" in panel.dotlist()
    panel.controls["rollout_level"].value = True
    assert panel.result is on  # cached: toggling back recomputes nothing


def test_generator_knobs_regenerate_the_batch(panel):
    panel.controls["success_prob"].value = 1.0
    assert set(panel.result.rows["reward"]) == {1.0}
    panel.controls["level"].value = "transition"
    panel.controls["calls"].value = "fixed"
    panel.controls["max_calls"].value = 2
    assert set(panel.result.rows["rows_in_rollout"]) == {2}  # 2 calls, one row each
    pd.testing.assert_frame_equal(panel.result.rollouts, expected(panel).rollouts)


def test_out_of_range_values_are_clamped_where_they_are_typed(panel):
    panel.controls["n_prompts"].value = -5
    assert panel.controls["n_prompts"].value == 1
    panel.controls["success_prob"].value = 1.7
    assert panel.controls["success_prob"].value == 1.0
    panel.controls["ppo_mini_batch_size"].value = 0
    assert panel.controls["ppo_mini_batch_size"].value == 1
    assert panel.result.rows["rollout_id"].nunique() == 4  # 1 prompt × 4 rollouts, recomputed
    assert panel.error is None


def test_a_refused_combination_is_shown_in_red_and_the_last_result_stays(panel):
    result, before = panel.result, images(panel)
    panel.controls["min_tokens"].value = 40  # above max_tokens (32)
    assert panel.error == "SyntheticKnobs.min_tokens (40) must be <= max_tokens (32)"
    assert "Refused:" in panel.status.value and "#b00020" in panel.status.value
    assert panel.result is result and images(panel) == before
    with pytest.raises(ValueError, match=re.escape("min_tokens (40) must be <= max_tokens (32)")):
        panel.recompute()
    panel.controls["max_tokens"].value = 48
    assert panel.error is None and panel.result is not result


def test_a_mini_batch_larger_than_the_batch_warns_and_trains_nothing(panel):
    panel.controls["ppo_mini_batch_size"].value = 100  # 400 rows per mini-batch, the batch has ~25
    assert "no trainable batch" in panel.status.value
    assert (panel.result.totals["rows_kept"] == 0).all()


def test_panel_on_a_loaded_batch_has_no_generator_knobs():
    rows = load_batch(sample_batch_path())
    panel = WeightingPanel(rows=rows, dpi=30)
    assert "n_prompts" not in panel.controls and "seed" in panel.controls
    assert panel.rollouts_per_prompt == 4  # 12 prompts × 4 rollouts
    assert len(panel.result.rows) == len(rows) == 81
    panel.controls["cap"].value = 1
    assert (panel.result.rows["fate"] == "kept").sum() == 4 * panel.settings()["ppo_mini_batch_size"]
