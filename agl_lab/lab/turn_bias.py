"""The bias of per-turn-index normalisation, measured on synthetic batches against verl RFC #7244's closed form.

The setting (:func:`agl_lab.lab.synthetic.synthetic_rows`, transition level, one row per call): every rollout makes
a call, then another with chance ``p`` (``continue_prob``) after each, up to ``M`` (``max_calls``): the policy decides
when to stop. Every call another follows earns an intermediate reward uniform in ``μ ± spread``; the outcome (1 with
chance ``success_prob``) does not depend on the turns. At the first turn, a rollout that goes on took another turn and
one that stops did not. The policy gradient of that decision is ``p(1−p) · (E[A | another turn] − E[A | stop])`` per
unit of its logit, so an estimator's **gap** ``E[A | another turn] − E[A | stop]`` over first-turn rows is what the
decision learns from.

=============  ====================================================================================================
true gap       what another turn is worth in return: the intermediate rewards of the turns it leads to,
               ``Δ* = μ · E[T − 1 | T ≥ 2] = μ · Σ_{j=1}^{M−1} p^{j−1}`` (the outcome is the same either way)
RFC's closed   MT-GRPO's baseline subtracts the group's mean intermediate reward at every turn index the trajectory
form           itself goes on to reach: the accumulated intermediate-reward group mean. Its gap falls short by it,
               ``bias = −μ · E[T − 1 | T ≥ 2] = −Δ*``: a hidden bonus of ``−E[r]`` on every "take another turn"
bias           an estimator's gap − the true gap, averaged over ``batches`` synthetic batches (95% Student-t interval)
GRPO's         a group baseline that includes the row's own trajectory shrinks every gap by 1/n (n rollouts per
shrinkage      prompt; Dr. GRPO's appendix): ``−Δ*/n``, what the unbiased estimators show as their bias. It scales a
               decision's signal, it does not reverse it; MT-GRPO's bias is the closed form, whatever n
=============  ====================================================================================================

Estimators (``algorithm.norm_adv_by_std_in_grpo=false``, so gaps are in reward units as the closed form is):
``mt_grpo``, ``mt_grpo_fix``, ``turn_grpo`` (:mod:`agl_lab.core.turn_estimators`, rewards placed per turn) and verl's
``grpo`` with rollout-level advantage (rewards summed into each rollout's return), all through the trainer's step 4
(:func:`agl_lab.core.pipeline.estimate_advantages`). ``benchmarks/turn_index_bias.py`` prints the table; notebook
``notebooks/01_per_rollout_weighting.ipynb`` shows it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats
from verl import DataProto

from agl_lab.config.compose import compose_config
from agl_lab.core.keys import ESTIMATOR, NORM_ADV_BY_STD, ROLLOUT_LEVEL
from agl_lab.core.pipeline import estimate_advantages
from agl_lab.core.row_sums import trainable_tokens
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from agl_lab.lab.turn_credit import ESTIMATORS

__all__ = ["ESTIMATORS", "rfc_closed_form", "true_gap", "turn_bias_table"]

DEFAULT_MEANS = (-1.0, -0.5, -0.2, 0.0, 0.2, 0.5, 1.0)


def true_gap(mean: float, *, continue_prob: float, max_calls: int) -> float:
    """``μ · E[T − 1 | T ≥ 2]``: what taking another turn at the first turn is worth in intermediate rewards."""
    return float(mean) * sum(continue_prob ** (j - 1) for j in range(1, max_calls))


def rfc_closed_form(mean: float, *, continue_prob: float, max_calls: int) -> float:
    """verl RFC #7244's bias of MT-GRPO's first-turn gap: minus the accumulated intermediate-reward group mean."""
    return -true_gap(mean, continue_prob=continue_prob, max_calls=max_calls)


