import pytest
from omegaconf import OmegaConf

from agl_lab import ConfigError, compose_config, diagnose
from agl_lab.config.bases import BASES
from agl_lab.config.checks import lab_estimator_problem
from agl_lab.config.compose import compose_from
from agl_lab.config.doctor import bad_keys_and_values, raise_for_errors, settings_frame
from agl_lab.config.settings import SETTINGS
from agl_lab.lab.examples import EXAMPLE_OVERRIDES


def findings(*dotlist):
    return diagnose(compose_config(overrides=EXAMPLE_OVERRIDES, dotlist=dotlist))


def only(found, level):
    return [f for f in found if f.level == level]


def test_agent_lightnings_recommended_settings_have_no_findings():
    assert findings("agentlightning.max_ppo_update_times=2") == []


def test_no_cap_is_a_note_with_the_recommendation():
    (note,) = findings()
    assert note.level == "note" and note.key == "agentlightning.max_ppo_update_times"
    assert "agentlightning.max_ppo_update_times=2" in note.fix


@pytest.mark.parametrize(
    ("dotlist", "key", "text"),
    [
        (
            ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"],
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            "rollout-level advantage is on but loss_mode is 'vanilla'",
        ),
        (
            ["algorithm.enable_rollout_level_advantage=false"],
            "algorithm.enable_rollout_level_advantage",
            "per_rollout_mean is on but rollout-level advantage is off",
        ),
    ],
)
def test_half_set_pair_is_a_warning_with_both_fixes(dotlist, key, text):
    (warning,) = only(findings(*dotlist, "agentlightning.max_ppo_update_times=2"), "warning")
    assert warning.key == key and text in warning.message
    assert "=per_rollout_mean" in warning.fix or "=true" in warning.fix


def test_session_equal_weighs_rollouts_alike_so_it_pairs_with_rollout_level_advantage():
    # verl PR #7580's 1/N gives each rollout one share, like per_rollout_mean; partition_preserving keeps k shares
    cap = "agentlightning.max_ppo_update_times=2"
    assert findings("actor_rollout_ref.actor.policy_loss.loss_mode=session_equal", cap) == []
    (warning,) = only(findings("actor_rollout_ref.actor.policy_loss.loss_mode=partition_preserving", cap), "warning")
    assert "rollout-level advantage is on but loss_mode is 'partition_preserving'" in warning.message


def test_cispo_per_rollout_mean_counts_as_the_per_rollout_half_of_the_pair():
    # Agent Lightning 1.0.2 normalizes advantages by rollout for cispo_per_rollout_mean too
    cispo = "actor_rollout_ref.actor.policy_loss.loss_mode=cispo_per_rollout_mean"
    assert findings(cispo, "agentlightning.max_ppo_update_times=2") == []
    (warning,) = only(
        findings(cispo, "algorithm.enable_rollout_level_advantage=false", "agentlightning.max_ppo_update_times=2"),
        "warning",
    )
    assert warning.key == "algorithm.enable_rollout_level_advantage"
    assert "cispo_per_rollout_mean is on but rollout-level advantage is off" in warning.message


def test_both_off_is_plain_verl_and_fine():
    assert (
        findings(
            "algorithm.enable_rollout_level_advantage=false",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
            "agentlightning.max_ppo_update_times=2",
        )
        == []
    )


