"""Per-turn advantage estimators, registered in verl's advantage-estimator registry so verl's own
``compute_advantage`` runs them (``algorithm.adv_estimator=mt_grpo`` and so on).

Each row is one trajectory in verl's multi-turn layout (:mod:`agl_lab.core.turns`: turn ``k`` of ``T`` is a run of
trainable tokens; its reward ``ρ_k`` is what ``token_level_rewards`` holds over it): the intermediate reward
``r_k = ρ_k`` after every turn another follows (``k < T``), the outcome ``R = ρ_T`` on the last. Rows of one
``index`` (verl's ``uid``, the prompt) form a group. For Agent Lightning's rows, where one rollout can be several
rows, :mod:`agl_lab.core.turn_advantage` first stitches each rollout into one such row. Every turn's tokens get the
turn's advantage; ``norm`` below is ``algorithm.norm_adv_by_std_in_grpo`` (divide by the cell's std + ε, as GRPO).

=================  ==========================================================================================
``mt_grpo``        MT-GRPO's per-turn-index normalisation aggregated over the trajectory, as verl RFC #7244
                   describes it (Zeng, Wei et al. 2025, arXiv:2505.11821): ``A_t = Σ_{k=t}^{T−1} Â_k + Â_O``,
                   ``Â_k`` = r_k normalised among the group's trajectories with a reward at turn index k,
                   ``Â_O`` = R normalised over the group. With two turns it is the paper's ``A_1 = Â^T + Â^O``,
                   ``A_2 = Â^O`` (λ = 1). Its baseline ``Σ_{k=t}^{T−1} mean_k`` has as many terms as the trajectory
                   has turns left: the RFC's action-dependent baseline, a hidden bonus of ``−E[r]`` per further turn.
``mt_grpo_fix``    The RFC's fix as its title and summary state it ("a turn-level baseline that stays unbiased under
                   variable turn counts"; the body that details it was not available here): the return to go
                   ``G_t = Σ_{k=t}^{T−1} r_k + R`` normalised among the group's trajectories that reached turn index
                   t. Same rewards, same per-turn credit; the baseline depends on the turn index alone.
``turn_grpo``      AgileRL's ``advantage_granularity="turn"`` (PR #522, ``GRPOAdvantageMixin``): each turn's own
                   reward ``ρ_t`` normalised among the group's trajectories that played turn t (std with n − 1,
                   ε = 1e-8, ``mean_only`` when ``norm`` is off); a turn only one trajectory of its group played
                   takes that trajectory's GRPO advantage on its summed rewards (AgileRL's default
                   ``turn_advantage_trajectory_fallback=True``). No credit flows from later turns.
=================  ==========================================================================================

A cell (group × turn index) with one member has no baseline: ``mt_grpo`` and ``mt_grpo_fix`` give it 0, as a group
of one trajectory gets 0 (verl's GRPO gives a lone row its raw reward instead). ``returns`` equal the advantages, as
verl's GRPO family returns them. Trinity-RFT's GiGPO (#560) needs each step's environment-state hash, which verl's
estimator signature does not carry, so it is not here. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from agl_lab.core.groups import group_rows
from agl_lab.core.turns import broadcast_turns, turn_values

__all__ = [
    "TURN_ESTIMATORS",
    "TurnEstimator",
    "compute_mt_grpo_advantage",
    "compute_mt_grpo_fix_advantage",
    "compute_turn_grpo_advantage",
    "is_turn_estimator",
    "register_turn_estimators",
    "turn_advantages",
]

GRPO_EPSILON = 1e-6  # verl's GRPO: (score − mean) / (std + 1e-6)
AGILERL_EPSILON = 1e-8  # AgileRL's GRPO: (reward − mean) / (std + 1e-8)
_RFC = "https://github.com/verl-project/verl/issues/7244"
_AGILERL = "https://github.com/AgileRL/AgileRL/pull/522"


@dataclass(frozen=True)
class TurnEstimator:
    """A per-turn estimator of the catalogue: its label, its source and the same option's name elsewhere."""

    name: str
    label: str
    source: str
    known_as: str


def turn_advantages(
    rewards: np.ndarray, counts: np.ndarray, groups: np.ndarray, *, method: str, norm: bool
) -> np.ndarray:
    """(trajectories, K) float64 advantages from per-turn rewards (trajectories, K), turn counts and group codes.

    ``method``: ``mt_grpo``, ``mt_grpo_fix`` or ``turn_grpo`` (module docstring). Entries past a trajectory's last
    turn are 0. This is the estimators' math on plain arrays; the registered functions read rows into it.
    """
    n, width = rewards.shape
    played = np.arange(width)[None, :] < counts[:, None]  # (n, K)
    rewards = np.where(played, rewards, 0.0)
    if method == "mt_grpo":
        intermediate = np.arange(width)[None, :] < (counts - 1)[:, None]  # (n, K): a turn another one follows
        per_index, _ = _cell_normalize(rewards, intermediate, groups, norm=norm, eps=GRPO_EPSILON)  # (n, K)
        outcome = rewards[np.arange(n), np.maximum(counts - 1, 0)][:, None]  # (n, 1)
        outcome_adv, _ = _cell_normalize(outcome, counts[:, None] > 0, groups, norm=norm, eps=GRPO_EPSILON)  # (n, 1)
        to_go = np.flip(np.cumsum(np.flip(per_index, axis=1), axis=1), axis=1)  # (n, K): Σ_{k>=t} Â_k
        return np.where(played, to_go + outcome_adv, 0.0)
    if method == "mt_grpo_fix":
        to_go = np.flip(np.cumsum(np.flip(rewards, axis=1), axis=1), axis=1)  # (n, K): G_t, the return to go
        return _cell_normalize(to_go, played, groups, norm=norm, eps=GRPO_EPSILON)[0]
    if method == "turn_grpo":
        per_turn, members = _cell_normalize(rewards, played, groups, norm=norm, eps=AGILERL_EPSILON)  # (n, K)
        totals = rewards.sum(axis=1, keepdims=True)  # (n, 1)
        fallback, _ = _cell_normalize(totals, counts[:, None] > 0, groups, norm=norm, eps=AGILERL_EPSILON)
        return np.where(played & (members < 2), fallback, per_turn)
    raise ValueError(f"unknown per-turn method {method!r}: choose one of {list(TURN_ESTIMATORS)}")


