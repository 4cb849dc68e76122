"""The bias table on small synthetic batches: MT-GRPO's first-turn gap ignores the intermediate rewards (its bias is the
RFC's closed form), the fix and rollout-level GRPO follow the true gap up to GRPO's own 1/n shrinkage."""

import pytest

from agl_lab.lab.turn_bias import ESTIMATORS, rfc_closed_form, true_gap, turn_bias_table


def test_the_closed_forms():
    # continue_prob 0.5, max_calls 3: E[T - 1 | T >= 2] = 1 + 0.5 (T = 2 or 3, each 1/4 of all): 1.5
    assert true_gap(0.2, continue_prob=0.5, max_calls=3) == pytest.approx(0.3)
    assert rfc_closed_form(0.2, continue_prob=0.5, max_calls=3) == pytest.approx(-0.3)
    assert true_gap(1.0, continue_prob=0.25, max_calls=2) == 1.0  # one more turn at most


def test_the_table_on_small_batches():
    table = turn_bias_table((-0.5, 0.0, 0.5), batches=3, n_prompts=16, rollouts_per_prompt=8)
    assert table["intermediate_mean"].tolist() == [-0.5, 0.0, 0.5]
    assert {f"{name} {c}" for name in ESTIMATORS for c in ("gap", "bias", "ci")} <= set(table.columns)
    # MT-GRPO centers every intermediate reward among the trajectories that reached its turn index, so on the same
    # episodes its gap does not move with the mean at all: all of the true gap goes missing, the RFC's closed form
    assert table["mt_grpo gap"].max() - table["mt_grpo gap"].min() < 1e-9
    bias_minus_form = table["mt_grpo bias"] - table["rfc_closed_form"]
    assert bias_minus_form.max() - bias_minus_form.min() < 1e-9
    # the fix and rollout-level GRPO see the intermediate rewards: their gap grows with the mean, by about (1 - 1/n)
    for name in ("mt_grpo_fix", "grpo (rollout-level)"):
        slope = (table[f"{name} gap"].iloc[-1] - table[f"{name} gap"].iloc[0]) / (1.5 * 1.0)
        assert slope == pytest.approx(1 - 1 / 8, abs=0.1), name
    assert (table["grpo_shrinkage"] == -table["true_gap"] / 8).all()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="batches must be >= 2"):
        turn_bias_table(batches=1)
    with pytest.raises(ValueError, match="need 0 < continue_prob < 1 and max_calls >= 2"):
        turn_bias_table(max_calls=1)
