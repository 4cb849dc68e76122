"""How much each rollout weighs in the policy gradient, under every loss mode of the catalogue.

For one batch of rows the analysis runs the trainer's own steps: drops and mini-batch alignment with the
update cap (:func:`agl_lab.core.pipeline.plan_selection`), then rewards and the advantage, rollout-level or
verl's (:func:`agl_lab.core.pipeline.rewards_and_advantages`, the trainer's one implementation). Each kept token
then gets its mode's weight ``w`` (:mod:`agl_lab.core.weights`; the modes and their formulas are the catalogue
:data:`agl_lab.LOSS_MODES`). At ratio 1 (a step's first update) the gradient is ``−Σ w·A·∇log π``:

* ``weight`` of a rollout, ``Σ w`` over its kept tokens: its policy-gradient mass for a unit advantage;
* ``mass``, ``Σ w·A``: its actual mass, signed like its advantage;
* ``share``, weight / the batch's total weight; ``relative_weight`` = share × rollouts kept (1 = fair share).

Rows reach the update as verl splits them (:func:`agl_lab.core.weights.token_layout`): ``dp_size`` ranks, each
cutting its chunk into mini-batches and those into ``ppo_micro_batch_size_per_gpu``-row micro-batches (verl's
default ``actor.shuffle: false``; the trainer's ``balance_batch`` reordering is not modelled). With an outcome
estimator (GRPO, RLOO) the steps run on :class:`agl_lab.lab.compact_rows.CompactRows`, one number per row.
Tables are built on first use; the live panel reads arrays (:meth:`Weighting.view`). Notebook:
``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from omegaconf import DictConfig
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_response_mask

from agl_lab.config.modes import LOSS_MODES
from agl_lab.core import weights as core_weights
from agl_lab.core.groups import group_rows
from agl_lab.core.keys import USE_KL_IN_REWARD
from agl_lab.core.pipeline import plan_selection, rewards_and_advantages
from agl_lab.core.rows import require_fields
from agl_lab.core.turn_estimators import is_turn_estimator
from agl_lab.lab.compact_rows import OUTCOME_ESTIMATORS, CompactRows, compact_rows
from agl_lab.lab.loss_scale import layout_settings
from agl_lab.lab.weighting_result import RolloutView, Weighting

__all__ = ["RolloutView", "Weighting", "analyze_weighting"]

# What the analysis reads; "a+b" = both, a tuple = any one of them.
_NEEDED_FIELDS = (
    "rollout_id_list",
    ("response_mask", "responses+attention_mask"),
    ("token_level_scores", "token_level_rewards"),
)


def analyze_weighting(
    rows: DataProto | CompactRows,
    cfg: DictConfig,
    *,
    modes: Sequence[str] = tuple(LOSS_MODES),
    rollout_levels: Sequence[bool] | None = None,
    seed: int | None = None,
    dp_size: int = 1,
) -> tuple[Weighting, dict[str, Any]]:
    """Every rollout's weight and mass in ``rows`` under each of ``modes`` × ``rollout_levels``.

    ``cfg`` (a composed config) supplies the estimator, ``rollout.n``, ``ppo_mini_batch_size``,
    ``ppo_micro_batch_size_per_gpu``, ``loss_scale_factor``, ``max_ppo_update_times`` and ``lab.seed`` (``seed``
    overrides it); the loss-mode and rollout-level keys in it are ignored, since every requested combination is
    computed: ``rollout_levels`` (default both; off alone for a per-turn estimator, which rollout-level advantage
    refuses). ``dp_size``: the data-parallel ranks of the update. ``rows`` is not modified. Returns the
    :class:`Weighting` and the metrics of the drop and rollout-level steps. When the cap leaves no row the step
    would be skipped: weights are all 0 (an ``EmptyBatchWarning`` says so).
    """
    unknown = [m for m in modes if m not in LOSS_MODES]
    if unknown:
        raise ValueError(f"unknown loss modes {unknown}: choose from {list(LOSS_MODES)}")
    if cfg.algorithm.get("use_kl_in_reward", False):
        raise ValueError(
            "the weighting analysis computes advantages without a KL penalty in the reward (it has no log-probs): "
            f"set {USE_KL_IN_REWARD}=false (Agent Lightning's examples do)"
        )
    if rollout_levels is None:
        rollout_levels = (False,) if is_turn_estimator(cfg.algorithm.adv_estimator) else (True, False)
    outcome = str(cfg.algorithm.adv_estimator) in OUTCOME_ESTIMATORS
    if isinstance(rows, CompactRows):
        if not outcome:
            raise ValueError(
                f"compact rows carry one reward per row, enough for {list(OUTCOME_ESTIMATORS)} but not for "
                f"{cfg.algorithm.adv_estimator!r}: analyze the full rows (synthetic_rows(...), or the batch as loaded)"
            )
        compact, work = rows, rows.data_proto()
    else:
        require_fields(rows, _NEEDED_FIELDS, purpose=f"the weighting analysis ({', '.join(modes)})")
        compact = compact_rows(rows)
        work = compact.data_proto() if outcome else _full(rows)
    rollouts = group_rows(compact.rollout_id, field="rollout_id_list")
    groups = group_rows(compact.data_id, field="data_id_list").codes if compact.data_id is not None else None
    selection = plan_selection(work, cfg, seed=seed, stacklevel=3)  # warns when nothing is left, as the trainer does
    index = selection.kept
    settings = layout_settings(cfg, response_width=compact.response_width, dp_size=dp_size)
    layout = core_weights.token_layout(
        compact.tokens[index], rollouts.codes[index], group=None if groups is None else groups[index], **settings
    )
    token_weights = {mode: LOSS_MODES[mode].weight(layout) for mode in modes}
    advantages, metrics = {}, dict(selection.metrics)
    for level in rollout_levels:
        per_token, level_metrics = _row_advantages(selection.batch, cfg, rollout_level=bool(level), outcome=outcome)
        advantages[bool(level)] = per_token
        metrics.update(level_metrics)
    result = Weighting(
        compact=compact,
        rollout_groups=rollouts,
        kept=index,
        fate=selection.fate,
        partially_dropped=selection.partially_dropped,
        layout=layout,
        token_weights=token_weights,
        advantages=advantages,
        modes=tuple(modes),
    )
    return result, metrics


def _full(rows: DataProto) -> DataProto:
    """Only the fields steps 1–4 read, at full width (for estimators whose advantage varies along a row)."""
    compact = compact_rows(rows)
    mask_key = "response_mask" if "response_mask" in rows.batch.keys() else None
    score_key = "token_level_scores" if "token_level_scores" in rows.batch.keys() else "token_level_rewards"
    tensors = {
        "response_mask": rows.batch[mask_key] if mask_key else compute_response_mask(rows),
        "token_level_scores": rows.batch[score_key],
    }
    if "is_drop_mask" in rows.batch.keys():
        tensors["is_drop_mask"] = rows.batch["is_drop_mask"]
    non_tensors = {"rollout_id_list": compact.rollout_id}
    if compact.data_id is not None:
        non_tensors["data_id_list"] = compact.data_id
    if "turn_index_list" in rows.non_tensor_batch:  # a rollout's turns in order, for per-turn estimators
        non_tensors["turn_index_list"] = np.asarray(rows.non_tensor_batch["turn_index_list"], dtype=np.int64)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=dict(rows.meta_info))


def _row_advantages(
    batch: DataProto, cfg: DictConfig, *, rollout_level: bool, outcome: bool
) -> tuple[np.ndarray, dict[str, Any]]:
    """The trainer's steps 3–4 (:func:`agl_lab.core.pipeline.rewards_and_advantages`) on a copy; each row's mean
    advantage per token."""
    if len(batch) == 0:
        return np.zeros(0), {}
    work = DataProto(batch=batch.batch.copy(), non_tensor_batch=dict(batch.non_tensor_batch), meta_info={})
    work, metrics = rewards_and_advantages(work, cfg, rollout_level=rollout_level)  # rollout-level, per-turn or verl's
    mask = work.batch["response_mask"]  # (kept, R): R = 1 for compact rows
    if outcome:
        return work.batch["advantages"][:, 0].double().numpy(), metrics
    sums = (work.batch["advantages"].double() * mask).sum(dim=-1).numpy()  # (kept,): bf16 advantages summed in float64
    return sums / np.maximum(mask.sum(dim=-1).double().numpy(), 1.0), metrics
