"""Core speed: agl_lab's vectorized batch work against a masked multiply, and against a plain-loop version.

At 10,000 rows / 4,000 rollouts / 1,024 response tokens, in one run, side by side:

1. agl_lab's own work — rollout-level advantage with the estimator replaced by a constant one (grouping,
   validation, collapse, extraction, broadcast) plus per_rollout_mean normalization — as a ratio to one
   masked-multiply pass ``advantages * response_mask`` over the same (rows, T) tensor. Target ≤ 3×.
2. The whole thing with verl's own ``grpo`` estimator, against a plain-loop implementation of the same
   v1.0 semantics (Python dicts and per-row tensor ops). Target ≥ 5× faster.

Run: ``make bench`` (or ``.venv/bin/python benchmarks/bench_core.py [--rows N --rollouts R --tokens T]``).
"""

from __future__ import annotations

import agl_lab  # first: its process settings reach torch only before tensordict loads (agl_lab's docstring)

# isort: split

import argparse
import statistics
import time

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab import compute_rollout_level_advantage, normalize_advantages_by_rollout
from agl_lab.training.process_state import huge_pages_advised


def make_batch(rows: int, rollouts: int, tokens: int, prompt: int, seed: int = 0) -> DataProto:
    """A realistic batch: 8 rollouts per prompt, rows spread over rollouts, ragged response lengths."""
    rng = np.random.default_rng(seed)
    rollout_of_row = np.concatenate([np.arange(rollouts), rng.integers(0, rollouts, rows - rollouts)])
    rng.shuffle(rollout_of_row)
    lengths = torch.from_numpy(rng.integers(1, tokens + 1, rows))
    response_mask = (torch.arange(tokens)[None, :] < lengths[:, None]).long()  # (rows, T)
    reward_of_rollout = torch.from_numpy(rng.integers(0, 2, rollouts).astype(np.float32))
    scores = torch.zeros(rows, tokens)
    scores[torch.arange(rows), lengths - 1] = reward_of_rollout[torch.from_numpy(rollout_of_row)]
    return DataProto.from_dict(
        tensors={
            "input_ids": torch.zeros(rows, prompt + tokens, dtype=torch.long),
            "attention_mask": torch.ones(rows, prompt + tokens, dtype=torch.long),
            "responses": torch.zeros(rows, tokens, dtype=torch.long),
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
        },
        non_tensors={
            "rollout_id_list": np.array([f"rollout-{r}" for r in rollout_of_row], dtype=object),
            "uid": np.array([f"prompt-{r // 8}" for r in rollout_of_row], dtype=object),
        },
    )


def constant_estimator(data: DataProto, **_: object) -> DataProto:
    """An estimator that costs nothing beyond writing its outputs, to isolate agl_lab's own work."""
    advantages = data.batch["response_mask"].float()
    data.batch["advantages"] = advantages
    data.batch["returns"] = advantages
    return data


def rollout_level(batch: DataProto, estimator) -> DataProto:
    return compute_rollout_level_advantage(
        batch, adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=1, compute_advantage_fn=estimator
    )[0]


def normalize(batch: DataProto) -> torch.Tensor:
    return normalize_advantages_by_rollout(
        batch.batch["advantages"],
        batch.batch["response_mask"],
        batch.non_tensor_batch["rollout_id_list"],
        num_trained_rows=len(batch),
    )


def agl_lab_path(batch: DataProto, estimator) -> torch.Tensor:
    out = rollout_level(batch, estimator)
    return normalize_advantages_by_rollout(
        out.batch["advantages"],
        out.batch["response_mask"],
        out.non_tensor_batch["rollout_id_list"],
        num_trained_rows=len(out),
    )


