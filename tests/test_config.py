import re

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from agl_lab import ConfigError, compose_config
from agl_lab.config.bases import BASES
from agl_lab.config.compose import base_config, compose_from, shared_base, short_run_config
from agl_lab.lab.examples import EXAMPLE_OVERRIDES


def test_defaults_are_verl_ppo_trainer_plus_agent_lightning():
    cfg = compose_config()
    # Agent Lightning's additions
    assert cfg.algorithm.enable_rollout_level_advantage is True
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "per_rollout_mean"
    assert cfg.actor_rollout_ref.actor.calculate_entropy is True
    assert cfg.actor_rollout_ref.rollout.mode == "async"
    assert cfg.data.filter_overlong_prompts is False
    agl = OmegaConf.to_container(cfg.agentlightning)
    assert agl == {
        "agl_base_url": "http://localhost:8080",
        "agl_key": "",
        "hooks": None,
        "rollout_timeout_seconds": 1800,
        "local": {"agent_class": None, "env_map": {}},
        "k8s": {"job_template_path": None},
        "reward_fillna_value": 0.0,
        "max_ppo_update_times": None,
        "trace_aggregator": {
            "level": "trajectory",
            "trajectory_max_prompt_length": 2048,
            "trajectory_max_response_length": 8192,
            # 1.0.2 reads it with .get (default none); agl_lab lists it so that it can be set without a "+"
            "trajectory_max_total_length": None,
        },
        "async_rollout": {"enabled": False, "async_train_batch_size": None},
    }
    # verl's own ppo_trainer defaults are untouched underneath
    assert cfg.actor_rollout_ref.actor.clip_ratio_c == 3.0
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 256
    assert cfg.algorithm.adv_estimator == "gae"
    # agl_lab's own section (the short-run fields: agl_lab.LabConfig and the trainer)
    assert OmegaConf.to_container(cfg.lab) == {
        "seed": 0,
        "per_rollout_divisor": "rows",
        "cap_drop_unit": "row",
        "model": "tiny",
        "task": "lock",
        "task_size": 8,
        "max_turns": 4,
        "rewrite_prob": 0.3,
        "turn_cost": 0.0,
        "heldout_size": 16,
        "model_path": None,
        "model_layers": 2,
        "model_hidden": 64,
        "device": "auto",
        "run_dir": None,
        "actor": "lab",
        "wandb_mode": "auto",
        "cpu_threads": 1,
        "curve_smoothing": 0.6,
        "curve_overlay": [],
    }
    OmegaConf.to_container(cfg, resolve=True)  # resolvable


def test_overrides_dict_then_dotlist_later_wins():
    cfg = compose_config(
        overrides={
            "algorithm": {"adv_estimator": "grpo"},
            "agentlightning.max_ppo_update_times": 4,
            "data": {"train_batch_size": 8},
        },
        dotlist=["agentlightning.max_ppo_update_times=2", "actor_rollout_ref.rollout.n=3"],
    )
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.agentlightning.max_ppo_update_times == 2
    assert cfg.data.train_batch_size == 8
    # verl's interpolations stay live: the actor's rollout_n follows rollout.n
    assert OmegaConf.to_container(cfg, resolve=True)["actor_rollout_ref"]["actor"]["rollout_n"] == 3


def test_compose_returns_independent_copies():
    first = compose_config(dotlist=["lab.seed=5"])
    second = compose_config()
    assert first.lab.seed == 5 and second.lab.seed == 0
    assert base_config().lab.seed == 0


def test_hydra_value_syntax():
    cfg = compose_config(
        dotlist=[
            "trainer.logger=[console,file]",
            "actor_rollout_ref.actor.optim.lr=1e-5",
            "agentlightning.hooks=null",
            "trainer.experiment_name='two words'",
            "actor_rollout_ref.actor.clip_ratio_low=0",  # an int for a float key becomes a float
        ]
    )
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-5)
    assert cfg.trainer.experiment_name == "two words"
    assert isinstance(cfg.actor_rollout_ref.actor.clip_ratio_low, float)


def test_floats_declared_by_verls_dataclasses_accept_any_number():
    # verl's YAML writes these floats as integers (entropy_coeff: 0, top_p: 1); its dataclasses declare float.
    cfg = compose_config(dotlist=["actor_rollout_ref.actor.entropy_coeff=0.01", "actor_rollout_ref.rollout.top_p=0.9"])
    assert cfg.actor_rollout_ref.actor.entropy_coeff == 0.01 and cfg.actor_rollout_ref.rollout.top_p == 0.9
    with pytest.raises(ConfigError, match="must be an integer"):  # ppo_mini_batch_size is an int in the dataclass
        compose_config(dotlist=["actor_rollout_ref.actor.ppo_mini_batch_size=2.5"])


