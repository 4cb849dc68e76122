"""Agent Lightning's own example configs (tests/data/agl_examples/, the overrides of its example training scripts),
composed as those scripts compose them (Hydra compose of Agent Lightning's config, then a permissive merge) and by
agl_lab's strict compose, and checked with ``agl-lab check --base agl`` as their users would check them: as items, and
as a YAML file (``agl-lab check --config FILE.yaml``)."""

import re
from pathlib import Path

import pytest
import yaml
from agl_oracle import agl, agl_config
from omegaconf import OmegaConf
from test_cli import in_process

from agl_lab.config.bases import BASES
from agl_lab.config.compose import ConfigError, compose_from
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.tree import leaves, nest
from agl_lab.core.keys import (
    ESTIMATOR,
    LOSS_AGG_MODE,
    LOSS_MODE,
    MAX_PPO_UPDATE_TIMES,
    MINI_BATCH,
    ROLLOUT_LEVEL,
    ROLLOUT_N,
    TRAIN_BATCH,
)
from agl_lab.core.pipeline import mini_batch_rows

DATA = Path(__file__).parent / "data" / "agl_examples"
NAMES = sorted(path.stem for path in DATA.glob("*.yaml"))
SIX = ["calc_x", "gsm8k", "llm_in_sandbox", "science_world", "search_r1", "swe_smith"]
LISTED_ONLY_BY_AGL_LAB = "trajectory_max_total_length"  # as tests/test_oracle_config.py: 1.0.2 reads it with .get


def example(name):
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())


def without(overrides, keys):
    """The overrides as flat dotted keys, ``keys`` left out."""
    return {path: value for path, value in leaves(overrides) if path not in keys}


def theirs(overrides):
    """What Agent Lightning's example script builds: its composed config, struct off, the overrides merged in."""
    return OmegaConf.merge(agl_config(), OmegaConf.create(overrides))


def test_the_data_holds_the_six_examples_each_with_its_source_and_no_secret():
    assert NAMES == SIX
    for name in NAMES:
        data = example(name)
        source = data["source"]
        assert source["repo"] == "microsoft/agent-lightning" and source["function"] == "verl_default_config"
        assert re.fullmatch(r"examples/[\w-]+/train_\w+\.py", source["path"]) and re.fullmatch(
            "[0-9a-f]{40}", source["commit"]
        )
        assert "agl_key" not in data["overrides"]["agentlightning"]  # a secret: left out of the test data
        assert set(data["refused"]) <= {path for path, _ in leaves(data["overrides"])}


@pytest.mark.parametrize("name", NAMES)
def test_agl_lab_resolves_each_example_as_agent_lightnings_script_does(name):
    data = example(name)
    refused = data["refused"]
    if refused:  # the strict compose names every key it refuses, with the key verl declares instead
        with pytest.raises(ConfigError) as caught:
            compose_from("agl", data["overrides"])
        assert str(caught.value).splitlines()[1:] == [
            f"  - unknown key {key!r} (did you mean {refusal['instead']!r}?)" for key, refusal in refused.items()
        ]
    ours = compose_from("agl", without(data["overrides"], refused))
    mine_all = theirs(data["overrides"])
    for key in refused:  # their merge keeps the dead key; take it out to compare the rest
        parent, leaf = key.rsplit(".", 1)
        del OmegaConf.select(mine_all, parent)[leaf]
    # the three settings, the loss mode and the mini-batch resolve the same ...
    for key in (ROLLOUT_LEVEL, LOSS_MODE, MAX_PPO_UPDATE_TIMES, LOSS_AGG_MODE, ESTIMATOR):
        assert OmegaConf.select(ours, key) == OmegaConf.select(mine_all, key), key
    assert mini_batch_rows(ours) == mini_batch_rows(mine_all)
    # ... and so does every other value: their tree is agl_lab's without its lab: section
    plain = OmegaConf.to_container(ours, resolve=True)
    plain.pop("lab")
    assert plain["agentlightning"]["trace_aggregator"].pop(LISTED_ONLY_BY_AGL_LAB) is None
    assert plain == OmegaConf.to_container(mine_all, resolve=True)


@pytest.mark.parametrize("name", [name for name in NAMES if example(name)["refused"]])
def test_every_key_agl_lab_refuses_is_one_verl_and_agent_lightning_never_read(name):
    # (what verl declares instead may itself go unread: actor_rollout_ref.nccl_timeout has no reader in verl 0.8.0 or
    # 0.9.1; the message names it because it is where verl's config keeps that setting)
    data = example(name)
    base = agl_config()
    for key, refusal in data["refused"].items():
        value, instead = OmegaConf.select(OmegaConf.create(data["overrides"]), key), refusal["instead"]
        assert OmegaConf.select(base, key, default="absent") == "absent"  # neither config declares it there
        assert OmegaConf.select(base, instead) is not None  # verl's config declares it here, with its default
        merged = theirs(data["overrides"])
        assert OmegaConf.select(merged, key) == value  # their permissive merge keeps the dead key silently ...
        assert OmegaConf.select(merged, instead) == OmegaConf.select(base, instead)  # ... the declared one unchanged
        # and no code of verl or Agent Lightning reads it where the example put it
        section, leaf = key.rsplit(".", 2)[-2:]
        dead = re.compile(rf"\b{section}\s*(\.\s*{leaf}\b|\[\s*['\"]{leaf}['\"]|\.get\(\s*['\"]{leaf}['\"])")
        assert [path for path, text in _sources() if dead.search(text)] == []