def turn_bias_table(
    means: Sequence[float] = DEFAULT_MEANS,
    *,
    batches: int = 20,
    n_prompts: int = 64,
    rollouts_per_prompt: int = 8,
    continue_prob: float = 0.5,
    max_calls: int = 3,
    spread: float = 0.5,
    success_prob: float = 0.5,
    seed: int = 0,
) -> pd.DataFrame:
    """One line per intermediate-reward mean μ: ``intermediate_mean, true_gap, rfc_closed_form, grpo_shrinkage`` and,
    per estimator
    of :data:`ESTIMATORS`, ``<name> gap``, ``<name> bias``, ``<name> ci`` (the bias's 95% half-width) (module
    docstring). Batch ``b`` of every μ draws the same episodes (seed ``seed + b``), so the means differ in rewards only.
    """
    if batches < 2:
        raise ValueError(f"batches must be >= 2 for an interval, got {batches}")
    if not (0.0 < continue_prob < 1.0 and max_calls >= 2):
        raise ValueError(
            f"need 0 < continue_prob < 1 and max_calls >= 2 (some rollouts stop, some go on), got {continue_prob} "
            f"and {max_calls}"
        )
    configs = {name: _config(estimator, rollout_level) for name, (estimator, rollout_level, _) in ESTIMATORS.items()}
    lines = []
    for mean in means:
        truth = true_gap(mean, continue_prob=continue_prob, max_calls=max_calls)
        gaps: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
        for b in range(batches):
            knobs = SyntheticKnobs(
                n_prompts=n_prompts, rollouts_per_prompt=rollouts_per_prompt, calls="geometric", min_calls=1,
                max_calls=max_calls, continue_prob=continue_prob, success_prob=success_prob, level="transition",
                min_tokens=1, max_tokens=4, prompt_tokens=2, observation_tokens=1, break_prob=0.0,
                turn_reward_mean=float(mean), turn_reward_spread=spread, seed=seed + b,
            )  # fmt: skip
            rows = {p: synthetic_rows(dataclasses.replace(knobs, turn_rewards=p))[0] for p in ("per_turn", "summed")}
            for name, (_, rollout_level, placement) in ESTIMATORS.items():
                gaps[name].append(_first_turn_gap(rows[placement], configs[name], rollout_level=rollout_level))
        line = {"intermediate_mean": float(mean), "true_gap": truth,
                "rfc_closed_form": rfc_closed_form(mean, continue_prob=continue_prob, max_calls=max_calls),
                "grpo_shrinkage": -truth / rollouts_per_prompt}  # fmt: skip
        for name, values in gaps.items():
            bias = np.asarray(values) - truth  # (batches,)
            half = stats.t.ppf(0.975, len(bias) - 1) * bias.std(ddof=1) / np.sqrt(len(bias))
            line |= {f"{name} gap": float(np.mean(values)), f"{name} bias": float(bias.mean()), f"{name} ci": half}
        lines.append(line)
    return pd.DataFrame(lines)


def _config(estimator: str, rollout_level: bool):
    flag = str(rollout_level).lower()
    return compose_config(dotlist=[f"{ESTIMATOR}={estimator}", f"{ROLLOUT_LEVEL}={flag}", f"{NORM_ADV_BY_STD}=false"])


def _first_turn_gap(rows: DataProto, cfg, *, rollout_level: bool) -> float:
    """E[A | first-turn row of a rollout that goes on] − E[A | first-turn row of one that stops], on this batch."""
    work = DataProto(batch=rows.batch.clone(), non_tensor_batch=dict(rows.non_tensor_batch), meta_info={})
    work.non_tensor_batch["uid"] = work.non_tensor_batch["data_id_list"]
    work.batch["token_level_rewards"] = work.batch["token_level_scores"]
    work, _ = estimate_advantages(work, cfg, rollout_level=rollout_level)
    mask = work.batch["response_mask"]  # (rows, R)
    advantage = ((work.batch["advantages"].double() * mask).sum(-1) / trainable_tokens(mask)).numpy()  # (rows,)
    rollout_ids = work.non_tensor_batch["rollout_id_list"]
    _, codes, turns = np.unique(rollout_ids, return_inverse=True, return_counts=True)
    first = np.asarray(work.non_tensor_batch["turn_index_list"]) == 0  # (rows,)
    goes_on = turns[codes] >= 2  # (rows,)
    return float(advantage[first & goes_on].mean() - advantage[first & ~goes_on].mean())
