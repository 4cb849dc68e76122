"""Which policy a config names: verl's actor_rollout_ref.model.path set to a model a lab run cannot load (a Hugging Face
Hub id, as Agent Lightning's examples write it) is refused with the fix, never trained as the tiny policy in silence;
verl's untouched default keeps the tiny policy; `agl-lab check` says which policy a lab run trains without refusing a
config meant for a GPU cluster."""

import pytest

import agl_lab
from agl_lab.cli import main
from agl_lab.config.model_source import TINY, UNLOADABLE, model_source, verl_default_model_path
from conftest import TINY_RUN

HUB = "actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct"
REFUSAL = (
    "actor_rollout_ref.model.path='Qwen/Qwen2.5-1.5B-Instruct': no local folder, and a lab run downloads nothing (a "
    "Hugging Face Hub id is for Agent Lightning's trainer on a GPU cluster): pass lab.model=smollm2-135m-instruct, or "
    "lab.model_path=<local folder or .gguf>, or set actor_rollout_ref.model.path to a local folder; or unset it "
    "(verl's default, ~/models/deepseek-llm-7b-chat) for the tiny policy"
)


def test_verls_default_model_path_is_read_from_its_packaged_config_and_keeps_the_tiny_policy():
    cfg = agl_lab.short_run_config()
    assert verl_default_model_path() == "~/models/deepseek-llm-7b-chat" == cfg.actor_rollout_ref.model.path
    assert model_source(cfg).kind == TINY
    assert model_source(agl_lab.short_run_config(dotlist=[HUB])).kind == UNLOADABLE


def test_a_hub_id_in_verls_model_path_is_refused_by_train_with_the_fix(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["train", *TINY_RUN, HUB, f"lab.run_dir={run_dir}"])
    assert code == 2 and not run_dir.exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"agl-lab: error: {REFUSAL}"
    with pytest.raises(ValueError) as caught:  # the Python entrance, which short runs and sweeps go through
        agl_lab.train(agl_lab.short_run_config(dotlist=[*TINY_RUN, HUB, f"lab.run_dir={run_dir}"]), progress=False)
    assert str(caught.value) == REFUSAL and not run_dir.exists()


def test_check_says_which_policy_a_lab_run_trains_and_does_not_refuse_a_clusters_hub_id(capsys):
    assert main(["check", *TINY_RUN]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "Policy a lab run trains: the tiny default (lab.model=tiny: 1 layers, hidden 32)" in lines
    assert main(["check", *TINY_RUN, HUB]) == 0  # valid for Agent Lightning's trainer: check exits as before
    lines = capsys.readouterr().out.splitlines()
    assert f"Policy a lab run trains: none: a lab run refuses {REFUSAL}" in lines
