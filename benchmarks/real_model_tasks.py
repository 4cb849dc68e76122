"""How the pretrained model plays each task before any training: success at step 0, turns and rows per rollout, and
the merge mismatches its own tokenizer and chat template make.

For each task for a pretrained model (``retry_arith``, ``guess_number``) at the pretrained preset's knobs
(``conf/pretrained.yaml``: task_size 10, up to 3 tries, 32 tokens a call, temperature 1), the untrained
SmolLM2-135M-Instruct plays ``--items`` questions x ``rollout.n`` rollouts (the trainer's own sampler,
:func:`agl_lab.training.rollout.collect_rollouts`), and the trace aggregator (:func:`agl_lab.aggregate`, Agent
Lightning's trajectory level) turns them into rows. Printed per task: the success with its 95% Wilson interval
(statsmodels), the mean turns, rows per rollout, and ``training/n_trace_merge_mismatch_rows`` with the context
rewrites switched off (``lab.rewrite_prob=0``), so every mismatch is the tokenizer's: a chat template that re-renders
the decoded answer as other ids than the model sampled. The figures go to docs/real-model.md.

Run: ``.venv/bin/python benchmarks/real_model_tasks.py [--items 16] [key=value ...]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from statsmodels.stats.proportion import proportion_confint

from agl_lab import short_run_config
from agl_lab.core.aggregation import aggregate, aggregation_limits
from agl_lab.core.keys import N_TRACE_MERGE_MISMATCH_ROWS, N_UNMERGED_ROLLOUTS
from agl_lab.training.policy import build_policy
from agl_lab.training.rollout import collect_rollouts, sampling_params
from agl_lab.training.tasks import task_from_config

TASKS = ("retry_arith", "guess_number")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=16, help="questions per task (x rollout.n rollouts; default 16)")
    parser.add_argument("dotlist", nargs="*", help="more overrides, e.g. lab.task_size=20")
    args = parser.parse_args()
    policy = None
    for name in TASKS:
        cfg = short_run_config(dotlist=["lab.model=smollm2-135m-instruct", f"lab.task={name}", "lab.rewrite_prob=0",
                                        f"data.train_batch_size={args.items}", *args.dotlist])  # fmt: skip
        policy = policy or build_policy(cfg, words=[])  # the untrained model (its fresh LoRA adapter is the identity)
        task, sampling = task_from_config(cfg), sampling_params(cfg)
        items = task.sample_items(step=1, batch_size=args.items)
        generator = torch.Generator().manual_seed(int(cfg.lab.seed))
        rollouts, metrics = collect_rollouts(policy, task, step=1, items=items, sampling=sampling, generator=generator)
        rows, adapter = aggregate(rollouts, **aggregation_limits(cfg), pad_token_id=policy.pad_token_id)
        wins = int(sum(r.reward == 1.0 for r in rollouts))
        low, high = proportion_confint(wins, len(rollouts), alpha=0.05, method="wilson")
        turns = np.array([len(r.calls) for r in rollouts])
        print(f"{name} (task_size {cfg.lab.task_size}, up to {cfg.lab.max_turns} tries, {len(rollouts)} rollouts of "
              f"{args.items} questions): success at step 0 {wins / len(rollouts):.3f} [95% {low:.3f}, {high:.3f}]; "
              f"{turns.mean():.2f} turns and {len(rows) / len(rollouts):.2f} rows per rollout; merge mismatches "
              f"without rewrites {adapter[N_TRACE_MERGE_MISMATCH_ROWS]} in {int(turns.sum() - len(rollouts))} later "
              f"turns ({adapter[N_UNMERGED_ROLLOUTS]} rollouts split); unreadable answers "
              f"{metrics['lab/no_guess_rate']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
