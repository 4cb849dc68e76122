"""Fault suite, the doctor: what any later stage refuses (composition, verl, the trainer, the machine's memory), the
doctor refuses first, naming the key and the fix — from one table of ranges, for every key in it — and a sweep checks
every setting before its first cell trains."""

import re

import pytest
from omegaconf import OmegaConf

from agl_lab import ConfigError, compose_config, diagnose, run_sweep, short_run_config
from agl_lab.cli import main
from agl_lab.config.compose import BASES, compose_from, shared_base
from agl_lab.config.constraints import CONSTRAINTS, Constraint, constraint_problems
from agl_lab.config.doctor import DoctorError
from agl_lab.config.key_types import default_value
from agl_lab.training.preflight import FeasibilityWarning, check_trainable
from agl_lab.training.sweep_plan import SWEEP_OWNED_KEYS
from conftest import TINY_RUN


def outside(rule: Constraint) -> list:
    """Values the rule refuses: null (unless allowed), just below its low end, just above its high end."""
    values = [] if rule.nullable else [None]
    step = 1 if rule.kind == "integer" else 0.5
    if rule.low is not None:
        values.append(rule.low if rule.low_open else rule.low - step)
    if rule.high is not None:
        values.append(rule.high if rule.high_open else rule.high + step)
    return [int(v) if rule.kind == "integer" and v is not None else v for v in values]


# (the lab: section's fields are not nullable: composition already refuses null there)
CASES = [(k, v) for k, rule in CONSTRAINTS.items() for v in outside(rule) if not (k.startswith("lab.") and v is None)]


@pytest.fixture(scope="module")
def base():
    return short_run_config(dotlist=TINY_RUN)


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v}" for k, v in CASES])
def test_every_range_of_the_table_is_a_finding_naming_the_key_and_the_fix(base, key, value):
    good = OmegaConf.select(base, key)
    OmegaConf.update(base, key, value, merge=False)
    try:
        ((found, message, fix),) = constraint_problems(base, default=lambda k: default_value(shared_base(), k))
    finally:
        OmegaConf.update(base, key, good, merge=False)
    assert found == key
    assert ("null" if value is None else repr(value)) in message or str(value) in message
    assert fix.startswith(f"set {key}")


@pytest.mark.parametrize("name", list(BASES))
def test_every_base_satisfies_the_table(name):
    cfg = compose_from(name)
    assert constraint_problems(cfg, default=lambda k: None) == []


