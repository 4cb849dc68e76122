from agl_lab.config_panel import ConfigPanel
from agl_lab.rows import EXAMPLE_OVERRIDES


def test_form_values_compose_the_config_and_its_export():
    panel = ConfigPanel(EXAMPLE_OVERRIDES)
    assert panel.cfg.algorithm.enable_rollout_level_advantage is True  # Agent Lightning's default
    panel.cap.value = "2"
    panel.loss_mode.value = ("per_rollout_mean", "rollouts")
    assert panel.cfg.agentlightning.max_ppo_update_times == 2
    assert panel.cfg.lab.per_rollout_divisor == "rollouts"
    assert "agentlightning.max_ppo_update_times=2" in panel.dotlist()
    assert "max_ppo_update_times: 2" in panel.view.value  # the overrides for Agent Lightning
    assert "Doctor: no findings." in panel.view.value


def test_half_set_pair_shows_the_doctors_warning():
    panel = ConfigPanel(EXAMPLE_OVERRIDES)
    panel.rollout_level.value = False
    assert [f.level for f in panel.findings] == ["warning", "note"]
    assert "per_rollout_mean is on but rollout-level advantage is off" in panel.view.value
    panel.loss_mode.value = ("vanilla", None)
    assert [f.level for f in panel.findings] == ["note"]  # both off: plain verl


def test_bad_extra_items_are_refused_visibly():
    panel = ConfigPanel(EXAMPLE_OVERRIDES)
    panel.extra.value = "agentlightning.max_ppo_update_time=3"
    assert panel.cfg is None
    assert "did you mean &#x27;agentlightning.max_ppo_update_times&#x27;?" in panel.view.value
    panel.extra.value = "data.train_batch_size='4"
    assert "No closing quotation" in panel.view.value
    panel.extra.value = "data.train_batch_size=4"
    assert panel.cfg.data.train_batch_size == 4


def test_estimator_choice_reaches_the_doctor():
    panel = ConfigPanel(EXAMPLE_OVERRIDES)
    panel.estimator.value = "gae"
    assert any(f.level == "error" and "gae gives per-token advantages" in f.message for f in panel.findings)


def test_base_dotlist_is_the_starting_point():
    panel = ConfigPanel(EXAMPLE_OVERRIDES, ["agentlightning.max_ppo_update_times=3"])
    assert panel.cap.value == "3" and panel.cfg.agentlightning.max_ppo_update_times == 3
    panel.cap.value = "none"
    assert panel.cfg.agentlightning.max_ppo_update_times is None
    assert ">null<" in panel.view.value
