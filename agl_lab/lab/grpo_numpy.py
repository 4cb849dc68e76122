"""GRPO's advantages in numpy: a run's weighting diagnostics without loading torch, Ray or verl.

verl's ``compute_advantage`` stays the source of truth: ``tests/test_grpo_numpy.py`` holds :func:`grpo_advantages`
equal to it (and to :func:`agl_lab.compute_rollout_level_advantage` at the rollout level) on random batches, for
both estimators, both ``norm_adv_by_std_in_grpo`` values and the scores' dtypes; every other estimator goes to verl
(:mod:`agl_lab.lab.run_diagnostics`). What is replicated, from verl 0.9.1's ``core_algos``:

=====================  ===============================================================================================
``grpo``               per group (uid): the mean and the unbiased std (``torch.std``) in the scores' dtype; a group
                       of one row has mean 0 and std 1; ``(score − mean) / (std + 1e-6)``, or ``score − mean`` with
                       ``norm_adv_by_std_in_grpo=false``; every operation rounded to the scores' dtype (bf16 for
                       Agent Lightning's ``token_level_scores``)
``grpo_vectorized``    the same in float32 whatever the scores' dtype (``group_mean_std``), to 2 ulps (torch's float32
                       square root); verl's ``compute_advantage`` does not pass ``norm_adv_by_std_in_grpo`` to it,
                       so it always divides
rollout level          (Agent Lightning) the estimator runs on each rollout's first row and its value is broadcast to
                       the rollout's rows, after the same checks and with the same error texts
=====================  ===============================================================================================

A row's score is its reward (the sum of its ``token_level_scores``), rounded to the scores' dtype: exact where a row
holds its reward on one token, as Agent Lightning's and verl's rows do.
"""

from __future__ import annotations

import numpy as np

from agl_lab.core.groups import RolloutGroups

__all__ = ["FAST_ESTIMATORS", "SCORE_DTYPES", "grpo_advantages", "rounded"]

FAST_ESTIMATORS = ("grpo", "grpo_vectorized")
SCORE_DTYPES = ("float64", "float32", "bfloat16", "float16")
_EPSILON = 1e-6  # verl's default epsilon for both GRPO estimators


def grpo_advantages(
    reward: np.ndarray,
    group: np.ndarray,
    *,
    rollouts: RolloutGroups | None = None,
    estimator: str = "grpo",
    norm_adv_by_std_in_grpo: bool = True,
    score_dtype: str = "float32",
    tokens: np.ndarray | None = None,
) -> np.ndarray:
    """(rows,) float64: each row's advantage per trainable token, as verl's estimator computes it.

    ``reward``: (rows,) each row's reward; ``group``: (rows,) int GRPO-group (uid) codes; ``rollouts``: the rows
    grouped by rollout for Agent Lightning's rollout level (None: verl's row level); ``tokens``: (rows,) trainable
    tokens where known (a rollout whose first row has none is refused at the rollout level, as Agent Lightning
    refuses it). Rows without a trainable token still get their value here; their advantage sum is 0.
    """
    if estimator not in FAST_ESTIMATORS:
        raise ValueError(f"no numpy path for estimator {estimator!r}: it has one for {list(FAST_ESTIMATORS)}")
    if score_dtype not in SCORE_DTYPES:
        raise ValueError(f"score_dtype must be one of {list(SCORE_DTYPES)}, got {score_dtype!r}")
    reward = np.asarray(reward, dtype=np.float64)
    group = np.asarray(group, dtype=np.int64)
    bad = np.flatnonzero(~np.isfinite(reward))
    if len(bad):
        raise ValueError(
            f"the rows' reward has NaN or inf values in rows {bad[:10].tolist()}: fill missing rewards first "
            "(agentlightning.reward_fillna_value does this for rollouts without a reward)"
        )
    scores = rounded(reward, score_dtype)  # (rows,) as verl's token_level_rewards.sum(-1)
    if rollouts is None:
        return _grpo(scores, group, estimator, norm_adv_by_std_in_grpo, score_dtype)
    _check_rollouts(rollouts, group, rounded(reward, "float32"), tokens)
    first = rollouts.first_rows  # (rollouts,)
    values = _grpo(scores[first], group[first], estimator, norm_adv_by_std_in_grpo, score_dtype)  # (rollouts,)
    return values[rollouts.codes]


def rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` (float64) rounded to ``dtype`` as torch stores it (bf16: round to nearest even), as float64."""
    values = np.asarray(values, dtype=np.float64)
    if dtype == "float64":
        return values
    if dtype in ("float32", "float16"):
        return values.astype(dtype).astype(np.float64)
    bits = values.astype(np.float32).view(np.uint32)  # bf16 keeps float32's top 16 bits
    bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


def _grpo(scores: np.ndarray, group: np.ndarray, estimator: str, by_std: bool, dtype: str) -> np.ndarray:
    """GRPO on one score per row (module docstring): (rows,) float64 holding values of the result's dtype."""
    if len(scores) == 0:
        return np.zeros(0)
    codes, group = np.unique(group, return_inverse=True)
    if estimator == "grpo_vectorized":  # compute_advantage passes it no norm_adv_by_std_in_grpo: it always divides
        return _grpo_vectorized(scores.astype(np.float32), group, len(codes)).astype(np.float64)
    count = np.bincount(group, minlength=len(codes)).astype(np.float64)  # (groups,)
    mean = np.bincount(group, weights=scores, minlength=len(codes)) / count  # (groups,)
    centered = scores - mean[group]  # (rows,)
    variance = np.bincount(group, weights=centered * centered, minlength=len(codes)) / np.maximum(count - 1, 1)
    mean, std = rounded(mean, dtype), rounded(np.sqrt(variance), dtype)  # (groups,) torch's mean and std, rounded
    single = count == 1
    mean[single], std[single] = 0.0, 1.0
    difference = rounded(scores - mean[group], dtype)  # (rows,)
    if not by_std:
        return difference
    return rounded(difference / rounded(std[group] + _EPSILON, dtype), dtype)


def _grpo_vectorized(scores: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """verl's ``group_mean_std`` and division, operation by operation in float32 (``index_add_`` adds in row order,
    as ``np.add.at`` does). numpy's float32 square root is correctly rounded and torch's CPU one is not always (on an
    AMD EPYC one value in five is an ulp off, whichever of torch's kernel sets runs): the std can differ from verl's
    by an ulp of float32, the advantage (a quotient by it) by two."""
    count = np.zeros(n_groups, np.float32)
    np.add.at(count, group, np.float32(1.0))
    total = np.zeros(n_groups, np.float32)
    np.add.at(total, group, scores)
    mean = total / np.maximum(count, np.float32(1.0))  # (groups,)
    centered = scores - mean[group]  # (rows,)
    squares = np.zeros(n_groups, np.float32)
    np.add.at(squares, group, centered * centered)
    std = np.sqrt(np.maximum(squares / np.maximum(count - np.float32(1.0), np.float32(1.0)), np.float32(0.0)))
    single = count <= 1.0
    mean[single], std[single] = 0.0, 1.0
    return (scores - mean[group]) / (std[group] + np.float32(_EPSILON))  # (rows,) float32


def _check_rollouts(rollouts: RolloutGroups, group: np.ndarray, reward: np.ndarray, tokens: np.ndarray | None) -> None:
    """Agent Lightning's checks, in its order and words: one uid and one reward sum per rollout, a first row with a
    trainable token (its value is read there)."""
    first_of_row = rollouts.first_rows[rollouts.codes]  # (rows,)
    bad_uid = np.bincount(rollouts.codes, weights=group != group[first_of_row], minlength=rollouts.n_groups) > 0
    # torch.isclose's defaults, on the float32 sums Agent Lightning compares
    differs = ~np.isclose(reward, reward[first_of_row], rtol=1e-5, atol=1e-8)
    bad_reward = np.bincount(rollouts.codes, weights=differs, minlength=rollouts.n_groups) > 0
    bad = np.flatnonzero(bad_uid | bad_reward)
    if len(bad):
        rollout_id = rollouts.ids[bad[0]]
        if bad_uid[bad[0]]:
            raise RuntimeError(f"rollout-level advantage found multiple uid values for rollout_id={rollout_id!r}")
        raise RuntimeError(
            "rollout-level advantage requires all triplets for the same rollout_id "
            f"to share the same scalar token_level_rewards sum; got rollout_id={rollout_id!r}"
        )
    if tokens is not None:
        empty = np.flatnonzero(np.asarray(tokens)[rollouts.first_rows] == 0)
        if len(empty):
            rollout_id = rollouts.ids[empty[0]]
            raise RuntimeError(f"rollout-level advantage cannot extract advantages for empty rollout_id={rollout_id!r}")