def loop_path(batch: DataProto) -> torch.Tensor:
    """The same v1.0 semantics written with Python loops over rows, as a straightforward port would be."""
    rollout_ids = batch.non_tensor_batch["rollout_id_list"]
    uids = batch.non_tensor_batch["uid"]
    mask = batch.batch["response_mask"]
    rewards = batch.batch["token_level_rewards"]
    rows_of: dict = {}
    for i, rollout in enumerate(rollout_ids):
        rows_of.setdefault(rollout, []).append(i)
    sums = rewards.sum(-1)
    for rollout, rows in rows_of.items():
        for i in rows[1:]:
            if uids[i] != uids[rows[0]] or not torch.allclose(sums[i], sums[rows[0]]):
                raise RuntimeError(rollout)
    firsts = [rows[0] for rows in rows_of.values()]
    collapsed = batch[firsts]
    collapsed = compute_advantage(collapsed, adv_estimator="grpo")
    scalar_of = {}
    for j, rollout in enumerate(rows_of):
        values = collapsed.batch["advantages"][j][collapsed.batch["response_mask"][j].bool()]
        if not torch.allclose(values, values[0].expand_as(values)):
            raise RuntimeError(rollout)
        scalar_of[rollout] = values[0]
    advantages = torch.stack([scalar_of[r] for r in rollout_ids]).unsqueeze(-1) * mask
    tokens_of = {rollout: float(mask[rows].sum()) for rollout, rows in rows_of.items()}
    divisors = torch.tensor([max(tokens_of[r] * len(batch), 1.0) for r in rollout_ids])
    return advantages / divisors.unsqueeze(-1)


def timed(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds per function, measured round-robin so that drifts of the machine hit every one alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--rollouts", type=int, default=4_000)
    parser.add_argument("--tokens", type=int, default=1_024)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    batch = make_batch(args.rows, args.rollouts, args.tokens, args.prompt)
    # A new DataProto over the same tensors for every call, so no call sees the fields an earlier one wrote.
    fresh = lambda: DataProto(batch=batch.batch.copy(), non_tensor_batch=dict(batch.non_tensor_batch))  # noqa: E731
    advantages = torch.randn(args.rows, args.tokens)
    mask = batch.batch["response_mask"]

    torch.testing.assert_close(agl_lab_path(fresh(), compute_advantage), loop_path(fresh()))  # same semantics
    with_advantages = rollout_level(fresh(), compute_advantage)
    times = timed(
        {
            "multiply": lambda: advantages * mask,
            "rollout_level": lambda: rollout_level(fresh(), constant_estimator),
            "normalize": lambda: normalize(with_advantages),
            "own": lambda: agl_lab_path(fresh(), constant_estimator),
            "grpo": lambda: agl_lab_path(fresh(), compute_advantage),
            "loop": lambda: loop_path(fresh()),
        },
        args.repeats,
    )
    ms = {name: value * 1e3 for name, value in times.items()}
    ratio = {name: value / ms["multiply"] for name, value in ms.items()}

    print(
        f"agl_lab {agl_lab.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads, huge pages "
        f"{'advised' if huge_pages_advised() else 'not advised'} (agl_lab's default: benchmarks/bench_process_env.py)"
    )
    print(
        f"batch: {args.rows} rows, {args.rollouts} rollouts, {args.tokens} response tokens; "
        f"median of {args.repeats} round-robin runs"
    )
    print(f"  masked multiply (rows x T)                     {ms['multiply']:8.1f} ms   1.00x")
    print(
        f"  rollout-level advantage, constant estimator    {ms['rollout_level']:8.1f} ms   "
        f"{ratio['rollout_level']:4.2f}x   (agl_lab's own work; target <= 3x)"
    )
    print(f"  per_rollout_mean normalization                 {ms['normalize']:8.1f} ms   {ratio['normalize']:4.2f}x")
    print(f"  both together                                  {ms['own']:8.1f} ms   {ratio['own']:4.2f}x")
    print(f"  both with verl's grpo estimator                {ms['grpo']:8.1f} ms")
    print(
        f"  plain-loop version with verl's grpo            {ms['loop']:8.1f} ms   "
        f"agl_lab is {ms['loop'] / ms['grpo']:4.1f}x faster (target >= 5x)"
    )


if __name__ == "__main__":
    main()