def compute_mt_grpo_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """verl RFC #7244's MT-GRPO per-turn-index normalisation (module docstring); verl's estimator signature."""
    return _estimate("mt_grpo", token_level_rewards, response_mask, index, config)


def compute_mt_grpo_fix_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """verl RFC #7244's fix: the return to go normalised per turn index (module docstring); verl's signature."""
    return _estimate("mt_grpo_fix", token_level_rewards, response_mask, index, config)


def compute_turn_grpo_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """AgileRL's ``advantage_granularity="turn"`` (module docstring); verl's estimator signature."""
    return _estimate("turn_grpo", token_level_rewards, response_mask, index, config)


TURN_ESTIMATORS: dict[str, TurnEstimator] = {
    e.name: e
    for e in (
        TurnEstimator("mt_grpo", "MT-GRPO per-turn-index normalisation (verl RFC #7244's biased construction)", _RFC,
                      "MT-GRPO (arXiv:2505.11821), generalised to T turns as the RFC ports it"),
        TurnEstimator("mt_grpo_fix", "return to go normalised per turn index (verl RFC #7244's fix)", _RFC,
                      "the RFC's turn-level baseline that stays unbiased under variable turn counts"),
        TurnEstimator("turn_grpo", "each turn's reward normalised per turn index (AgileRL turn granularity)", _AGILERL,
                      'AgileRL GRPO(advantage_granularity="turn")'),
    )
}  # fmt: skip
_FUNCTIONS = {
    "mt_grpo": compute_mt_grpo_advantage,
    "mt_grpo_fix": compute_mt_grpo_fix_advantage,
    "turn_grpo": compute_turn_grpo_advantage,
}


def is_turn_estimator(name: Any) -> bool:
    """Whether ``algorithm.adv_estimator`` names a per-turn estimator (which needs per-turn rewards)."""
    return str(getattr(name, "value", name)) in TURN_ESTIMATORS


def register_turn_estimators() -> None:
    """Register the per-turn estimators in verl's advantage-estimator registry (idempotent).

    A name another package registered first keeps its registration, with a warning (as agl_lab's losses do).
    """
    for name, fn in _FUNCTIONS.items():
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is None:
            core_algos.register_adv_est(name)(fn)
        elif getattr(existing, "__qualname__", None) != fn.__qualname__:
            warnings.warn(
                f"verl's advantage-estimator registry already maps {name!r} to {existing!r}; agl_lab leaves it there",
                stacklevel=2,
            )


def _estimate(method: str, token_level_rewards, response_mask, index, config) -> tuple[torch.Tensor, torch.Tensor]:
    if token_level_rewards.shape != response_mask.shape:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask {tuple(response_mask.shape)} "
            "must both be (rows, response_length)"
        )
    norm = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    per_turn, counts = turn_values(token_level_rewards, response_mask)  # (rows, K), (rows,)
    n = len(counts)
    groups = np.arange(n) if index is None else group_rows(index, field="index (uid)").codes  # (rows,)
    with torch.no_grad():
        advantages = turn_advantages(per_turn.cpu().numpy(), counts.cpu().numpy(), groups, method=method, norm=norm)
        dtype = torch.promote_types(token_level_rewards.dtype, torch.float32)
        out = broadcast_turns(torch.from_numpy(advantages).to(response_mask.device), response_mask, dtype=dtype)
    return out, out


def _cell_normalize(
    values: np.ndarray, cells: np.ndarray, groups: np.ndarray, *, norm: bool, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Center (and scale) ``values`` (n, K) within each (group, column) over ``cells``; also each cell's members.

    std is the sample std (n − 1), as torch.std; a (group, column) with one member gets 0. Outside ``cells``: 0.
    """
    n, width = values.shape
    key = groups[:, None] * width + np.arange(width)[None, :]  # (n, K)
    size = (int(groups.max()) + 1) * width if n else 0
    flat_key, flat = key[cells], values[cells]  # (cells,)
    count = np.bincount(flat_key, minlength=size)  # (groups × K,)
    mean = np.bincount(flat_key, weights=flat, minlength=size) / np.maximum(count, 1)
    centered = flat - mean[flat_key]  # (cells,)
    if norm:
        spread = np.bincount(flat_key, weights=centered**2, minlength=size) / np.maximum(count - 1, 1)
        centered = centered / (np.sqrt(spread)[flat_key] + eps)
    centered[count[flat_key] < 2] = 0.0
    out = np.zeros((n, width))
    out[cells] = centered
    return out, np.where(cells, count[key], 0) if n else np.zeros((0, width), dtype=np.int64)


# Registered on import, as agl_lab's losses are (agl_lab/__init__.py imports this module with verl's core_algos).
register_turn_estimators()
