"""The loss-mode catalogue: every entry complete, its settings select it in a composed config and back."""

import re
from pathlib import Path

import pytest

from agl_lab import LOSS_MODES, compose_config
from agl_lab.config.modes import (
    DEPENDENCIES,
    SPLITS,
    known_as,
    mode_from_config,
    mode_settings,
    mode_table,
    trainable_modes,
)
from agl_lab.config.verl_features import forced_aggregation
from agl_lab.lab.loss_scale import weighing_mode


@pytest.mark.parametrize("mode", list(LOSS_MODES))
def test_every_entry_has_a_label_formula_source_and_weight_function(mode):
    entry = LOSS_MODES[mode]
    assert entry.name == mode
    assert entry.label and "\n" not in entry.label  # one line: the panels and the CLI show it as it is
    assert entry.formula.startswith("w =")
    assert entry.source.startswith(("https://", "README.md#"))  # agl_lab's own mode: its README section
    assert callable(entry.weight)


@pytest.mark.parametrize("mode", trainable_modes())
def test_mode_settings_select_the_mode_in_a_composed_config(mode):
    cfg = compose_config(dotlist=[f"{key}={value}" for key, value in mode_settings(mode).items()])
    assert mode_from_config(cfg) == mode


def test_agent_lightnings_default_config_is_v1():
    assert mode_from_config(compose_config()) == "per_rollout_mean:rows"


def test_a_loss_the_catalogue_lacks_is_none():
    assert mode_from_config(compose_config(dotlist=["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])) is None


def test_unknown_mode_names_the_nearest():
    with pytest.raises(ValueError, match=r"unknown loss mode 'token-men' \(did you mean 'token-mean'\?\)"):
        mode_settings("token-men")


@pytest.mark.parametrize(
    ("theirs", "ours", "where"),
    [
        ("prompt_mean", "skyrl:prompt_mean", "SkyRL algorithm.loss_reduction=prompt_mean"),
        ("sample_mean", "seq-mean-token-mean", "slime --loss-aggregation sample_mean"),
        ("constant", "seq-mean-token-sum-norm", "slime --loss-aggregation constant"),
        ("seq_mean", "seq-mean-token-mean", "AReaL actor.loss_aggregation=seq_mean"),
        ("token_mean", "token-mean", "slime --loss-aggregation token_mean"),
        ("dr_grpo", "trl:dr_grpo", "TRL GRPOConfig loss_type=dr_grpo"),
    ],
)
def test_other_frameworks_option_names_lead_to_the_same_objective(theirs, ours, where):
    assert known_as(theirs) == (ours, where)
    message = f"unknown loss mode '{theirs}' (did you mean '{ours}'? the same objective as {where})"
    with pytest.raises(ValueError, match=re.escape(message)):
        mode_settings(theirs)
    assert where in mode_table()  # the catalogue in docs/normalizations.md lists them


def test_modes_agent_lightning_cannot_train_have_no_settings():
    for name in ("trl:grpo", "trl:bnpo", "trl:dr_grpo", "trl:dapo", "skyrl:prompt_mean", "rollout_mean"):
        assert not LOSS_MODES[name].trainable and name not in trainable_modes()
        with pytest.raises(ValueError, match="is not one Agent Lightning's trainer can train with"):
            mode_settings(name)


@pytest.mark.parametrize("mode", list(LOSS_MODES))
def test_every_entry_names_its_split_and_dependences_from_the_vocabulary(mode):
    entry = LOSS_MODES[mode]
    assert entry.split in SPLITS
    assert set(entry.depends_on) <= set(DEPENDENCIES)
    assert entry.scale


@pytest.mark.parametrize(
    ("dotlist", "expected"),
    [
        (["actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.actor.loss_agg_mode=token-sum"],
         forced_aggregation("gspo") or "token-sum"),  # gspo aggregates through agg_loss (verl 0.8.0's: its own)
        (["actor_rollout_ref.actor.policy_loss.loss_mode=sapo"], "sapo"),  # sapo forces its own aggregation
        (["actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean"], "geo_mean"),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"], "token-mean"),
        ([], "per_rollout_mean:rows"),
    ],
)  # fmt: skip
def test_weighing_mode_of_a_config(dotlist, expected):
    assert weighing_mode(compose_config(dotlist=dotlist)) == expected


def test_a_loss_verl_lacks_weighs_as_nothing_known():
    cfg = compose_config(dotlist=["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"])
    cfg.actor_rollout_ref.actor.policy_loss.loss_mode = "my_loss"
    assert weighing_mode(cfg) is None


def test_the_docs_mode_table_is_the_catalogues():
    page = (Path(__file__).resolve().parents[1] / "docs" / "normalizations.md").read_text()
    assert mode_table() in page, "docs/normalizations.md's mode table differs: paste agl_lab.config.modes.mode_table()"


def test_the_proposals_name_their_source_and_say_they_are_not_released():
    for name in ("session_equal", "partition_preserving"):
        entry = LOSS_MODES[name]
        assert entry.family == "verl PR #7580 (proposed, not released)" and "proposed" in entry.label
        assert entry.source == "https://github.com/verl-project/verl/pull/7580"
        assert mode_settings(name) == {"actor_rollout_ref.actor.policy_loss.loss_mode": name}
    # uni-agent #185's session mean is the lab's rollout_mean: named there, no copy
    assert LOSS_MODES["rollout_mean"].source == "https://github.com/verl-project/uni-agent/issues/185"
    assert "uni-agent #185" in LOSS_MODES["rollout_mean"].label
