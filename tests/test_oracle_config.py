"""agl_lab's composed config against the released Agent Lightning 1.0.2's own (its packaged ``config.yaml``).

Agent Lightning's launch scripts compose ``agentlightning.verl``'s config with Hydra (verl's ``ppo_trainer`` under
it), turn struct mode off and merge the overrides. agl_lab's base must resolve to the same tree (plus its own
``lab:`` section and the one key it lists that 1.0.2 only reads with ``.get``), and an exported experiment merged
into Agent Lightning's config must give agl_lab's resolved values.
"""

from __future__ import annotations

from agl_oracle import agl_config
from omegaconf import OmegaConf

from agl_lab import compose_config
from agl_lab.config.compose import base_config
from agl_lab.config.handoff import overrides

# In agl_lab's YAML, not in 1.0.2's: its trainer reads it with trace_aggregator.get(...), default None.
LISTED_ONLY_BY_AGL_LAB = "trajectory_max_total_length"


def plain(cfg):
    tree = OmegaConf.to_container(cfg, resolve=True)
    tree.pop("lab", None)
    tree["agentlightning"]["trace_aggregator"].pop(LISTED_ONLY_BY_AGL_LAB, None)
    return tree


def test_agl_labs_defaults_are_agent_lightnings_config():
    ours = base_config()
    assert ours.agentlightning.trace_aggregator[LISTED_ONLY_BY_AGL_LAB] is None  # .get's default in 1.0.2
    assert plain(ours) == plain(agl_config())


def test_an_exported_experiment_resolves_the_same_in_agent_lightnings_config():
    cfg = compose_config(
        dotlist=[
            "actor_rollout_ref.actor.policy_loss.loss_mode=cispo_per_rollout_mean",
            "agentlightning.max_ppo_update_times=2",
            "agentlightning.trace_aggregator.trajectory_max_total_length=4096",
            "algorithm.adv_estimator=grpo",
            "lab.seed=7",
        ]
    )
    theirs = OmegaConf.merge(agl_config(), overrides(cfg))
    assert theirs.agentlightning.trace_aggregator.get(LISTED_ONLY_BY_AGL_LAB) == 4096
    assert OmegaConf.to_container(theirs, resolve=True) | {"lab": None} == OmegaConf.to_container(cfg, resolve=True) | {
        "lab": None
    }
