"""The settings catalogue: defaults read from Agent Lightning's config, the demo's settings built from it."""

import pytest

from agl_lab import compose_config
from agl_lab.config.settings import (
    DEMO_SETTINGS,
    MAX_PPO_UPDATE_TIMES_CHOICES,
    SETTINGS,
    configure,
    estimator_choices,
    setting_overrides,
)
from agl_lab.core.keys import LOSS_MODE, MAX_PPO_UPDATE_TIMES, ROLLOUT_LEVEL


def test_defaults_are_agent_lightnings():
    assert SETTINGS[ROLLOUT_LEVEL].default is True
    assert SETTINGS[LOSS_MODE].default == "per_rollout_mean"
    assert SETTINGS[MAX_PPO_UPDATE_TIMES].default is None
    assert MAX_PPO_UPDATE_TIMES_CHOICES[0] is None and 2 in MAX_PPO_UPDATE_TIMES_CHOICES


def test_setting_overrides_compose_to_what_they_say():
    keys = setting_overrides(rollout_level=False, mode="seq-mean-token-mean", max_ppo_update_times=2)
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


def test_setting_overrides_leave_out_what_is_not_chosen_and_configure_writes_a_copy():
    assert setting_overrides(max_ppo_update_times=None) == {MAX_PPO_UPDATE_TIMES: None}  # None is a choice: null
    assert setting_overrides(rollout_level=False) == {ROLLOUT_LEVEL: False}
    assert setting_overrides() == {}
    cfg = compose_config()
    out = configure(cfg, setting_overrides(rollout_level=False, mode="token-mean", max_ppo_update_times=3))
    assert out is not cfg and cfg.algorithm.enable_rollout_level_advantage is True  # the caller's config untouched
    assert out.algorithm.enable_rollout_level_advantage is False and out.agentlightning.max_ppo_update_times == 3
    assert out.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    assert (
        configure(cfg, {MAX_PPO_UPDATE_TIMES: 2}, in_place=True) is cfg and cfg.agentlightning.max_ppo_update_times == 2
    )
