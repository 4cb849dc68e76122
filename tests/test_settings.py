"""The settings catalogue: defaults read from Agent Lightning's config, the demo's settings built from it."""

import pytest

from agl_lab import compose_config
from agl_lab.config.settings import (
    CAP,
    CAP_CHOICES,
    DEMO_SETTINGS,
    LOSS_MODE,
    ROLLOUT_LEVEL,
    SETTINGS,
    estimator_choices,
    setting_overrides,
)


def test_defaults_are_agent_lightnings():
    assert SETTINGS[ROLLOUT_LEVEL].default is True
    assert SETTINGS[LOSS_MODE].default == "per_rollout_mean"
    assert SETTINGS[CAP].default is None
    assert CAP_CHOICES[0] is None and 2 in CAP_CHOICES


def test_setting_overrides_compose_to_what_they_say():
    keys = setting_overrides(rollout_level=False, mode="seq-mean-token-mean", cap=2)
    cfg = compose_config(overrides=keys)
    assert cfg.algorithm.enable_rollout_level_advantage is False
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
    assert cfg.agentlightning.max_ppo_update_times == 2


@pytest.mark.parametrize("name", list(DEMO_SETTINGS))
def test_demo_settings_are_dotlists_that_compose(name):
    cfg = compose_config(dotlist=DEMO_SETTINGS[name])
    assert cfg.algorithm.enable_rollout_level_advantage is (name != "both_off")
    assert cfg.agentlightning.max_ppo_update_times == (2 if name.endswith("cap2") else None)


def test_estimators_come_from_verls_registry():
    assert {"grpo", "rloo", "gae", "remax"} <= set(estimator_choices())
