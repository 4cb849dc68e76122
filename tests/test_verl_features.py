"""The verls agl_lab is tested on, and what only the newer has: each claim checked against the installed verl, each
refusal checked on both (an older verl simulated by its version string where the installed one is newer)."""

import re
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.utils.config import omega_conf_to_dataclass

from agl_lab import compose_config, diagnose
from agl_lab.config.modes import LOSS_MODES, mode_settings, mode_table, trainable_modes
from agl_lab.config.verl_features import (
    AGENT_LIGHTNING_VERL,
    DEFAULT_VERL,
    VERL_FEATURES,
    VERL_VERSION,
    feature_for,
    forced_aggregation,
    verl_notes,
    verl_problems,
)
from agl_lab.lab.loss_scale import weighing_mode

ROOT = Path(__file__).resolve().parents[1]
MICRO = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"]  # verl's ActorConfig wants one
MAKEFILE = (ROOT / "Makefile").read_text()


def test_the_installed_verl_is_one_the_makefile_builds_and_the_defaults_agree_with_it():
    assert VERL_VERSION == version("verl")
    tested = re.search(r"^VERL_VERSIONS := (.+)$", MAKEFILE, re.M).group(1).split()
    assert VERL_VERSION in tested and AGENT_LIGHTNING_VERL in tested and DEFAULT_VERL in tested
    assert re.search(r"^VERL \?= (.+)$", MAKEFILE, re.M).group(1) == DEFAULT_VERL


def test_the_table_tells_the_truth_about_the_installed_verl():
    # token-sum: verl's agg_loss aggregates with it, or refuses it as invalid
    mask = torch.ones(2, 3)
    if VERL_FEATURES["token-sum"].available():
        assert core_algos.agg_loss(torch.ones(2, 3), mask, "token-sum").item() == 6.0
    else:
        with pytest.raises(ValueError, match="Invalid loss_agg_mode: token-sum"):
            core_algos.agg_loss(torch.ones(2, 3), mask, "token-sum")
    assert ("dro" in core_algos.POLICY_LOSS_REGISTRY) == VERL_FEATURES["dro"].available()
    assert (find_spec("verl.plugin") is not None) == VERL_FEATURES["verl-actor"].available()
    # gspo: at ratio 1 its gradient is the aggregation's; verl 0.8.0 takes seq-mean-token-mean whatever it is told
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    config = omega_conf_to_dataclass(compose_config(dotlist=MICRO).actor_rollout_ref.actor)
    log_prob = torch.zeros(2, 3, requires_grad=True)
    loss, _ = core_algos.get_policy_loss_fn("gspo")(
        torch.zeros(2, 3), log_prob, torch.ones(2, 3), mask, "token-mean", config
    )
    (grad,) = torch.autograd.grad(loss, log_prob)
    row_weights = (-grad * mask).sum(-1).tolist()
    if forced_aggregation("gspo") == "seq-mean-token-mean":
        assert row_weights == pytest.approx([0.5, 0.5])  # each row weighs 1/G, G = 2 rows
    else:  # token-mean as told: each of the 4 tokens weighs 1/4
        assert row_weights == pytest.approx([0.25, 0.75])


@pytest.mark.parametrize("name", list(VERL_FEATURES))
def test_each_feature_is_refused_on_verl_0_8_0_naming_the_version_and_accepted_on_0_9_1(name):
    feature = VERL_FEATURES[name]
    assert feature.available("0.9.1") and feature.problem("0.9.1") is None
    assert not feature.available("0.8.0")
    assert feature.problem("0.8.0") == (
        f"{feature.key}={feature.value} needs {feature.what} (verl 0.9.0 or newer); this environment has verl 0.8.0 "
        "(Agent Lightning 1.0.x installs 0.8.0)"
    )
    assert feature_for(feature.key, feature.value) is feature and feature_for(feature.key, "other") is None


