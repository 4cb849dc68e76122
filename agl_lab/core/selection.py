"""Agent Lightning's trainer steps 1–2 on one batch of rows: which rows train, and why each other row does not.

1. rows collected; ``is_drop_mask`` rows removed               (:func:`agl_lab.core.update_cap.drop_marked_rows`)
2. mini-batch alignment and ``max_ppo_update_times``            (:func:`agl_lab.apply_update_cap`)

:func:`select_rows` gives the rows that train and the step's counters; :func:`plan_selection` the same with its
reasons (a fate per input row and the rollouts trained in part), which the weighting lab and the figures read so that
nobody counts them again. :mod:`agl_lab.core.pipeline` goes on from here (steps 3–5).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_response_mask

from agl_lab.core.groups import as_arrays
from agl_lab.core.keys import (
    CAP_DROP_UNIT,
    ESTIMATOR,
    MAX_PPO_UPDATE_TIMES,
    MINI_BATCH,
    PARTIALLY_DROPPED_ROLLOUTS,
    ROLLOUT_N,
    SEED,
    TEMPERATURE,
)
from agl_lab.core.rows import require_matrix, take_rows
from agl_lab.core.update_cap import (
    marked_rows_kept,
    partially_dropped_count,
    plan_update_cap,
    warn_no_trainable_batch,
)

__all__ = ["FATES", "Selection", "mini_batch_rows", "mini_batches", "plan_selection", "select_rows", "shallow_copy"]


def mini_batch_rows(cfg: DictConfig) -> int:
    """Rows per PPO mini-batch: ``ppo_mini_batch_size × rollout.n`` (verl counts prompts, rows are rollouts)."""
    return int(OmegaConf.select(cfg, MINI_BATCH)) * int(OmegaConf.select(cfg, ROLLOUT_N))


def mini_batches(n_rows: int, cfg: DictConfig) -> int:
    """PPO mini-batches per epoch over ``n_rows`` trained rows (ceil: whole-rollout drops may leave the last short)."""
    return -(-n_rows // mini_batch_rows(cfg))


@dataclass(frozen=True)
class Selection:
    """Steps 1–2 on a batch: the rows that reach the update, and what happened to every input row."""

    batch: DataProto  # the kept rows, in input order, with ``uid`` and ``response_mask`` set
    kept: np.ndarray  # (kept,) int64: the input row of each kept row
    fate: np.ndarray  # (rows,) object: one of FATES for every input row
    metrics: dict[str, Any]
    # rollouts with rows kept and rows dropped (None: no rollout_id_list); the trainer and the cap figure read it
    partially_dropped: int | None = None

    @property
    def partial_metrics(self) -> dict[str, int]:
        """``lab/partially_dropped_rollouts`` (a lab metric beside Agent Lightning's); nothing without rollout ids."""
        partial = self.partially_dropped
        return {} if partial is None else {PARTIALLY_DROPPED_ROLLOUTS: partial}


FATES = ("kept", "dropped/marked", "dropped/same_reward", "dropped/random")


def select_rows(rows: DataProto, cfg: DictConfig, *, seed: int | None = None) -> tuple[DataProto, dict[str, Any]]:
    """Steps 1–2: set ``uid``, drop marked rows, align to mini-batches and apply the update cap.

    ``rows`` is not modified. ``seed`` (default ``lab.seed``) fixes which surplus rows are dropped. An empty
    result comes back with an ``EmptyBatchWarning``: skip the step.
    """
    selection = plan_selection(rows, cfg, seed=seed, stacklevel=3)
    return selection.batch, selection.metrics


def plan_selection(rows: DataProto, cfg: DictConfig, *, seed: int | None = None, stacklevel: int = 2) -> Selection:
    """:func:`select_rows` with its reasons: which input rows are kept, why each other row is dropped, and how many
    rollouts are trained in part. An empty selection warns (``EmptyBatchWarning``, ``stacklevel`` counted from the
    caller): the trainer skips that step."""
    if OmegaConf.select(cfg, ESTIMATOR) == core_algos.AdvantageEstimator.REMAX:
        raise NotImplementedError("REMAX baseline not yet supported in AgentLightningRayPPOTrainer")
    seed = int(OmegaConf.select(cfg, SEED)) if seed is None else seed
    batch = shallow_copy(rows)
    batch.meta_info["temperature"] = OmegaConf.select(cfg, TEMPERATURE)
    if "data_id_list" in batch.non_tensor_batch:
        batch.non_tensor_batch["uid"] = batch.non_tensor_batch["data_id_list"]
    else:  # Agent Lightning gives every row its own group then
        rng = np.random.default_rng(seed)
        batch.non_tensor_batch["uid"] = np.array(
            [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(len(batch))], dtype=object
        )
    if "response_mask" not in batch.batch.keys():
        batch.batch["response_mask"] = compute_response_mask(batch)
    if "token_level_scores" not in batch.batch.keys():
        raise AssertionError("rollout bridge must populate token_level_scores")
    require_matrix(batch, "token_level_scores", floating=True, finite=True)  # a NaN reward would poison its group
    if "attention_mask" in batch.batch.keys():  # the tokens of every collected row, as Agent Lightning records them
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()

    n = len(batch)
    survivors, metrics = marked_rows_kept(batch)  # (survivors,)
    # The cap is planned on the survivors' scores and ids only, and every tensor is copied once, with one index for
    # both drops: copying the rows is most of this step's time (it is what verl's row indexing does per field).
    plan = plan_update_cap(
        _rows_for_plan(batch, survivors),
        mini_batch_size=mini_batch_rows(cfg),
        max_ppo_update_times=OmegaConf.select(cfg, MAX_PPO_UPDATE_TIMES),
        seed=seed,
        drop_unit=OmegaConf.select(cfg, CAP_DROP_UNIT),
    )
    kept = survivors[plan.kept]  # (kept,)
    if len(kept) < n:
        batch = take_rows(batch, kept)
    fate = np.full(n, FATES[1], dtype=object)
    fate[survivors] = FATES[0]
    fate[survivors[plan.dropped_same_reward]] = FATES[2]
    fate[survivors[plan.dropped_random]] = FATES[3]
    if len(kept) == 0:
        warn_no_trainable_batch(n, mini_batch_rows(cfg), stacklevel=stacklevel)
    return Selection(
        batch=batch,
        kept=kept,
        fate=fate,
        metrics={**metrics, **plan.metrics},
        partially_dropped=partially_dropped_count(rows, kept),
    )


def _rows_for_plan(batch: DataProto, survivors: np.ndarray) -> DataProto:
    """The survivors with what :func:`plan_update_cap` reads (the scores and the id columns), not their token ids."""
    scores = batch.batch["token_level_scores"]  # (rows, R)
    if len(survivors) < len(batch):
        scores = torch.index_select(scores, 0, torch.from_numpy(survivors))  # (survivors, R)
        non_tensors = {key: values[survivors] for key, values in batch.non_tensor_batch.items()}
    else:
        non_tensors = dict(batch.non_tensor_batch)
    return DataProto(
        batch=TensorDict({"token_level_scores": scores}, batch_size=len(scores)), non_tensor_batch=non_tensors
    )


def shallow_copy(rows: DataProto) -> DataProto:
    """A DataProto sharing the tensors of ``rows``, so adding or replacing fields leaves ``rows`` as it was.

    Non-tensor columns given as lists, tuples or Series become numpy arrays, which verl's row indexing needs.
    """
    return DataProto(
        batch=rows.batch.copy(), non_tensor_batch=as_arrays(rows.non_tensor_batch), meta_info=dict(rows.meta_info)
    )