@pytest.mark.parametrize(
    ("dotlist", "key", "text"),
    [
        (
            ["algorithm.adv_estimator=remax"],
            "algorithm.adv_estimator",
            "REMAX baseline not yet supported in AgentLightningRayPPOTrainer",
        ),
        (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator", "gae gives per-token advantages"),
        (["algorithm.use_kl_in_reward=true"], "algorithm.use_kl_in_reward", "a KL penalty in the reward"),
        (
            ["actor_rollout_ref.actor.clip_ratio_c=1.0"],
            "actor_rollout_ref.actor.clip_ratio_c",
            "clip_ratio_c must be greater than 1.0, got 1.0",
        ),
        (
            ["agentlightning.max_ppo_update_times=0"],
            "agentlightning.max_ppo_update_times",
            "must be null (no cap) or a positive integer, got 0",
        ),
        (
            ["actor_rollout_ref.actor.ppo_mini_batch_size=4"],
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            "ppo_mini_batch_size (4) is larger than data.train_batch_size (2)",
        ),
        (["actor_rollout_ref.rollout.n=0"], "actor_rollout_ref.rollout.n", "must be a positive integer, got 0"),
        (["algorithm.adv_estimator=grpoo"], "algorithm.adv_estimator", "unknown value 'grpoo' (did you mean 'grpo'?)"),
        (
            ["actor_rollout_ref.actor.policy_loss.loss_mode=per_rollout_means"],
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            "did you mean 'per_rollout_mean'?",
        ),
        (
            ["actor_rollout_ref.actor.loss_agg_mode=token_mean"],
            "actor_rollout_ref.actor.loss_agg_mode",
            "did you mean 'token-mean'?",
        ),
        (
            ["agentlightning.trace_aggregator.level=trajectory-strict"],
            "agentlightning.trace_aggregator.level",
            "unknown value 'trajectory-strict'",
        ),
        (["lab.per_rollout_divisor=tokens"], "lab.per_rollout_divisor", "use one of: rows, rollouts"),
        # values that passed composition, then crashed a run or trained nothing (issue 12)
        (["actor_rollout_ref.rollout.top_p=0"], "actor_rollout_ref.rollout.top_p", "must be in (0, 1], got 0.0"),
        (["actor_rollout_ref.rollout.top_p=1.5"], "actor_rollout_ref.rollout.top_p", "must be in (0, 1], got 1.5"),
        (["actor_rollout_ref.rollout.top_k=-2"], "actor_rollout_ref.rollout.top_k", "must be -1 (off) or >= 0"),
        (
            ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=0"],
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            "must be null or a positive integer, got 0",
        ),
        (
            ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=0"],
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "must be null or a positive integer, got 0",
        ),
        (["actor_rollout_ref.actor.optim.lr=nan"], "actor_rollout_ref.actor.optim.lr", "must be a finite number"),
        (["actor_rollout_ref.actor.optim.lr=inf"], "actor_rollout_ref.actor.optim.lr", "must be a finite number"),
        (["algorithm.gamma=nan"], "algorithm.gamma", "must be a finite number, got nan"),
        (["algorithm.kl_ctrl.target_kl=nan"], "algorithm.kl_ctrl.target_kl", "must be a finite number"),
        (["actor_rollout_ref.actor.ppo_epochs=0"], "actor_rollout_ref.actor.ppo_epochs", "nothing trains"),
        (["lab.seed=-1"], "lab.seed", "must be in [0, 4294967295], got -1"),
        (
            ["algorithm.enable_rollout_level_advantage=false", "algorithm.adv_estimator=gae", "critic.enable=false"],
            "algorithm.adv_estimator",
            "gae needs a critic but critic.enable=false",
        ),
        (
            ["algorithm.enable_rollout_level_advantage=false", "algorithm.adv_estimator=optimal_token_baseline"],
            "algorithm.adv_estimator",
            "needs sum_pi_squared from the actor",
        ),
        (["algorithm.adv_estimator=gdpo"], "algorithm.adv_estimator", "gdpo needs the reward components"),
        (["lab.actor=verll"], "lab.actor", "unknown value 'verll' (did you mean 'verl'?)"),
    ],
)
def test_errors_name_the_key_and_the_fix(dotlist, key, text):
    errors = only(findings(*dotlist), "error")
    assert [e.key for e in errors] == [key]
    assert text in str(errors[0])
    assert errors[0].fix
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        raise_for_errors(errors)


def test_a_typod_value_is_the_one_finding():
    # without the stop, 'per_rollout_maen' also drew a warning (rollout-level advantage without per_rollout_mean)
    # and the no-cap note: advice about a value that does not exist
    typo = "actor_rollout_ref.actor.policy_loss.loss_mode=per_rollout_maen"
    assert [(f.level, f.key) for f in findings(typo)] == [("error", "actor_rollout_ref.actor.policy_loss.loss_mode")]
    cfg = compose_config(overrides=EXAMPLE_OVERRIDES, dotlist=[typo])
    assert bad_keys_and_values(cfg) == diagnose(cfg)
    assert (
        bad_keys_and_values(compose_config(overrides=EXAMPLE_OVERRIDES, dotlist=["algorithm.adv_estimator=remax"]))
        == []
    )


def test_misspelt_keys_and_wrong_types_in_a_config_from_elsewhere():
    # A config loaded from YAML (a run directory, a colleague's file) skips compose_config's checks.
    cfg = compose_config(overrides=EXAMPLE_OVERRIDES)
    OmegaConf.update(cfg, "agentlightning.max_ppo_update_time", 2, force_add=True)
    OmegaConf.update(cfg, "data.train_batch_size", "eight")
    OmegaConf.update(cfg, "trainer.my_section.inner", 1, force_add=True)
    errors = diagnose(OmegaConf.create(OmegaConf.to_yaml(cfg)))
    messages = {e.key: e.message for e in errors}
    assert set(messages) == {"agentlightning.max_ppo_update_time", "data.train_batch_size", "trainer.my_section"}
    assert "did you mean 'agentlightning.max_ppo_update_times'?" in messages["agentlightning.max_ppo_update_time"]
    assert "must be an integer, got 'eight'" in messages["data.train_batch_size"]
    assert all(e.level == "error" for e in errors)


def test_findings_print_on_one_line_each():
    for finding in findings("algorithm.adv_estimator=remax", "actor_rollout_ref.actor.clip_ratio_c=0.5"):
        assert "\n" not in str(finding) and "-> fix:" in str(finding)


def test_a_finite_check_spares_what_may_be_infinite_and_sees_configs_from_elsewhere():
    # an infinite value where verl allows one (a threshold) is not an error; NaN is one anywhere
    assert not only(findings("algorithm.rollout_correction.rollout_is_threshold=inf"), "error")
    cfg = compose_config(overrides=EXAMPLE_OVERRIDES)
    OmegaConf.update(cfg, "actor_rollout_ref.actor.optim.lr", float("nan"))
    errors = only(diagnose(OmegaConf.create(OmegaConf.to_yaml(cfg))), "error")
    assert [e.key for e in errors] == ["actor_rollout_ref.actor.optim.lr"]


@pytest.mark.parametrize("estimator", ["gae", "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo"])
def test_the_lab_says_which_estimators_it_cannot_run(estimator):
    cfg = compose_config(dotlist=[f"algorithm.adv_estimator={estimator}"])
    assert f"algorithm.adv_estimator={estimator} needs" in lab_estimator_problem(cfg)
    assert "use grpo, rloo or reinforce_plus_plus here" in lab_estimator_problem(cfg)
    assert lab_estimator_problem(compose_config(dotlist=["algorithm.adv_estimator=rloo"])) is None


def test_the_settings_table_names_each_setting_with_the_catalogues_label():
    frame = settings_frame(compose_config(overrides=EXAMPLE_OVERRIDES))
    assert list(frame.columns) == ["setting", "key", "value", "default", "meaning"]
    assert frame.setting.tolist() == [s.label for s in SETTINGS.values()]
    estimator = frame.set_index("key").loc["algorithm.adv_estimator"]
    assert (estimator["value"], estimator["default"]) == ("grpo", "gae")


def test_more_turns_than_the_short_run_limits_fit_is_a_warning_with_the_limits_that_fit():
    from agl_lab import short_run_config

    assert [f for f in diagnose(short_run_config()) if f.key == "lab.max_turns"] == []  # the preset fits 4 turns
    (warning,) = [f for f in diagnose(short_run_config(dotlist=["lab.max_turns=8"])) if f.key == "lab.max_turns"]
    # 8 turns, 4 tokens per call: prompts up to 8 + 3 = 11, merged responses up to 6 x 8 - 2 = 46 tokens
    assert "trajectory-level rows of up to 11 prompt and 46 response tokens" in warning.message
    assert "trajectory_max_prompt_length=11 and agentlightning.trace_aggregator.trajectory_max_response_length=46" in (
        warning.fix
    )
    transition = short_run_config(dotlist=["lab.max_turns=8", "agentlightning.trace_aggregator.level=transition"])
    (warning,) = [f for f in diagnose(transition) if f.key == "lab.max_turns"]
    assert "set data.max_prompt_length=45 and data.max_response_length=4" in warning.fix  # 3 + 6 x 7


def test_for_agent_lightnings_trainer_no_finding_is_about_the_lab_task_or_its_knobs():
    # Agent Lightning's calc_x example's response limit: the lab's lock task would outgrow the trajectory limits
    cfg = compose_from("agl", dotlist=["algorithm.adv_estimator=grpo", "data.max_response_length=2048", "lab.seed=-1"])
    for_lab = diagnose(cfg)
    assert {"lab.max_turns", "lab.seed"} <= {f.key for f in for_lab}
    for_agl = diagnose(cfg, trainer="agl")
    assert for_agl == [f for f in for_lab if not f.key.startswith("lab.")] and for_agl  # the rest is the same
    with pytest.raises(ValueError, match=r"trainer must be one of \('lab', 'agl'\), got 'verl'"):
        diagnose(cfg, trainer="verl")
    assert BASES["agl"].trainer == "agl" and {BASES[b].trainer for b in ("example", "short-run")} == {"lab"}


@pytest.mark.parametrize(
    "dotlist",
    [
        [],
        ["algorithm.enable_rollout_level_advantage=false"],
        ["algorithm.adv_estimator=remax", "actor_rollout_ref.actor.clip_ratio_c=0.5"],
        ["agentlightning.max_ppo_update_times=0", "lab.max_turns=8"],
    ],
)
def test_a_composed_config_gets_the_same_findings_without_rechecking_what_compose_checked(dotlist):
    cfg = compose_config(overrides=EXAMPLE_OVERRIDES, dotlist=dotlist)
    assert [str(f) for f in diagnose(cfg, composed=True)] == [str(f) for f in diagnose(cfg)]


def test_a_value_equal_to_its_default_in_another_type_is_still_checked():
    # the doctor skips leaves that are the base's own value, of the base's own type: True == 1, but it is no number
    cfg = compose_config(overrides=EXAMPLE_OVERRIDES)
    assert OmegaConf.select(cfg, "actor_rollout_ref.rollout.top_p") == 1
    OmegaConf.update(cfg, "actor_rollout_ref.rollout.top_p", True)
    errors = diagnose(OmegaConf.create(OmegaConf.to_yaml(cfg)))
    assert [e.key for e in errors] == ["actor_rollout_ref.rollout.top_p"]
    assert "must be a number, got True" in errors[0].message


@pytest.mark.parametrize(
    "term", ["actor_rollout_ref.actor.entropy_coeff=0.01", "actor_rollout_ref.actor.use_kl_loss=true"]
)
@pytest.mark.parametrize("mode", ["session_equal", "partition_preserving"])
def test_verls_actor_beside_row_weights_and_an_entropy_or_kl_term_is_refused(mode, term):
    # verl PR #7580 (revision 2) weighs every loss term; verl's engine weighs only the advantages
    dotlist = [
        "lab.actor=verl",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}",
        term,
        "algorithm.adv_estimator=grpo",
    ]
    # on verl 0.8.0 lab.actor=verl is refused for its platform registry too: the row-weight error is looked for alone
    said = "applies it to the advantages only"
    errors = [f for f in diagnose(compose_config(dotlist=dotlist)) if f.level == "error" and said in f.message]
    assert [f.key for f in errors] == ["lab.actor"] and "lab.actor=lab" in errors[0].fix
    assert not [f for f in diagnose(compose_config(dotlist=[*dotlist[:2], dotlist[3]])) if said in f.message]


