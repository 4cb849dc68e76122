"""A batch reduced to what the weighting reads: per row its ids, trainable tokens, reward and drop flag.

The weighting of a batch reads its rows' token counts, rewards, ids and drop flags; with an outcome estimator
(GRPO, RLOO: one advantage per row, computed from the rows' reward sums and groups) the advantage needs no more.
:class:`CompactRows` holds exactly that, one number per row, so the weighting panel recomputes 10,000 rows in
milliseconds; :meth:`CompactRows.data_proto` turns it into verl rows one token wide (the reward on that token,
the mask 1), on which the trainer's own steps — marked rows, alignment and cap, rollout-level or verl's
advantage — give each row the advantage they give the full rows (tests compare both on random batches).
Estimators whose advantage varies along a row or reads the row's length (GAE, REINFORCE++, OPO, …) need the
full rows. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_response_mask

from agl_lab.core.groups import as_ids
from agl_lab.core.row_sums import trainable_tokens

__all__ = ["OUTCOME_ESTIMATORS", "CompactRows", "compact_rows"]

# verl estimators whose advantage is one number per row, from the rows' reward sums and uid groups alone.
OUTCOME_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "grpo_passk")


@dataclass(frozen=True)
class CompactRows:
    """One entry per row, in the batch's order."""

    rollout_id: np.ndarray  # (rows,) object
    data_id: np.ndarray | None  # (rows,) object: the GRPO group (uid); None: each row its own
    tokens: np.ndarray  # (rows,) int64: trainable tokens (response mask ones)
    reward: np.ndarray  # (rows,) float64: Σ token_level_scores (the rollout's reward)
    is_drop: np.ndarray  # (rows,) bool: is_drop_mask
    response_width: int  # the rows' padded response width (verl's default H of seq-mean-token-sum-norm)
    score_dtype: torch.dtype = torch.float32  # the scores' dtype: the advantage is computed in it, as verl does
    prompt_length: np.ndarray | None = None  # (rows,) prompt tokens without padding (None: unknown)
    response_length: np.ndarray | None = None  # (rows,) response tokens (trainable or not) without padding

    def __len__(self) -> int:
        return len(self.tokens)

    def data_proto(self) -> DataProto:
        """verl rows one token wide: ``response_mask`` 1, ``token_level_scores`` the reward, the ids and flags."""
        n = len(self)
        non_tensors = {"rollout_id_list": self.rollout_id}
        if self.data_id is not None:
            non_tensors["data_id_list"] = self.data_id
        return DataProto.from_dict(
            tensors={
                "response_mask": torch.ones(n, 1, dtype=torch.int64),
                "token_level_scores": torch.from_numpy(self.reward).to(self.score_dtype).unsqueeze(-1),  # (rows, 1)
                "is_drop_mask": torch.from_numpy(self.is_drop),
            },
            non_tensors=non_tensors,
        )


def compact_rows(rows: DataProto) -> CompactRows:
    """:class:`CompactRows` of verl rows (``response_mask`` or responses + attention mask; scores or rewards)."""
    mask = rows.batch["response_mask"] if "response_mask" in rows.batch.keys() else compute_response_mask(rows)
    # the drop step and verl's metrics read scores; a dump taken after step 3 may only carry the rewards
    key = "token_level_scores" if "token_level_scores" in rows.batch.keys() else "token_level_rewards"
    scores = rows.batch[key]  # (rows, R)
    drop = rows.batch["is_drop_mask"] if "is_drop_mask" in rows.batch.keys() else torch.zeros(len(rows), dtype=bool)
    data_id = rows.non_tensor_batch.get("data_id_list")
    lengths = {}
    if {"prompts", "attention_mask"} <= set(rows.batch.keys()):
        width = rows.batch["prompts"].shape[-1]
        attention = rows.batch["attention_mask"]  # (rows, P + R): prompt then response positions
        lengths["prompt_length"] = attention[:, :width].sum(dim=-1).cpu().numpy().astype(np.int64)
        lengths["response_length"] = attention[:, width:].sum(dim=-1).cpu().numpy().astype(np.int64)
    return CompactRows(
        rollout_id=as_ids(rows.non_tensor_batch["rollout_id_list"], field="rollout_id_list"),
        data_id=None if data_id is None else as_ids(data_id, field="data_id_list"),
        tokens=trainable_tokens(mask).cpu().numpy().astype(np.int64),
        reward=scores.sum(dim=-1).double().cpu().numpy(),
        is_drop=drop.bool().cpu().numpy(),
        response_width=int(mask.shape[-1]),
        score_dtype=scores.dtype,
        **lengths,
    )