def _sources():
    import verl

    roots = [Path(verl.__file__).parent, Path(agl().trainer.__file__).parents[1]]
    return [(path, path.read_text(errors="replace")) for root in roots for path in root.rglob("*.py")]


@pytest.mark.parametrize("name", NAMES)
def test_check_base_agl_speaks_of_their_trainer_and_trains_a_batch_of_their_size(name, capsys):
    data = example(name)
    overrides = without(data["overrides"], data["refused"])
    overrides.update(
        {
            refusal["instead"]: OmegaConf.select(OmegaConf.create(data["overrides"]), key)
            for key, refusal in data["refused"].items()
        }
    )  # fmt: skip  (the fix the message names)
    items = [item.lstrip("+") for item in format_dotlist(overrides)]  # as a user types them
    out = in_process(capsys, "check", "--base", "agl", *items)
    assert not out.startswith("exit"), out
    doctor = out.split("\nDoctor:", 1)[1].split("\n\n", 1)[0]
    assert "lab." not in doctor and "max_turns" not in doctor  # nothing about the lab's task or its knobs
    flat = dict(leaves(data["overrides"]))
    prompts, n = flat["data.train_batch_size"], flat["actor_rollout_ref.rollout.n"]
    assert f"Example batch: one step of data.train_batch_size={prompts} x rollout.n={n} = {prompts * n} rollouts" in out
    trained = int(re.search(r"^training/n_sample_trained +(\d+)$", out, re.M).group(1))
    assert trained > 0  # their config trains rows of a batch of their size (a sampled one says so)
    assert ("sampled: 1/" in out) == (prompts * n > 256)


def test_a_key_agl_lab_refuses_stops_check_in_one_line_naming_the_key_read(capsys):
    out = in_process(capsys, "check", "--base", "agl", "algorithm.adv_estimator=grpo", "trainer.nccl_timeout=1800")
    assert out.startswith("exit 2\n")
    assert "unknown key 'trainer.nccl_timeout' (did you mean 'actor_rollout_ref.nccl_timeout'?)" in out


@pytest.mark.parametrize("name", NAMES)
def test_check_config_takes_their_overrides_as_a_yaml_file_and_says_what_the_same_items_say(name, tmp_path, capsys):
    data = example(name)
    overrides = without(data["overrides"], data["refused"])
    for key, refusal in data["refused"].items():  # the fix the message names, as above
        overrides[refusal["instead"]] = OmegaConf.select(OmegaConf.create(data["overrides"]), key)
    file = tmp_path / f"{name}.yaml"
    file.write_text(yaml.safe_dump(nest(overrides), sort_keys=False))  # nested, as their scripts write the dict
    out = in_process(capsys, "check", "--config", str(file))  # base agl: a file is an Agent Lightning config
    assert not out.startswith("exit"), out
    assert out.startswith(f"Base: agl = {BASES['agl'].label}\nConfig file: {file} (after the base, before the ")
    items = [item.lstrip("+") for item in format_dotlist(overrides)]
    same = in_process(capsys, "check", "--base", "agl", *items)
    assert out.split("\n", 2)[2] == same.split("\n", 1)[1]  # the settings, the doctor, the batch, the metrics
    # items after the file win over it
    smaller = [f"{TRAIN_BATCH}=2", f"{ROLLOUT_N}=2", f"{MINI_BATCH}=1"]
    later = in_process(capsys, "check", "--config", file, *smaller)
    assert "Example batch: one step of data.train_batch_size=2 x rollout.n=2 = 4 rollouts" in later


@pytest.mark.parametrize("name", [name for name in NAMES if example(name)["refused"]])
def test_check_config_names_the_file_of_a_key_agl_lab_refuses(name, tmp_path, capsys):
    data = example(name)
    file = tmp_path / f"{name}.yaml"
    file.write_text(yaml.safe_dump(data["overrides"], sort_keys=False))
    out = in_process(capsys, "check", "--config", str(file))
    assert out.splitlines() == [
        "exit 2",
        *(
            f"agl-lab: config error: {file}: unknown key {key!r} (did you mean {refusal['instead']!r}?)"
            for key, refusal in data["refused"].items()
        ),
    ]
