"""Regenerate this sample batch: ``.venv/bin/python data/sample_batch/make.py`` (from the repository root).

The batch is synthetic (agl_lab.lab.synthetic) and deterministic: the same knobs and seed give the same bytes of
tensors, which tests/test_rows.py checks against the shipped files.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from verl import DataProto

from agl_lab.files.batch_io import save_batch
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows

# 12 prompts × 4 rollouts; failing rollouts take two more LLM calls, and a call rewrites its context 30% of
# the time, so at the trajectory level rollouts become 1–5 rows. Short calls keep the files small.
KNOBS = SyntheticKnobs(
    n_prompts=12,
    rollouts_per_prompt=4,
    calls="success",
    min_calls=1,
    max_calls=3,
    fail_extra_calls=2,
    min_tokens=2,
    max_tokens=12,
    prompt_tokens=8,
    observation_tokens=3,
    success_prob=0.5,
    break_prob=0.3,
    level="trajectory",
    seed=7,
)


def make() -> DataProto:
    """The sample batch: the rows Agent Lightning's adapter would emit for these rollouts, with their provenance."""
    rows, metrics = synthetic_rows(KNOBS)
    rows.meta_info["agl_lab"] = {"made_by": "data/sample_batch/make.py", "knobs": dataclasses.asdict(KNOBS)}
    rows.meta_info["adapter_metrics"] = metrics
    return rows


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    batch = make()
    save_batch(batch, here, overwrite=True)
    print(f"wrote {len(batch)} rows of {len(set(batch.non_tensor_batch['rollout_id_list']))} rollouts to {here}")
