"""How often the update cap drops a rollout, by its row count, under each drop unit (``lab.cap_drop_unit``).

Random batches like a short run's (prompts × rollouts, 1-4 rows each, reward 1 or 0 per rollout, so some GRPO groups
are same-reward), mini-batches of 8 rows, a cap of none, 1 or 2 updates. For each rollout the script records whether
the cap dropped it (whole-rollout unit: dropped whole, or trained in part to avoid a skip) or touched it (row unit:
any of its rows dropped), split by same-reward rollouts (dropped first by design) and rollouts with signal.
The whole-rollout unit's chance must not fall with the row count (a rollout is dropped by where it falls in the
seeded order, not by its size); the row unit's rises with it (more rows, more chances to lose one).

    .venv/bin/python benchmarks/measure_cap_bias.py [--batches 2000] [--before REV]

``--before REV`` measures the whole-rollout unit of ``agl_lab/core/update_cap.py`` as it was at git revision REV
beside today's (e.g. ``971000d``, which took a rollout only while whole rollouts could still fit the surplus exactly).

The figures go to docs/differences.md (row 28).
"""

from __future__ import annotations

import argparse
import subprocess
import types
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from verl import DataProto

from agl_lab import apply_update_cap
from agl_lab.core.update_cap import same_reward_rows


def random_batch(rng: np.random.Generator) -> DataProto:
    prompts, per_prompt = int(rng.integers(2, 7)), int(rng.integers(2, 6))
    rollout_ids, data_ids, rewards = [], [], []
    for p in range(prompts):
        for r in range(per_prompt):
            reward = float(rng.random() < 0.5)
            for _ in range(int(rng.integers(1, 5))):
                rollout_ids.append(f"p{p}/r{r}")
                data_ids.append(f"p{p}")
                rewards.append(reward)
    n = len(rollout_ids)
    scores = torch.zeros(n, 2)
    scores[:, -1] = torch.tensor(rewards)
    batch = DataProto.from_dict(
        tensors={"token_level_scores": scores, "response_mask": torch.ones(n, 2, dtype=torch.long)},
        non_tensors={"rollout_id_list": np.array(rollout_ids), "data_id_list": np.array(data_ids)},
    )
    batch.non_tensor_batch["uid"] = batch.non_tensor_batch["data_id_list"]
    return batch


def measure(batches: int, *, before: Callable | None = None, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    caps = {"row": apply_update_cap, "rollout": apply_update_cap}
    if before is not None:
        caps["rollout (before)"] = before
    lines, trained = [], []
    for b in range(batches):
        batch = random_batch(rng)
        ids = batch.non_tensor_batch["rollout_id_list"]
        same = set(ids[same_reward_rows(batch)].tolist())
        cap = [None, 1, 2][b % 3]
        sizes = pd.Series(ids).value_counts()
        for unit, fn in caps.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kept, _ = fn(batch, mini_batch_size=8, max_ppo_update_times=cap, seed=b, drop_unit=unit.split()[0])
            counts = pd.Series(kept.non_tensor_batch["rollout_id_list"]).value_counts()
            for rollout, size in sizes.items():
                lines.append({
                    "unit": unit, "surplus": "alignment" if cap is None else "cap", "rows": int(size),
                    "signal": "same-reward" if rollout in same else "signal",
                    "dropped": int(counts.get(rollout, 0)) < int(size),
                })  # fmt: skip
            trained.append({"unit": unit, "agl_rows": _agl_rows(len(batch), cap), "rows": len(kept)})
    frame = pd.DataFrame(lines)
    frame.attrs["trained"] = pd.DataFrame(trained)
    return frame


def _agl_rows(n: int, cap: int | None, mini: int = 8) -> int:
    return min(n // mini * mini, n if cap is None else cap * mini)


def cap_at(revision: str) -> Callable:
    """``apply_update_cap`` as ``agl_lab/core/update_cap.py`` was at git ``revision`` (run beside today's modules)."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "show", f"{revision}:agl_lab/core/update_cap.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(f"update_cap_{revision}")
    exec(compile(source, f"update_cap.py@{revision}", "exec"), module.__dict__)
    return module.apply_update_cap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--before", default=None, help="also measure the whole-rollout unit at this git revision")
    args = parser.parse_args()
    frame = measure(args.batches, before=cap_at(args.before) if args.before else None)
    index = ["surplus", "signal", "unit"]
    table = frame.pivot_table(index=index, columns="rows", values="dropped", aggfunc="mean")
    counts = frame.pivot_table(index=["surplus", "signal"], columns="rows", values="dropped", aggfunc="size") // len(
        frame["unit"].unique()
    )
    print(f"chance a rollout is dropped (row unit: any of its rows), by its rows; {args.batches} random batches")
    print(table.round(3).to_string())
    print("\nrollouts seen per unit")
    print(counts.to_string())
    trained = frame.attrs["trained"].groupby("unit")[["rows", "agl_rows"]].sum()
    print("\nrows trained / Agent Lightning's rows")
    print((trained["rows"] / trained["agl_rows"]).round(4).to_string())


if __name__ == "__main__":
    main()