def test_open_sections_accept_new_keys_and_plus_adds_what_verl_reads():
    cfg = compose_config(
        overrides={"agentlightning": {"local": {"env_map": {"OPENAI_BASE_URL": "http://x"}}}},
        # gdpo_reward_keys: verl's AlgoConfig declares it, its YAML leaves it out (the doctor's own fix for gdpo)
        dotlist=["+algorithm.gdpo_reward_keys=[format,answer]", "~agentlightning.k8s.job_template_path"],
    )
    assert cfg.agentlightning.local.env_map.OPENAI_BASE_URL == "http://x"
    assert list(cfg.algorithm.gdpo_reward_keys) == ["format", "answer"]
    assert "job_template_path" not in cfg.agentlightning.k8s
    # a key nobody reads is refused, `+` or not, with the nearest key verl reads
    with pytest.raises(ConfigError, match=re.escape("unknown key 'trainer.my_note'")):
        compose_config(dotlist=["+trainer.my_note=hello"])
    with pytest.raises(ConfigError, match=re.escape("did you mean 'algorithm.gdpo_reward_keys'?")):
        compose_config(dotlist=["+algorithm.gdpo_reward_key=[a]"])
    with pytest.raises(ConfigError, match=re.escape("algorithm.gdpo_reward_keys must be a list, e.g. [a,b], got 'a'")):
        compose_config(dotlist=["+algorithm.gdpo_reward_keys=a"])


@pytest.mark.parametrize(
    ("overrides", "dotlist", "text"),
    [
        (
            {},
            ["agentlightning.max_ppo_update_time=2"],
            "unknown key 'agentlightning.max_ppo_update_time' (did you mean 'agentlightning.max_ppo_update_times'?)",
        ),
        (
            {},
            ["algorithm.enable_rollout_level_advantag=true"],
            "did you mean 'algorithm.enable_rollout_level_advantage'?",
        ),
        ({}, ["max_ppo_update_times=2"], "did you mean 'agentlightning.max_ppo_update_times'?"),
        (
            {"actor_rollout_ref": {"actor": {"policy_loss": {"loss_mod": "vanilla"}}}},
            [],
            "did you mean 'actor_rollout_ref.actor.policy_loss.loss_mode'?",
        ),
        ({}, ["data.train_batch_size=eight"], "data.train_batch_size must be an integer, got 'eight' (str)"),
        ({}, ["data.train_batch_size=8.5"], "data.train_batch_size must be an integer, got 8.5 (float)"),
        ({}, ["algorithm.enable_rollout_level_advantage=1"], "must be a boolean (true/false), got 1 (int)"),
        ({}, ["trainer.logger=console"], "trainer.logger must be a list, e.g. [a,b], got 'console'"),
        ({}, ["lab.seed=abc"], "lab.seed must be an integer, got 'abc'"),
        ({}, ["agentlightning.max_ppo_update_times"], "Error parsing override 'agentlightning.max_ppo_update_times'"),
        ({}, ["~trainer.no_such_key"], "cannot delete 'trainer.no_such_key': no such key"),
        ({}, ["+lab.extra=1"], "lab.extra"),
        # several values are a sweep: only `agl-lab sweep` takes them
        (
            {},
            ["algorithm.enable_rollout_level_advantage=true,false"],
            "algorithm.enable_rollout_level_advantage=true,false: several values (a sweep) are accepted only by "
            "`agl-lab sweep`",
        ),
        ({}, ["lab.seed=range(3)"], "lab.seed=range(3): several values (a sweep)"),
    ],
)
def test_bad_keys_and_values_are_errors(overrides, dotlist, text):
    with pytest.raises(ConfigError, match=re.escape(text)):
        compose_config(overrides=overrides, dotlist=dotlist)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        compose_config(dotlist=["agentlightning.max_ppo_update_time=2", "data.train_batch_size=x"])
    lines = str(err.value).splitlines()
    assert lines[0] == "config has problems:" and len(lines) == 3


def test_broken_interpolation_is_an_error():
    with pytest.raises(ConfigError, match="fix the interpolation"):
        compose_config(dotlist=["trainer.experiment_name=${no.such.key}"])


def test_plain_edits_cannot_break_the_bases_interpolations():
    # compose_config resolves the config again only after a deletion or a new ${...} (compose._plain): it relies on
    # every interpolation of the base taking whatever value its key holds, as oc.select and a plain reference do
    base = shared_base()
    texts = [node._value() for node in _interpolations(base)]
    assert {resolver for t in texts for resolver in re.findall(r"\$\{([\w.]+):", t)} == {"oc.select"}
    referenced = [t[2:-1] for t in texts if re.fullmatch(r"\$\{\w[\w.]*\}", t)]
    for key in referenced:  # a plain reference's key cannot be deleted (it has a value: set it instead)
        with pytest.raises(ConfigError, match="cannot delete it"):
            compose_config(dotlist=[f"~{key}"])
    test_broken_interpolation_is_an_error()  # a new ${...} is resolved


