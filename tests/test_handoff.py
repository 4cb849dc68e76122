import ast

import pytest
import yaml
from omegaconf import OmegaConf

from agl_lab import compose_config
from agl_lab.config.compose import base_config
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.handoff import export_experiment, overrides

EXPERIMENT = {
    "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
    "data": {"train_batch_size": 16, "max_prompt_length": 4096},
    "actor_rollout_ref": {"rollout": {"n": 4}, "actor": {"optim": {"lr": 1e-6}, "ppo_mini_batch_size": 4}},
    "trainer": {"logger": ["console", "wandb"], "experiment_name": "cap 2 run's"},
    "agentlightning": {"agl_key": "sk-secret", "max_ppo_update_times": 2, "local": {"env_map": {"X": "1"}}},
    "lab": {"seed": 7, "per_rollout_divisor": "rollouts"},
}


def shared(cfg):
    """The experiment as Agent Lightning sees it: no lab section, no secrets, resolved."""
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("lab")
    container["agentlightning"].pop("agl_key")
    return container


@pytest.fixture
def experiment():
    # a key verl reads that its YAML leaves out: added with Hydra's +, exported with it
    return compose_config(overrides=EXPERIMENT, dotlist=["+algorithm.gdpo_reward_keys=[format,answer]"])


def test_overrides_hold_only_changed_keys_without_lab_or_secrets(experiment):
    nested = overrides(experiment)
    assert nested == {
        "algorithm": {"adv_estimator": "grpo", "gdpo_reward_keys": ["format", "answer"]},  # use_kl_in_reward: default
        "data": {"train_batch_size": 16, "max_prompt_length": 4096},
        "actor_rollout_ref": {"rollout": {"n": 4}, "actor": {"ppo_mini_batch_size": 4}},  # lr 1e-6 is the default
        "trainer": {"experiment_name": "cap 2 run's"},  # logger [console, wandb] is the default
        "agentlightning": {"max_ppo_update_times": 2, "local": {"env_map": {"X": "1"}}},
    }


def test_overrides_composed_over_the_defaults_reproduce_the_experiment(experiment, tmp_path):
    export_experiment(experiment, tmp_path, name="cap2")
    loaded = yaml.safe_load((tmp_path / "overrides.yaml").read_text())
    # The way Agent Lightning's scripts compose: defaults, struct off, merge the overrides dict.
    again = base_config()
    OmegaConf.set_struct(again, False)
    again = OmegaConf.merge(again, OmegaConf.create(loaded))
    again.lab = experiment.lab
    again.agentlightning.agl_key = experiment.agentlightning.agl_key
    assert shared(again) == shared(experiment)


def test_dotlist_round_trips_through_hydra_and_omegaconf(experiment, tmp_path):
    export = export_experiment(experiment, tmp_path)
    assert "+algorithm.gdpo_reward_keys=[format,answer]" in export.dotlist
    assert "trainer.experiment_name='cap 2 run\\'s'" in export.dotlist
    assert (tmp_path / "dotlist.txt").read_text().splitlines() == export.dotlist
    via_hydra = compose_config(dotlist=export.dotlist)
    via_hydra.lab, via_hydra.agentlightning.agl_key = experiment.lab, experiment.agentlightning.agl_key
    assert shared(via_hydra) == shared(experiment)
    plain = [item.lstrip("+") for item in export.dotlist if "'" not in item]
    merged = OmegaConf.merge(base_config(), OmegaConf.from_dotlist(plain))
    assert merged.actor_rollout_ref.rollout.n == 4 and merged.agentlightning.max_ppo_update_times == 2


def test_values_in_hydra_grammar():
    assert format_dotlist(
        {"a": {"b": None, "c": True, "d": 1e-06, "e": [1, "x y"], "f": "null", "g": "http://h:1/p", "h": {"k": 1}}}
    ) == ["+a.b=null", "+a.c=true", "+a.d=1e-06", "+a.e=[1,'x y']", "+a.f='null'", "+a.g=http://h:1/p", "+a.h.k=1"]


def test_exports_never_contain_secrets(experiment, tmp_path):
    export_experiment(experiment, tmp_path, name="x")
    for file in tmp_path.iterdir():
        assert "sk-secret" not in file.read_text(), file.name
        assert "agl_key" not in file.read_text() or file.name.endswith(".py")


def test_launch_script_is_valid_python_importing_only_the_stdlib_at_module_level(experiment, tmp_path, capsys):
    export = export_experiment(experiment, tmp_path, name="cap2")
    tree = ast.parse(export.script)
    top_imports = {
        alias.name for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names
    } | {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert top_imports == {"argparse", "os"}
    namespace = {}
    exec(compile(export.script, "launch_cap2.py", "exec"), namespace)  # defines main, imports nothing heavy
    assert namespace["OVERRIDES"] == overrides(experiment)
    body = ast.get_source_segment(export.script, next(n for n in tree.body if isinstance(n, ast.FunctionDef)))
    assert "from agentlightning.verl.entrypoint import run_ppo" in body
    assert "run_ppo(config, train_dataset=train_dataset, val_dataset=val_dataset)" in body
    # the oracle install has Agent Lightning's config: the script composes it, then refuses missing data files
    with pytest.raises(SystemExit):
        namespace["main"](["--agl-key", "k", f"data.train_files={tmp_path / 'none.parquet'}"])
    assert "data.train_files: no such file" in capsys.readouterr().err


def test_bad_name(experiment, tmp_path):
    with pytest.raises(ValueError, match="must be letters, digits"):
        export_experiment(experiment, tmp_path, name="../evil")


def test_launch_script_with_record_hands_the_config_to_the_recorder(experiment, tmp_path, capsys):
    export = export_experiment(experiment, tmp_path, name="rec", record="runs/rec")
    namespace = {}
    exec(compile(export.script, "launch_rec.py", "exec"), namespace)
    assert namespace["RECORD"] == "runs/rec"
    assert "from agl_lab.training.agl_recorder import record_run" in export.script
    with pytest.raises(SystemExit):  # the recorder is set up before the data files are read (and refused here)
        namespace["main"](["--agl-key", "k", f"--record={tmp_path / 'rec'}", f"data.train_files={tmp_path / 'x'}"])
    assert f"recording each training step's rows into {tmp_path / 'rec'}" in capsys.readouterr().out
    assert "RECORD = None" in export_experiment(experiment, tmp_path, name="plain").script
    with pytest.raises(ValueError, match="record must name a folder"):
        export_experiment(experiment, tmp_path, name="x", record=" ")
