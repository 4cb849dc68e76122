"""The multi-row rollouts' share of a step's mass against their share of rollouts, on a hand-built step.

Rollout A = rows of 2 and 1 tokens (split in two), B = one row of 1 token; one mini-batch of 3 rows (G = 3).
"""

import pytest
from omegaconf import OmegaConf

from agl_lab import compose_config
from agl_lab.config.modes import mode_settings
from agl_lab.lab.rollout_mass import multi_row_mass
from conftest import make_rows


def step_config(mode: str):
    items = {**mode_settings(mode), "actor_rollout_ref.actor.ppo_mini_batch_size": 3}
    return compose_config(
        overrides={"actor_rollout_ref": {"rollout": {"n": 1}}}, dotlist=[f"{k}={v}" for k, v in items.items()]
    )


def rows():
    return make_rows([("p0", "A", 1.0, [2, 1]), ("p0", "B", 0.0, [1])])


@pytest.mark.parametrize(
    ("mode", "mass_share"),
    [
        # seq-mean-token-mean: every row weighs 1/G whatever its tokens, so A's two rows carry 2/3 of the mass
        ("seq-mean-token-mean", 2 / 3),
        # token-mean: by tokens, A has 3 of the 4
        ("token-mean", 3 / 4),
        # per_rollout_mean: A's tokens weigh 1/(3·3) each, B's 1/(1·3): each rollout 1/3, half the mass
        ("per_rollout_mean:rows", 1 / 2),
        ("per_rollout_mean:rollouts", 1 / 2),
    ],
)
def test_mass_share_and_overweight_by_hand(mode, mass_share):
    metrics = multi_row_mass(rows(), step_config(mode))
    assert metrics["lab/multi_row_rollout_share"] == 1 / 2  # A of A and B
    assert metrics["lab/multi_row_mass_share"] == pytest.approx(mass_share, abs=1e-8)  # verl's 1e-8 guard in 1/(n·G)
    assert metrics["lab/multi_row_overweight"] == pytest.approx(mass_share - 1 / 2, abs=1e-8)


def test_a_loss_without_weights_logs_the_rollout_share_only_and_an_empty_step_nothing():
    cfg = step_config("token-mean")
    OmegaConf.update(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode", "not_in_verls_registry")
    assert multi_row_mass(rows(), cfg) == {"lab/multi_row_rollout_share": 0.5}
    assert multi_row_mass(rows()[[]], step_config("token-mean")) == {}
