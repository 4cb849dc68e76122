"""A config file in (agl_lab.config.config_file): an Agent Lightning script's overrides or a run's resolved config,
read after the base and before the overrides dict and the dotlist, with the checks every other way in gets."""

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from agl_lab import ConfigError, compose_config
from agl_lab.config.compose import compose_from, short_run_config
from agl_lab.config.config_file import read_config_file
from agl_lab.config.handoff import overrides as changed_keys
from agl_lab.config.tree import leaves
from agl_lab.training.runs import RunFiles

AGL_EXAMPLES = Path(__file__).parent / "data" / "agl_examples"


def write(path: Path, values) -> Path:
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def resolved(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def run_config_yaml(run_dir: Path, cfg) -> Path:
    """``config.yaml`` as a run writes it (RunFiles: resolved, secrets as ***)."""
    run_dir.mkdir()
    RunFiles(run_dir, cfg).close()
    return run_dir / "config.yaml"


def test_an_agent_lightning_scripts_overrides_as_a_file_compose_as_the_dict_does(tmp_path):
    overrides = yaml.safe_load((AGL_EXAMPLES / "gsm8k.yaml").read_text())["overrides"]
    file = write(tmp_path / "gsm8k.yaml", overrides)
    assert resolved(compose_from("agl", config_file=file)) == resolved(compose_from("agl", overrides))
    assert resolved(compose_config(config_file=str(file))) == resolved(compose_from("agl", overrides))


def test_base_then_file_then_overrides_then_dotlist(tmp_path):
    # base example sets train_batch_size 2 and rollout.n 3; the file changes both and two more keys
    file = write(
        tmp_path / "mine.yaml",
        {"data": {"train_batch_size": 16, "max_prompt_length": 700}, "actor_rollout_ref": {"rollout": {"n": 5}}},
    )
    cfg = compose_from("example", {"data.max_prompt_length": 800}, ["actor_rollout_ref.rollout.n=7"], file)
    assert cfg.data.train_batch_size == 16  # the file over the base
    assert cfg.data.max_prompt_length == 800  # the overrides dict over the file
    assert cfg.actor_rollout_ref.rollout.n == 7  # the dotlist over the file
    assert cfg.algorithm.adv_estimator == "grpo"  # the base's, which the file leaves alone
    assert short_run_config(config_file=file).data.train_batch_size == 16


def test_a_runs_config_yaml_composes_back_to_the_run_with_its_links_kept(tmp_path):
    secret = "sk-not-a-real-key"
    items = ["data.max_response_length=999", "lab.seed=3", "actor_rollout_ref.actor.optim.lr=3e-5"]
    cfg = short_run_config(dotlist=[*items, f"agentlightning.agl_key={secret}"])
    file = run_config_yaml(tmp_path / "run", cfg)
    text = file.read_text()
    assert "agl_key: '***'" in text and secret not in text and "lab:" in text  # the whole tree, the secret masked
    back = compose_config(config_file=file)
    expected = resolved(cfg)
    expected["agentlightning"]["agl_key"] = ""  # a mask is not the key: left at its default (given at launch)
    assert resolved(back) == expected
    # keys verl sets by interpolation stay interpolations: the hand-off lists only what the run changed ...
    assert changed_keys(back) == changed_keys(cfg)
    # ... and follow a later edit of the key they point at, as in a config composed from the dotlist alone
    later = compose_config(config_file=file, dotlist=["data.max_response_length=555"])
    assert resolved(later) == resolved(short_run_config(dotlist=[*items, "data.max_response_length=555"]))


def test_a_hydra_style_unresolved_dump_composes_back_too(tmp_path):
    cfg = short_run_config(dotlist=["lab.seed=4", "algorithm.gamma=0.9"])
    file = tmp_path / "config.yaml"
    file.write_text(OmegaConf.to_yaml(cfg))  # Hydra's .hydra/config.yaml: interpolations as written
    back = compose_config(config_file=file)
    assert resolved(back) == resolved(cfg) and changed_keys(back) == changed_keys(cfg)


def test_a_changed_value_under_an_interpolated_section_keeps_the_whole_section(tmp_path):
    # rollout.mtp is ${oc.select:actor_rollout_ref.model.mtp,null} in verl's config: a dump holds it resolved
    cfg = compose_config()
    dump = resolved(cfg)
    dump["actor_rollout_ref"]["rollout"]["mtp"]["enable"] = True
    back = compose_config(config_file=write(tmp_path / "c.yaml", dump))
    mtp = resolved(back)["actor_rollout_ref"]["rollout"]["mtp"]
    assert mtp == {**resolved(cfg)["actor_rollout_ref"]["rollout"]["mtp"], "enable": True}  # not {enable: true} alone
    assert back.actor_rollout_ref.model.mtp.enable is False


def test_a_secret_the_file_gives_is_taken(tmp_path):
    file = write(tmp_path / "c.yaml", {"agentlightning": {"agl_key": "sk-mine"}})
    assert compose_config(config_file=file).agentlightning.agl_key == "sk-mine"


def test_unknown_keys_and_wrong_types_in_the_file_name_the_file_and_are_listed_with_the_dotlists(tmp_path):
    file = write(
        tmp_path / "mine.yaml",
        {"trainer": {"nccl_timeout": 1800}, "data": {"train_batch_size": "big"}, "algorithm": {"gamma": 0.9}},
    )
    with pytest.raises(ConfigError) as caught:
        compose_config(config_file=file, dotlist=["agentlightning.max_ppo_update_time=2"])
    assert str(caught.value).splitlines() == [
        "config has problems:",
        f"  - {file}: unknown key 'trainer.nccl_timeout' (did you mean 'actor_rollout_ref.nccl_timeout'?)",
        f"  - {file}: data.train_batch_size must be an integer, got 'big' (str)",
        "  - unknown key 'agentlightning.max_ppo_update_time' (did you mean 'agentlightning.max_ppo_update_times'?)",
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a: [1\nb: 2\n", "is not YAML: expected ',' or ']', but got ':' (line 2, column 2)"),
        ("a: 1\na: 2\n", "is not YAML: found duplicate key a (line 2, column 1)"),
        ("- 1\n- 2\n", "holds a list, not a mapping of config keys"),
        ("just words\n", "holds a str, not a mapping of config keys"),
        ("", "is empty: a config file holds a mapping of config keys"),
        (b"\xff\xfe\x00a", "is not a UTF-8 text file (byte 0): give a YAML file"),
    ],
    ids=["syntax", "duplicate", "list", "scalar", "empty", "binary"],
)
def test_a_file_that_is_not_a_yaml_mapping_is_one_config_error(tmp_path, text, error):
    file = tmp_path / "c.yaml"
    file.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as caught:
        compose_config(config_file=file, dotlist=["data.train_batch_size=big"])  # the file's problem alone is said
    heading, line = str(caught.value).splitlines()
    assert heading == "config has problems:" and line.startswith(f"  - {file} {error}")


def test_a_missing_file_or_a_folder_is_an_os_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config file .*nope\.yaml does not exist: give the path of a YAML"):
        compose_config(config_file=tmp_path / "nope.yaml")
    with pytest.raises(IsADirectoryError, match="is a folder: give the YAML file in it"):
        compose_config(config_file=tmp_path)
    with pytest.raises(ConfigError, match="config_file is an empty path: give the path of a YAML file"):
        compose_config(config_file="")
    with pytest.raises(TypeError, match="config_file must be the path of a YAML file"):
        compose_config(config_file=3)


def test_the_file_is_read_as_omegaconf_reads_yaml(tmp_path):
    (tmp_path / "c.yaml").write_text("actor_rollout_ref:\n  actor:\n    optim: {lr: 1e-6}\n")
    assert read_config_file(tmp_path / "c.yaml") == {"actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}}}
    assert compose_config(config_file=tmp_path / "c.yaml").actor_rollout_ref.actor.optim.lr == 1e-6


def test_an_exported_overrides_yaml_reads_back_to_the_same_config(tmp_path):
    from agl_lab.config.handoff import export_experiment

    cfg = compose_config({"algorithm.adv_estimator": "grpo"}, ["agentlightning.max_ppo_update_times=2"])
    export_experiment(cfg, tmp_path, name="x")
    back = compose_config(config_file=tmp_path / "overrides.yaml")
    assert resolved(back) == resolved(cfg)
    assert dict(leaves(changed_keys(back))) == dict(leaves(changed_keys(cfg)))
