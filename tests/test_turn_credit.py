"""Each estimator on one batch in the weighting lab: rows per placement, weightings, diagnostics, the mass figure."""

import pytest

from agl_lab import compose_config
from agl_lab.lab.diagnostics import COLUMNS
from agl_lab.lab.synthetic import SyntheticKnobs
from agl_lab.lab.turn_credit import (
    ESTIMATORS,
    diagnostics_by_estimator,
    estimator_config,
    mass_by_estimator,
    rows_by_placement,
    weighting_by_estimator,
)

KNOBS = SyntheticKnobs(n_prompts=3, rollouts_per_prompt=4, level="transition", turn_rewards="per_turn",
                       turn_reward_mean=-0.2, turn_reward_spread=0.1, seed=2)  # fmt: skip
CFG = compose_config(dotlist=["actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=1"])


def test_each_estimator_weighs_the_same_episodes_on_its_own_rows():
    rows = rows_by_placement(KNOBS)
    assert set(rows) == {"per_turn", "summed"} and len(rows["per_turn"]) == len(rows["summed"])
    weightings = weighting_by_estimator(rows, CFG, seed=0)
    assert list(weightings) == list(ESTIMATORS)
    for name, weighting in weightings.items():
        assert set(weighting.rollouts["rollout_level"]) == {ESTIMATORS[name][1]}
    # rollout-level GRPO gives every row of a rollout one advantage; per-turn credit gives its turns their own
    turn_adv = weightings["mt_grpo_fix"].row_table("per_rollout_mean:rows", rollout_level=False)
    assert turn_adv.groupby("rollout_id")["advantage"].nunique().max() > 1
    figure = mass_by_estimator(weightings)
    assert len(figure.axes) == 4 and figure.axes[0].get_title().startswith("mt_grpo: mass under per_rollout_mean:rows")


def test_the_diagnostics_table_per_estimator():
    table = diagnostics_by_estimator(rows_by_placement(KNOBS), CFG, modes=["seq-mean-token-mean"])
    assert list(table.columns) == ["estimator", *COLUMNS] and table["estimator"].tolist() == list(ESTIMATORS)
    # the same rows and weights under every estimator; the advantages differ
    assert table["rows"].nunique() == 1 and table["solve_by_row"].nunique() == 1
    assert set(table.attrs["influence"]["estimator"]) == set(ESTIMATORS)


def test_refusals():
    with pytest.raises(ValueError, match="SyntheticKnobs.turn_rewards is off"):
        rows_by_placement(SyntheticKnobs())
    with pytest.raises(ValueError, match=r"unknown estimator 'gigpo': choose from \['mt_grpo'"):
        estimator_config(CFG, "gigpo")
    with pytest.raises(ValueError, match="no rows with turn rewards placed 'summed'"):
        weighting_by_estimator({"per_turn": rows_by_placement(KNOBS)["per_turn"]}, CFG)
