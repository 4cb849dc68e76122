"""The loss-mode catalogue: every entry complete, its settings select it in a composed config and back."""

import pytest

from agl_lab import LOSS_MODES, compose_config
from agl_lab.config.modes import mode_from_config, mode_settings, trainable_modes


@pytest.mark.parametrize("mode", list(LOSS_MODES))
def test_every_entry_has_a_label_formula_source_and_weight_function(mode):
    entry = LOSS_MODES[mode]
    assert entry.name == mode
    assert entry.label and "\n" not in entry.label  # one line: the panels and the CLI show it as it is
    assert entry.formula.startswith("w =")
    assert entry.source.startswith("https://")
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
    with pytest.raises(ValueError, match=r"unknown loss mode 'token_mean' \(did you mean 'token-mean'\?\)"):
        mode_settings("token_mean")