@pytest.mark.parametrize(
    ("item", "text"),
    [
        ("data.train_batch_size=null", "data.train_batch_size: must be a positive integer, got null"),
        ("actor_rollout_ref.rollout.n=null", "actor_rollout_ref.rollout.n: must be a positive integer, got null"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=null", "ppo_mini_batch_size: must be a positive integer"),
        ("actor_rollout_ref.actor.optim.lr=-1", "optim.lr: must be a number >= 0, got -1.0: a negative learning rate"),
        ("trainer.total_training_steps=-5", "total_training_steps: must be null or a positive integer, got -5"),
        ("data.max_response_length=0", "data.max_response_length: must be a positive integer, got 0"),
        ("actor_rollout_ref.actor.clip_ratio=-0.2", "clip_ratio: must be a number > 0, got -0.2"),
        ("data.max_prompt_length=-1", "data.max_prompt_length: must be a positive integer, got -1"),
        ("actor_rollout_ref.rollout.temperature=0", "temperature: must be a number > 0, got 0.0"),
    ],
)
def test_what_train_refused_or_crashed_on_is_the_doctors_error_first(item, text):
    errors = [str(f) for f in diagnose(short_run_config(dotlist=[*TINY_RUN, item])) if f.level == "error"]
    assert len(errors) == 1 and text in errors[0] and "-> fix: set " in errors[0], errors


@pytest.mark.parametrize(
    "item", ["actor_rollout_ref.rollout.n=null", "actor_rollout_ref.actor.ppo_mini_batch_size=null"]
)
def test_check_says_it_instead_of_crashing(capsys, item):
    assert main(["check", item]) == 1  # exit 70 (a TypeError inside check) before
    err = capsys.readouterr().err
    assert "must be a positive integer, got null" in err and "unexpected error" not in err


def test_an_infeasible_run_is_refused_before_anything_is_created(capsys, tmp_path):
    with pytest.raises(DoctorError, match=r"a step would need ~\d.* GiB of .* \(cpu\).*it cannot fit in memory"):
        check_trainable(short_run_config(dotlist=["actor_rollout_ref.rollout.n=1000000"]))
    with pytest.raises(DoctorError, match=r"TiB .*68,719,804,416-parameter policy.*cannot fit"):
        check_trainable(short_run_config(dotlist=["lab.model_hidden=8192", "lab.model_layers=64"]))
    with pytest.warns(FeasibilityWarning, match=r"a step would take .* s per step"):  # fits, but slow here
        check_trainable(short_run_config(dotlist=["lab.model_hidden=1024", "lab.model_layers=8"]))
    run_dir = tmp_path / "run"
    code = main(["train", "actor_rollout_ref.rollout.n=1000000", f"lab.run_dir={run_dir}"])  # hung at step 1 before
    assert code == 1 and "cannot fit in memory" in capsys.readouterr().err
    assert not run_dir.exists()


def test_plus_adds_what_verl_reads_and_refuses_the_rest_with_the_nearest_key(capsys):
    # the doctor's own fix for gdpo, as the README writes it
    fix = next(f.fix for f in diagnose(compose_config(dotlist=["algorithm.adv_estimator=gdpo"])) if f.level == "error")
    assert "+algorithm.gdpo_reward_keys=[key1,key2]" in fix
    code = main(["check", "algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[format,answer]"])
    out, err = capsys.readouterr()
    assert code == 0 and "unknown key" not in out + err and "Example batch skipped" in out
    assert main(["check", "+algorithm.gdpo_reward_key=[format]"]) == 2
    assert "(did you mean 'algorithm.gdpo_reward_keys'?)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=re.escape("unknown key 'trainer.nobody_reads_this'")):
        compose_config(dotlist=["+trainer.nobody_reads_this=1"])


def test_a_sweep_checks_every_setting_before_the_first_cell_trains(tmp_path):
    settings = {"grpo": [], "gae": ["algorithm.adv_estimator=gae", "algorithm.enable_rollout_level_advantage=false"]}
    with pytest.raises(ConfigError, match="setting 'gae': algorithm.adv_estimator=gae needs a critic's values"):
        run_sweep(settings, [0, 1], sweep_dir=tmp_path / "s", dotlist=TINY_RUN, executor="serial", progress=False)
    assert not (tmp_path / "s").exists()  # the grpo cells did not train first
    with pytest.raises(DoctorError, match="setting 'remax': algorithm.adv_estimator: REMAX baseline"):
        run_sweep({"remax": ["algorithm.adv_estimator=remax"]}, [0], sweep_dir=tmp_path / "s", dotlist=TINY_RUN)


@pytest.mark.parametrize("key", list(SWEEP_OWNED_KEYS))
@pytest.mark.parametrize("where", ["dotlist", "setting", "overrides"])
def test_a_sweep_refuses_the_keys_it_sets_itself_saying_why(tmp_path, key, where):
    value = "5" if key == "lab.seed" else "x"
    item = f"{key}={value}"
    kwargs = {"dotlist": [*TINY_RUN, item] if where == "dotlist" else TINY_RUN}
    if where == "overrides":
        kwargs["overrides"] = {key: int(value) if value.isdigit() else value}
    settings = {"a": [item] if where == "setting" else []}
    with pytest.raises(ConfigError, match=re.escape(f"a sweep sets {key} itself, to {SWEEP_OWNED_KEYS[key]}")):
        run_sweep(settings, [0], sweep_dir=tmp_path / "s", executor="serial", progress=False, **kwargs)
    assert not (tmp_path / "s").exists()


def test_the_cli_sweep_refuses_them_too(capsys, tmp_path):
    code = main(["sweep", "lab.seed=5", "lab.run_dir=x", "trainer.experiment_name=y", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("a sweep sets") == 3 and "(it would be ignored)" in err
    assert not (tmp_path / "s").exists()


def test_the_readme_lists_every_range_of_the_table():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### The doctor's ranges", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in CONSTRAINTS if not key.startswith("lab.") and f"`{key}`" not in section]
    assert missing == []
