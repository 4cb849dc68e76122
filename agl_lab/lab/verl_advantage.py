"""A run's advantages from verl's own estimator, for the outcome estimators without a numpy path (RLOO, pass@k, …).

The run diagnostics (:mod:`agl_lab.lab.run_diagnostics`) compute GRPO in numpy (:mod:`agl_lab.lab.grpo_numpy`);
any other estimator whose advantage is one number per row from the rows' rewards and groups
(:data:`agl_lab.lab.compact_rows.OUTCOME_ESTIMATORS`) runs here, on verl rows one token wide (the reward on that token,
the mask 1 where the row has a trainable token), through the trainer's own step 4: Agent Lightning's rollout-level
path or verl's ``compute_advantage``. This module imports verl (seconds); only such a run loads it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab.config.diagnostics_settings import DiagnosticsSettings
from agl_lab.core.advantage import compute_rollout_level_advantage
from agl_lab.core.pipeline import advantage_kwargs
from agl_lab.lab.compact_rows import OUTCOME_ESTIMATORS

__all__ = ["outcome_advantages"]


def outcome_advantages(rows: pd.DataFrame, settings: DiagnosticsSettings, *, score_dtype: str) -> np.ndarray | None:
    """(rows,) each row's advantage per trainable token under ``settings``' estimator, or None when that estimator
    reads more than one reward per row (GAE, REINFORCE++, …: a run's rows cannot give it)."""
    if settings.adv_estimator not in OUTCOME_ESTIMATORS:
        return None
    cfg = settings.config()
    n = len(rows)
    tokens = rows["response_tokens"].to_numpy(dtype=np.float64)
    mask = np.where(np.isfinite(tokens), tokens > 0, True).astype(np.int64)  # (rows,) unknown counts: trainable
    reward = torch.tensor(rows["reward"].to_numpy(dtype=np.float64)).to(getattr(torch, score_dtype))  # (rows,)
    ids = {
        "rollout_id_list": np.asarray(rows["trajectory"].to_numpy(), dtype=object),
        "uid": np.asarray(rows["group"].to_numpy(), dtype=object),
    }
    batch = DataProto.from_dict(
        tensors={
            "token_level_rewards": reward.unsqueeze(-1),  # (rows, 1)
            "response_mask": torch.from_numpy(mask).reshape(n, 1),  # (rows, 1)
        },
        non_tensors=ids,
    )
    kwargs = advantage_kwargs(cfg)
    if settings.rollout_level:
        batch, _ = compute_rollout_level_advantage(batch, **kwargs)
    else:
        batch = compute_advantage(batch, **kwargs)
    return batch.batch["advantages"][:, 0].double().numpy()
