"""How the pretrained model plays each task before any training, beside what a policy that never reads the task wins:
success at step 0, blind sweeps and echoes, turns and rows per rollout, and the merge mismatches its own tokenizer and
chat template make.

For each task for a pretrained model (``retry_arith``, ``guess_number``, ``arith_workflow``) at its pretrained preset's
knobs (``conf/pretrained.yaml`` then ``conf/pretrained_<task>.yaml``; 32 tokens a call, temperature 1), or at the
settings given with ``--setting task:task_size:max_turns``, the untrained SmolLM2-135M-Instruct plays ``--items``
questions x ``rollout.n`` rollouts (the trainer's own sampler, :func:`agl_lab.training.rollout.collect_rollouts`), and
the trace aggregator (:func:`agl_lab.aggregate`) turns them into rows at Agent Lightning's trajectory level and at the
transition level. Printed per setting: the success with its 95% Wilson interval (statsmodels); the blind players'
exact success at the same knobs (:mod:`agl_lab.training.blind_play`: the best blind sweep, the likeliest answer
repeated, the prompt or the last feedback echoed); the mean turns; rows per rollout at both levels; the unreadable and
the cut-off answers; and ``training/n_trace_merge_mismatch_rows`` with the context rewrites switched off
(``lab.rewrite_prob=0``), so every mismatch is the tokenizer's (or, for ``arith_workflow``, its fresh prompts'). The
figures go to docs/real-model.md.

Run: ``.venv/bin/python benchmarks/real_model_tasks.py [--items 16] [--setting retry_arith:20:2 ...] [key=value ...]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from omegaconf import OmegaConf
from statsmodels.stats.proportion import proportion_confint

from agl_lab import short_run_config
from agl_lab.config.lab_config import PRETRAINED_TASKS
from agl_lab.core.aggregation import aggregate, aggregation_limits
from agl_lab.core.keys import N_TRACE_MERGE_MISMATCH_ROWS, N_UNMERGED_ROLLOUTS
from agl_lab.training.blind_play import blind_results
from agl_lab.training.policy import build_policy
from agl_lab.training.rollout import collect_rollouts, sampling_params
from agl_lab.training.tasks import task_from_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=16, help="questions a setting (x rollout.n rollouts; default 16)")
    parser.add_argument("--setting", action="append", default=[],
                        help="task:task_size:max_turns (repeatable; default: each task at its preset)")  # fmt: skip
    parser.add_argument("dotlist", nargs="*", help="more overrides, e.g. lab.seed=1")
    args = parser.parse_args()
    settings = [s.split(":") for s in args.setting] or [[name] for name in PRETRAINED_TASKS]
    policy = None
    for setting in settings:
        knobs = [f"lab.task={setting[0]}"] + ([f"lab.task_size={setting[1]}", f"lab.max_turns={setting[2]}"]
                                              if len(setting) == 3 else [])  # fmt: skip
        cfg = short_run_config(dotlist=["lab.model=smollm2-135m-instruct", *knobs, "lab.rewrite_prob=0",
                                        f"data.train_batch_size={args.items}", *args.dotlist])  # fmt: skip
        policy = policy or build_policy(cfg, words=[])  # the untrained model (its fresh LoRA adapter is the identity)
        task, sampling = task_from_config(cfg), sampling_params(cfg)
        items = task.sample_items(step=1, batch_size=args.items)
        generator = torch.Generator().manual_seed(int(cfg.lab.seed))
        started = time.perf_counter()
        rollouts, metrics = collect_rollouts(policy, task, step=1, items=items, sampling=sampling, generator=generator)
        seconds = time.perf_counter() - started
        rows, adapter = aggregate(rollouts, **aggregation_limits(cfg), pad_token_id=policy.pad_token_id)
        at_transition = OmegaConf.merge(cfg, {"agentlightning": {"trace_aggregator": {"level": "transition"}}})
        transition, _ = aggregate(rollouts, **aggregation_limits(at_transition), pad_token_id=policy.pad_token_id)
        wins = int(sum(r.reward == 1.0 for r in rollouts))
        low, high = proportion_confint(wins, len(rollouts), alpha=0.05, method="wilson")
        turns = np.array([len(r.calls) for r in rollouts])
        cut = np.mean([c.response_ids[-1] != policy.eos_token_id for r in rollouts for c in r.calls])
        blind = blind_results(task)
        best_blind = max(blind["sweep"].success, blind["repeat"].success)
        echo = max(blind["echo_prompt"].success, blind["echo_feedback"].success)
        print(f"{setting[0]} (task_size {cfg.lab.task_size}, up to {cfg.lab.max_turns} calls, {len(rollouts)} rollouts "
              f"of {args.items} questions, {seconds:.0f} s): success at step 0 {wins / len(rollouts):.3f} [95% "
              f"{low:.3f}, {high:.3f}]; blind sweep {blind['sweep'].success:.3f}, likeliest repeated "
              f"{blind['repeat'].success:.3f} (best blind {best_blind:.3f}), echo {echo:.3f}; {turns.mean():.2f} "
              f"turns, {len(rows) / len(rollouts):.2f} rows per rollout (trajectory), "
              f"{len(transition) / len(rollouts):.2f} (transition); merge mismatches without rewrites "
              f"{adapter[N_TRACE_MERGE_MISMATCH_ROWS]} in {int(turns.sum() - len(rollouts))} later turns "
              f"({adapter[N_UNMERGED_ROLLOUTS]} rollouts split); unreadable answers "
              f"{metrics['lab/no_guess_rate']:.3f}, cut off {cut:.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