@pytest.mark.parametrize(
    ("item", "key"),
    [
        ("actor_rollout_ref.actor.loss_agg_mode=token-sum", "actor_rollout_ref.actor.loss_agg_mode"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=dro", "actor_rollout_ref.actor.policy_loss.loss_mode"),
        ("lab.actor=verl", "lab.actor"),
    ],
)
def test_the_doctor_refuses_what_the_verl_lacks_in_one_error_naming_the_version(item, key):
    cfg = compose_config(dotlist=["algorithm.adv_estimator=grpo", item])
    feature = feature_for(key, OmegaConf.select(cfg, key))
    assert verl_problems(cfg, verl="0.9.1") == []
    assert verl_problems(cfg, verl="0.8.0") == [(key, feature.problem("0.8.0"), feature.fix())]
    errors = [f for f in diagnose(cfg) if f.level == "error"]
    if feature.available():
        assert errors == []
    else:  # the installed verl is older: one error, with the version, never "unknown value"
        assert [(f.key, f.message) for f in errors] == [(key, feature.problem())]
        assert "verl 0.9.0 or newer" in errors[0].message and f"verl {VERL_VERSION}" in errors[0].message


def test_the_catalogue_says_which_verl_token_sum_needs_and_offers_it_only_there():
    entry = LOSS_MODES["token-sum"]
    assert entry.verl_feature is VERL_FEATURES["token-sum"]
    assert all(m.verl_feature is None for name, m in LOSS_MODES.items() if name != "token-sum")
    assert "`loss_agg_mode=token-sum` (verl ≥ 0.9.0)" in mode_table()
    assert entry.trainable == VERL_FEATURES["token-sum"].available() == ("token-sum" in trainable_modes())
    if entry.trainable:
        assert mode_settings("token-sum")["actor_rollout_ref.actor.loss_agg_mode"] == "token-sum"
    else:
        with pytest.raises(ValueError) as caught:
            mode_settings("token-sum")
        assert str(caught.value) == f"loss mode 'token-sum': {VERL_FEATURES['token-sum'].problem()}"


def test_the_docs_list_every_setting_only_verl_0_9_has():
    section = (ROOT / "docs" / "getting-started.md").read_text().split("## Which verl", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([^`]+)` \| ", section, re.M)
    assert listed == [f"{f.key}={f.value}" for f in VERL_FEATURES.values()]
    assert "make test VERL=0.8.0" in section and "make test-core VERL=0.8.0" in section


def test_gspo_on_verl_0_8_0_weighs_as_seq_mean_token_mean_and_the_doctor_notes_it():
    assert forced_aggregation("gspo", verl="0.8.0") == "seq-mean-token-mean"
    assert forced_aggregation("gspo", verl="0.9.1") is None and forced_aggregation("vanilla", verl="0.8.0") is None
    cfg = compose_config(dotlist=["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])  # token-mean by default
    assert verl_notes(cfg, verl="0.9.1") == []
    assert verl_notes(cfg, verl="0.8.0") == [
        (
            "actor_rollout_ref.actor.loss_agg_mode",
            "verl 0.8.0's gspo aggregates with seq-mean-token-mean whatever loss_agg_mode says (token-mean here); "
            "verl 0.9.0 and newer honour loss_agg_mode",
            "set actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean to say what runs, or use verl 0.9.1 "
            "(make ... VERL=0.9.1)",
        )
    ]
    said = compose_config(dotlist=["actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
                                   "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"])  # fmt: skip
    assert verl_notes(said, verl="0.8.0") == []
    # the installed verl's: the catalogue weighs it as it runs, the doctor notes it where it differs
    assert weighing_mode(cfg) == (forced_aggregation("gspo") or "token-mean")
    notes = [f.message for f in diagnose(cfg) if f.key == "actor_rollout_ref.actor.loss_agg_mode"]
    assert notes == [message for _, message, _ in verl_notes(cfg)]
