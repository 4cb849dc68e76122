"""Regenerate this run: ``.venv/bin/python data/verl_rollout_dump/make.py`` (from the repository root).

Eight training steps of a synthetic agent run (agl_lab.lab.synthetic) at the ``transition`` level, each LLM call a row
as in a multi-output agent loop, written as verl's ``trainer.rollout_data_dir`` by verl's own
``RayPPOTrainer._log_rollout_data`` (agl_lab.files.verl_dump.write_verl_dump drives it on a bare trainer).
Deterministic: tests/test_run_readers.py checks that this script reproduces the shipped files byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from agl_lab.files.verl_dump import write_verl_dump
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows

STEPS = 8


def knobs(step: int) -> SyntheticKnobs:
    """Step ``step``'s rollouts: 6 prompts × 6 rollouts of 1-3 LLM calls, a failing one 8 calls more (sessions of 1 to
    11 rows); the agent gets better over the run (success 0.25 at step 1 to 0.6 at step 8), as a learning run does."""
    return SyntheticKnobs(
        n_prompts=6,
        rollouts_per_prompt=6,
        calls="success",
        min_calls=1,
        max_calls=3,
        fail_extra_calls=8,
        min_tokens=2,
        max_tokens=8,
        prompt_tokens=8,
        observation_tokens=2,
        success_prob=round(0.25 + 0.05 * (step - 1), 2),
        level="transition",
        seed=100 + step,
    )


def make(folder: Path) -> list[Path]:
    """Write the run into ``folder``; returns its files."""
    return [write_verl_dump(synthetic_rows(knobs(step))[0], folder, step=step) for step in range(1, STEPS + 1)]


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    files = make(here)
    rows = sum(len(f.read_text().splitlines()) for f in files)
    print(f"wrote {len(files)} steps, {rows} rows to {here}")