@pytest.mark.parametrize("trainer", ["lab", "agl"])
def test_a_std_flag_that_verl_never_hands_the_estimator_is_a_warning(trainer):
    def std_findings(*dotlist):
        cfg = compose_config(overrides=EXAMPLE_OVERRIDES, dotlist=dotlist)
        return [f for f in diagnose(cfg, trainer=trainer) if f.key == "algorithm.norm_adv_by_std_in_grpo"]

    (found,) = std_findings("algorithm.adv_estimator=grpo_vectorized", "algorithm.norm_adv_by_std_in_grpo=false")
    assert found.level == "warning" and "never passes the flag to grpo_vectorized" in found.message
    assert "algorithm.adv_estimator=grpo" in found.fix
    assert std_findings("algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=false") == []
    assert std_findings("algorithm.adv_estimator=grpo_passk", "algorithm.norm_adv_by_std_in_grpo=false") == []
    assert std_findings("algorithm.adv_estimator=grpo_vectorized") == []


def test_the_std_warning_is_what_the_pipeline_does_on_verl():
    # the warning's claim, on the lab's own pipeline (verl's compute_advantage): grpo_vectorized with the flag false
    # gives grpo's std-divided advantages, not grpo's mean-centred ones
    import numpy as np
    import torch
    from verl import DataProto

    from agl_lab.core.pipeline import estimate_advantages

    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 3.0])  # (rows,): two prompts of three rollouts, one row each
    scores = torch.zeros(6, 4)  # (rows, R)
    scores[:, -1] = rewards

    def advantages(estimator, flag):
        batch = DataProto.from_dict(
            tensors={"token_level_rewards": scores.clone(), "response_mask": torch.ones(6, 4)},
            non_tensors={
                "uid": np.array(list("aaabbb"), dtype=object),
                "data_id_list": np.array(list("aaabbb"), dtype=object),
                "rollout_id_list": np.array([f"r{i}" for i in range(6)], dtype=object),
            },
        )
        cfg = compose_config(
            dotlist=[f"algorithm.adv_estimator={estimator}", f"algorithm.norm_adv_by_std_in_grpo={flag}",
                     "algorithm.enable_rollout_level_advantage=false", "actor_rollout_ref.rollout.n=3"]
        )  # fmt: skip
        out, _ = estimate_advantages(batch, cfg, rollout_level=False)  # step 4: verl's compute_advantage
        return out.batch["advantages"][:, -1]

    vectorized_off = advantages("grpo_vectorized", "false")
    assert torch.allclose(vectorized_off, advantages("grpo", "true"), atol=1e-6)
    assert not torch.allclose(vectorized_off, advantages("grpo", "false"), atol=1e-3)
