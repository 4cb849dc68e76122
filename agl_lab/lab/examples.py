"""Hand-built batches: the seed's worked example, a small batch of split rollouts, and rows from a plan.

Each comes with the config that fits it, composed like Agent Lightning's example scripts compose theirs
(an overrides dict over its defaults). ``agl-lab check``, the notebooks, the docs and the tests use them.
Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from omegaconf import DictConfig
from verl import DataProto

from agl_lab.config.bases import BASES
from agl_lab.config.compose import compose_config
from agl_lab.core.rows import build_rows

__all__ = ["EXAMPLE_OVERRIDES", "example_rows", "rows_from_plan", "seed_example"]

# The overrides that fit example_rows() (base `example`, conf/example.yaml), as Agent Lightning's example scripts pass
# theirs: GRPO, no KL in the reward, 2 prompts × 3 rollouts per step, PPO mini-batches of 1 prompt = 3 rows.
EXAMPLE_OVERRIDES: dict[str, Any] = BASES["example"].overrides()


def example_rows() -> DataProto:
    """A small batch that shows why the settings exist: 2 prompts × 3 rollouts with 1–3 rows each.

    Failing rollouts (reward 0) took more LLM calls, so trace aggregation split them into more rows —
    under verl's own loss aggregation they would weigh more just for being split. Its config:
    ``compose_config(EXAMPLE_OVERRIDES)``.
    """
    return rows_from_plan(
        [
            ("q0", "q0/r0", 1.0, [3]),
            ("q0", "q0/r1", 0.0, [2, 4]),
            ("q0", "q0/r2", 0.0, [2, 1, 3]),
            ("q1", "q1/r0", 1.0, [2, 2]),
            ("q1", "q1/r1", 1.0, [4]),
            ("q1", "q1/r2", 0.0, [1, 2, 2]),
        ]
    )


def seed_example() -> tuple[DataProto, DictConfig]:
    """Agent Lightning's worked example: rollout A = rows of 2 and 1 tokens, B = one row of 3, all 3 rows trained.

    A succeeded (reward 1), B failed (reward 0), both on one prompt; one mini-batch of 3 rows, no cap.
    """
    rows = rows_from_plan([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3])])
    cfg = compose_config(
        overrides={
            "algorithm": {"adv_estimator": "grpo"},
            "actor_rollout_ref": {"rollout": {"n": 1}, "actor": {"ppo_mini_batch_size": 3}},
        }
    )
    return rows, cfg


def rows_from_plan(
    plan: Sequence[tuple[Any, Any, float, Sequence[int]]],
    *,
    response_masks: Sequence[Sequence[int]] | None = None,
    score_dtype: torch.dtype = torch.bfloat16,
) -> DataProto:
    """Rows from a plan of ``(data_id, rollout_id, reward, [response length of each row])``, one row per length.

    Token ids are placeholders (a 3-token prompt, responses counting up from 10); ``turn_index_list`` numbers
    the rows of each rollout. Scores are bf16 as Agent Lightning stores them (``score_dtype`` to change it).
    For hand-built batches in tests, docs and notebooks.
    """
    prompts, responses, rewards, rollout_ids, data_ids, turns = [], [], [], [], [], []
    for data_id, rollout_id, reward, lengths in plan:
        for turn, length in enumerate(lengths):
            prompts.append([5 + turn, 6, 7])
            responses.append(list(range(10, 10 + length)))
            rewards.append(reward)
            rollout_ids.append(rollout_id)
            data_ids.append(data_id)
            turns.append(turn)
    return build_rows(
        prompts=prompts,
        responses=responses,
        rewards=rewards,
        rollout_ids=rollout_ids,
        data_ids=data_ids,
        turn_indices=turns,
        response_masks=response_masks,
        score_dtype=score_dtype,
    )
