from agl_lab.lab.examples import EXAMPLE_OVERRIDES
from agl_lab.ui.config_panel import ConfigPanel


def test_form_values_compose_the_config_and_its_export():
    panel = ConfigPanel(EXAMPLE_OVERRIDES)
    assert panel.cfg.algorithm.enable_rollout_level_advantage is True  # Agent Lightning's default
    panel.controls["max_ppo_update_times"].value = 2
    panel.controls["mode"].value = "per_rollout_mean:rollouts"
    assert panel.cfg.agentlightning.max_ppo_update_times == 2
    assert panel.cfg.lab.per_rollout_divisor == "rollouts"
    assert "agentlightning.max_ppo_update_times=2" in panel.dotlist()
    assert "max_ppo_update_times: 2" in panel.view.value  # the overrides for Agent Lightning
    assert "Doctor: no findings." in panel.view.value


def test_half_set_pair_shows_the_doctors_warning():
    panel = ConfigPanel(EXAMPLE_OVERRIDES)
    panel.controls["rollout_level"].value = False
    assert [f.level for f in panel.findings] == ["warning", "note"]
    assert "per_rollout_mean is on but rollout-level advantage is off" in panel.view.value
    panel.controls["mode"].value = "token-mean"
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
    assert panel.controls["max_ppo_update_times"].value == 3 and panel.cfg.agentlightning.max_ppo_update_times == 3
    panel.controls["max_ppo_update_times"].value = "none"
    assert panel.cfg.agentlightning.max_ppo_update_times is None
    assert ">null<" in panel.view.value


def test_a_loss_the_catalogue_lacks_is_kept_and_named():
    # a config using gspo opens on "the config's own" loss, not silently on another mode
    panel = ConfigPanel(EXAMPLE_OVERRIDES, ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])
    assert panel.controls["mode"].value == "config"
    assert panel.controls["mode"].label.startswith("the config's own (gspo")
    assert panel.cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "gspo"
    assert not any("policy_loss.loss_mode" in item for item in panel.dotlist()[1:])


def test_the_form_uses_the_catalogues_labels():
    from agl_lab import LOSS_MODES
    from agl_lab.config.modes import trainable_modes

    panel = ConfigPanel(EXAMPLE_OVERRIDES)
    assert [label for label, _ in panel.controls["mode"].options] == [LOSS_MODES[m].label for m in trainable_modes()]
    assert panel.controls["rollout_level"].description == "rollout-level advantage"


def test_the_form_composes_over_a_config_file_and_speaks_of_the_trainer_named(tmp_path):
    from agl_lab.config.config_file import EXAMPLE_CONFIG_FILE

    file = tmp_path / "mine.yaml"
    file.write_text(EXAMPLE_CONFIG_FILE.read_text() + "lab:\n  max_turns: 40\n")  # a knob only the lab trainer reads
    lab = ConfigPanel(config_file=file)
    agl = ConfigPanel(config_file=file, trainer="agl")
    for panel in (lab, agl):
        assert panel.cfg.data.train_batch_size == 32 and panel.controls["ppo_mini_batch_size"].value == 8
    assert any(f.key.startswith("lab.") for f in lab.findings)  # the lab trainer's rows outgrow the limits
    assert not any(f.key.startswith("lab.") for f in agl.findings)  # Agent Lightning's trainer never reads lab:
    agl.extra.value = "data.train_batch_size=64"  # the form's items go after the file
    assert agl.cfg.data.train_batch_size == 64 and "train_batch_size: 64" in agl.view.value