def _interpolations(node):
    for key in node.keys():
        child = node._get_node(key)
        if child._is_interpolation():
            yield child
        elif isinstance(child, DictConfig):
            yield from _interpolations(child)


def test_composition_leaves_a_running_hydra_app_alone():
    with initialize_config_module(config_module="agl_lab.config.conf", version_base=None):
        from agl_lab.config.compose import shared_base

        shared_base.cache_clear()
        compose_config()
        assert GlobalHydra.instance().is_initialized()
        assert compose(config_name="agl_trainer").algorithm.enable_rollout_level_advantage is True


@pytest.mark.parametrize(
    ("item", "text"),
    [
        # keys whose default is null were never type-checked (trainer.total_training_steps=abc reached the hand-off)
        ("trainer.total_training_steps=abc", "trainer.total_training_steps must be an integer, got 'abc' (str)"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=x", "must be an integer, got 'x'"),  # verl dataclass
        ("critic.enable=1", "critic.enable must be a boolean (true/false), got 1 (int)"),
        ("agentlightning.max_ppo_update_times=two", "must be an integer, got 'two'"),
        ("data.val_batch_size=[1]", "data.val_batch_size must be an integer, got [1] (list)"),
        # deleting what the trainer reads
        ("~algorithm", "algorithm: cannot delete it: verl's trainer and agl_lab read this section"),
        ("~algorithm.gamma", "algorithm.gamma: cannot delete it: verl's trainer and agl_lab read this key"),
        # Hydra's multirun syntax composes no single config
        ("lab.seed=0,1,2", "lab.seed=0,1,2: several values (a sweep) are accepted only by `agl-lab sweep`"),
        ("lab.seed=range(3)", "several values (a sweep) are accepted only by `agl-lab sweep`"),
        ("algorithm.adv_estimator=choice(grpo,rloo)", "several values (a sweep)"),
    ],
)
def test_values_that_used_to_slip_through_are_refused_in_one_line(item, text):
    with pytest.raises(ConfigError, match=re.escape(text)) as err:
        compose_config(dotlist=[item])
    assert len(str(err.value).splitlines()) == 2  # the header and one line for the one problem


def test_null_default_keys_take_their_declared_type():
    cfg = compose_config(
        dotlist=[
            "trainer.total_training_steps=5",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "distillation.distillation_loss.loss_max_clamp=1",  # a float field: the int becomes 1.0
            "agentlightning.hooks={on_step:x}",  # null and undeclared: any value
            "~agentlightning.k8s.job_template_path",  # a null default may be deleted
        ]
    )
    assert cfg.trainer.total_training_steps == 5 and cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4
    assert cfg.distillation.distillation_loss.loss_max_clamp == 1.0
    assert isinstance(cfg.distillation.distillation_loss.loss_max_clamp, float)


@pytest.mark.parametrize(
    "item",
    [
        "agentlightning.agl_key=[sk-config-4711]",  # wrong type
        "agentlightning.agl_key=sk-config-4711,other",  # sweep syntax
        "agentlightning.agl_key='sk-config-4711",  # unparsable
        "+agentlightning.local.env_map.OPENAI_API_KEY=[sk-config-4711]",  # fine: an open section takes any value
    ],
)
def test_config_errors_never_echo_a_secret(item):
    try:
        compose_config(dotlist=[item, "data.train_batch_size=x"])
    except ConfigError as exc:
        assert "sk-config-4711" not in str(exc) and "data.train_batch_size" in str(exc)
    else:
        raise AssertionError("data.train_batch_size=x must be refused")


def test_each_named_base_is_agent_lightnings_defaults_plus_its_own_file():
    assert list(BASES) == ["agl", "example", "short-run"]
    agl, example, short = (compose_from(name) for name in BASES)
    assert agl == compose_config()  # nothing added: what Agent Lightning's trainer gets
    assert (agl.algorithm.adv_estimator, example.algorithm.adv_estimator) == ("gae", "grpo")
    assert example == compose_config(EXAMPLE_OVERRIDES) and example.data.train_batch_size == 2
    assert short == short_run_config() and short.trainer.total_training_steps == 40
    # yours go on top of the base's, then the dotlist
    cfg = compose_from("example", {"data": {"train_batch_size": 4}}, ["actor_rollout_ref.rollout.n=5"])
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n, cfg.algorithm.adv_estimator) == (4, 5, "grpo")
    assert all(BASES[name].label.startswith("Agent Lightning's defaults") for name in BASES)
    with pytest.raises(ConfigError, match="unknown base 'short_run': choose one of agl, example, short-run"):
        compose_from("short_run")
