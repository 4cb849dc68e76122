"""Fault suite, the doctor: what any later stage refuses (composition, verl, the trainer, the machine's memory), the
doctor refuses first, naming the key and the fix — from one table of ranges, for every key in it, and from the
trainer's own start-up code — so ``agl-lab check`` and ``agl-lab train`` give the same line for every config the
trainer refuses; a size that cannot finish is refused before any work; and a sweep checks every setting before its
first cell trains."""

import copy
import re

import pytest
import torch
from omegaconf import OmegaConf

from agl_lab import ConfigError, compose_config, diagnose, run_sweep, short_run_config
from agl_lab.cli import main
from agl_lab.config.bases import BASES
from agl_lab.config.compose import compose_from, shared_base
from agl_lab.config.constraints import CONSTRAINTS, Constraint, constraint_problems
from agl_lab.config.doctor import DoctorError
from agl_lab.config.key_types import default_value
from agl_lab.core.keys import LOSS_MODE
from agl_lab.studies.sweep_plan import SWEEP_OWNED_KEYS
from agl_lab.training.preflight import FeasibilityWarning, check_trainable
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
    # the doctor's own fix for gdpo, as docs/config.md writes it
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


def test_the_docs_list_every_range_of_the_table():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()
    section = page.split("## The doctor's ranges", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in CONSTRAINTS if not key.startswith("lab.") and f"`{key}`" not in section]
    assert missing == []


# Each config the trainer refused (exit 2 or 70, a run directory left behind) or ran on while `check` passed it
# (issue 34), and the key the one error names: `check` and `train` now give the same verdict and line.
_ACTOR = "actor_rollout_ref.actor"
GATE_CASES = {
    "both_micro_batch_sizes": ([f"{_ACTOR}.ppo_micro_batch_size=4"], f"{_ACTOR}.ppo_micro_batch_size"),
    "steps_null": (["trainer.total_training_steps=null"], "trainer.total_training_steps"),
    "dro_without_beta": ([f"{_ACTOR}.policy_loss.loss_mode=dro"], f"{_ACTOR}.policy_loss.dro_beta"),
    "weight_decay": ([f"{_ACTOR}.optim.weight_decay=-1"], f"{_ACTOR}.optim.weight_decay"),
    "betas": ([f"{_ACTOR}.optim.betas=[0.9,2.0]"], f"{_ACTOR}.optim.betas"),
    "warmup_style": ([f"{_ACTOR}.optim.warmup_style=bogus"], f"{_ACTOR}.optim.warmup_style"),
    # a GPU machine has cuda: an index it lacks is refused there alike
    "device_cuda": (["lab.device=cuda" if not torch.cuda.is_available() else "lab.device=cuda:64"], "lab.device"),
    "device_banana": (["lab.device=banana"], "lab.device"),
    "kl_loss_type": ([f"{_ACTOR}.use_kl_loss=true", f"{_ACTOR}.kl_loss_type=bogus"], f"{_ACTOR}.kl_loss_type"),
    "min_lr_ratio": (
        [f"{_ACTOR}.optim.lr_scheduler_type=cosine", f"{_ACTOR}.optim.min_lr_ratio=-1"],
        f"{_ACTOR}.optim.min_lr_ratio",
    ),
    "lr_nan_at_once": ([f"{_ACTOR}.optim.lr=1e9"], f"{_ACTOR}.optim.lr"),
    "negative_loss_scale": (
        [f"{_ACTOR}.loss_agg_mode=seq-mean-token-sum-norm", f"{_ACTOR}.loss_scale_factor=-1"],
        f"{_ACTOR}.loss_scale_factor",
    ),
    "ppo_epochs_forever": ([f"{_ACTOR}.ppo_epochs=100000"], "config"),
    "threads_beyond_cores": (["lab.cpu_threads=1024"], "lab.cpu_threads"),
    "rollout_n_beyond_memory": (["actor_rollout_ref.rollout.n=1000000"], "config"),
}


def errors_of(capsys, *argv) -> tuple[int, list[str]]:
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, [line.strip() for line in err.splitlines() if line.startswith("  error")]


@pytest.mark.parametrize(("items", "key"), list(GATE_CASES.values()), ids=list(GATE_CASES))
def test_check_and_train_give_the_same_verdict_and_line(capsys, tmp_path, items, key):
    run_dir = tmp_path / "run"
    trained = errors_of(capsys, "train", *items, f"lab.run_dir={run_dir}")  # stops at its start-up gate
    checked = errors_of(capsys, "check", "--base", "short-run", *items)  # what train composes
    example = errors_of(capsys, "check", *items)  # check's own base
    assert trained[0] == checked[0] == example[0] == 1  # the doctor's exit, not 0, 2 or 70
    assert trained[1] == checked[1] and len(trained[1]) == 1, trained[1]
    assert all(line.startswith(f"error   {key}: ") and " -> fix: " in line for line in trained[1] + example[1])
    assert not run_dir.exists()  # refused before anything was created


@pytest.mark.parametrize(
    ("item", "why"),
    [
        (f"{_ACTOR}.loss_scale_factor=-1", "so a negative one flips the loss's sign and every update climbs it"),
        (f"{_ACTOR}.optim.lr=1e9", "send the policy's next-token probabilities to inf/NaN (Adam moves every weight"),
        (f"{_ACTOR}.optim.warmup_style=bogus", '`assert self.warmup_style in ["constant", "cosine"]` failed (verl/'),
        (f"{_ACTOR}.ppo_epochs=100000", f"lower {_ACTOR}.ppo_epochs (100% of the work"),
    ],
    ids=["loss_scale", "lr", "bare_assert", "epochs"],
)
def test_a_value_that_diverges_or_never_finishes_is_told_why(capsys, item, why):
    assert errors_of(capsys, "check", "--base", "short-run", item)[1][0].count(why) == 1


def test_every_loss_mode_of_the_catalogue_passes_the_trainers_start_up_checks(base):
    from agl_lab.config.modes import LOSS_MODES
    from agl_lab.training.startup_checks import startup_findings

    # the policy loss is called once on one token: none may refuse its defaults (each verl setting pair once)
    verl_settings = {
        tuple((k, v) for k, v in mode.settings.items() if k.startswith("actor_rollout_ref.")): name
        for name, mode in LOSS_MODES.items()
    }
    for settings, name in verl_settings.items():
        cfg = copy.deepcopy(base)
        for key, value in settings:
            OmegaConf.update(cfg, key, value, merge=False)
        findings, actor = startup_findings(cfg)
        assert findings == [] and actor.policy_loss.loss_mode == OmegaConf.select(cfg, LOSS_MODE), name


def test_a_seed_range_beyond_a_sweep_is_refused_at_once_with_how_long_it_would_take(capsys, tmp_path):
    with pytest.raises(SystemExit) as usage:  # argparse's: the seeds are refused before they are listed
        main(["sweep", "--executor", "serial", "--seeds", "0-100000", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert usage.value.code == 2 and "0-100000: 100,001 seeds: a sweep holds at most 1,000 cells" in err  # 45 s+
    with pytest.raises(ValueError, match=r"3 settings x 100001 seeds = 300,003 cells \(~.* a cell by a rough count"):
        run_sweep({"a": [], "b": ["lab.max_turns=3"], "c": ["lab.task_size=5"]}, range(100_001), sweep_dir=tmp_path)
    code = main(["sweep", "lab.max_turns=range(1,100000000)", "--out", str(tmp_path / "s")])  # never enumerated
    assert code == 2 and "lab.max_turns=range(1,100000000): more than 1,000 values" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
