"""The example batch ``agl-lab check`` runs trainer steps 1–5 on: one step of the config's own size.

``data.train_batch_size`` prompts × ``rollout.n`` rollouts, turned into rows by trace aggregation at the config's
level and under its own limits (``agentlightning.trace_aggregator.trajectory_max_*`` at the trajectory level,
``data.max_*`` at the transition level, as Agent Lightning's trainer picks them), so the drop, cap and row counters
show what the config does to one step. What no config says — how many LLM calls the agent makes, how long its
prompts and answers are, how often it succeeds and rewrites its context — is assumed (:data:`ASSUMED`, printed with
the batch); the episodes come from the synthetic generator (:mod:`agl_lab.lab.synthetic`). At the example base's
size (2 prompts × 3 rollouts) the batch is the hand-built one (:func:`agl_lab.lab.examples.example_rows`).

A step too large to run in a second is **sampled**: ``k`` (the smallest divisor of both ``train_batch_size`` and
``ppo_mini_batch_size`` that brings the step to :data:`MAX_ROLLOUTS` rollouts) divides the prompts and the
mini-batch alike, so the step keeps its number of mini-batches, its cap and its drops in proportion (counts × k
for the full step). Token lengths are scaled too: lengths and limits divided by ``t`` (a call's longest answer
keeps a row within :data:`MAX_ROW_TOKENS`), which keeps which rows are cut or dropped, since that depends only on
lengths relative to limits. Both factors are printed. Rows are padded to the (scaled) limits, as Agent Lightning pads
them, so verl's ``*/clip_ratio`` metrics mean what they mean in a real step.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl import DataProto

from agl_lab.core.aggregation import aggregate, aggregation_limits
from agl_lab.core.keys import MINI_BATCH, ROLLOUT_N, TRAIN_BATCH
from agl_lab.lab.examples import example_rows
from agl_lab.lab.synthetic import SyntheticKnobs, knob_range, synthetic_rollouts

__all__ = ["ASSUMED", "MAX_ROLLOUTS", "MAX_ROW_TOKENS", "ExampleBatch", "example_batch", "example_problem"]

MAX_ROLLOUTS = 256  # a larger step is sampled (module docstring)
MAX_ROW_TOKENS = 2048  # a row's width (prompt + response limits) after token scaling
# What the config cannot say, relative to its limits: the synthetic generator's call pattern ("success": 1-3 calls, 2
# more when the rollout fails) and its defaults for success and context rewrites. A call's answer is limited by
# rollout.response_length and, merged into a row, by the aggregator's response limit: the smaller is the call's scale.
ASSUMED = {
    "calls": "1-3 LLM calls per rollout, 2 more when it fails (Agent Lightning's agents set their own turns)",
    "success": "half the rollouts succeed (reward 1, else 0)",
    "rewrites": "a later call rewrites its context (a new row at the trajectory level) 1 time in 5",
    "lengths": "answers of 1/16-1/4 of the smaller of rollout.response_length and the response limit, tool output 1/16 "
    "of it, a first prompt of 1/4 of the prompt limit",
}
_HAND_BUILT = (2, 3)  # example_rows(): 2 prompts x 3 rollouts


@dataclass(frozen=True)
class ExampleBatch:
    """One step's rows for a config, the config to run steps 1–5 with, and what ``check`` prints about them."""

    rows: DataProto
    cfg: DictConfig  # the given config; with a sampled batch, its batch and mini-batch sizes divided by ``sample``
    lines: tuple[str, ...]  # what the batch is: sizes, assumptions, sampling
    sample: int = 1  # 1: the full step; k: 1/k of its prompts and of its mini-batch
    metrics: dict[str, Any] = field(default_factory=dict)  # the trace aggregation's (Agent Lightning's adapter)


def example_problem(cfg: DictConfig) -> str | None:
    """Why no example batch can be made for ``cfg`` (in the config's own keys), or None. Sampling shrinks the prompts
    of a step, never its rollouts per prompt (each GRPO group whole): the generator makes at most its limit."""
    n, most = int(OmegaConf.select(cfg, ROLLOUT_N)), int(knob_range("rollouts_per_prompt")[1])
    if n <= most:
        return None
    return (
        f"{ROLLOUT_N}={n}: the example batch's generator makes at most {most} rollouts per prompt (a GRPO group is "
        f"sampled whole), so steps 1-5 cannot run on one of this size here; the findings above hold as they are"
    )


def example_batch(cfg: DictConfig) -> ExampleBatch:
    """The example batch for ``cfg`` (module docstring): a step of its size, sampled when large; a ValueError (see
    :func:`example_problem`) when it cannot be made."""
    if problem := example_problem(cfg):
        raise ValueError(problem)
    prompts, n = int(cfg.data.train_batch_size), int(OmegaConf.select(cfg, ROLLOUT_N))
    mini = int(OmegaConf.select(cfg, MINI_BATCH))
    if (prompts, n) == _HAND_BUILT:
        rows = example_rows()
        return ExampleBatch(
            rows,
            cfg,
            (
                f"Example batch: the built-in one, {len(rows)} rows from 6 rollouts of 2 prompts (1-3 rows each; "
                f"failing rollouts took more calls): one step of {TRAIN_BATCH}={prompts} x rollout.n={n}",
            ),
        )
    k, exact = _sample_factor(prompts, mini, n)
    sampled_prompts, sampled_mini = max(1, round(prompts / k)), max(1, round(mini / k))
    limits = aggregation_limits(cfg)
    level = "trajectory" if str(limits["level"]).startswith("trajectory") else "transition"
    prompt_limit, response_limit = int(limits["max_prompt_length"]), int(limits["max_response_length"])
    call = min(int(cfg.actor_rollout_ref.rollout.response_length), response_limit)
    t = max(1, math.ceil((prompt_limit + response_limit) / MAX_ROW_TOKENS))
    knobs = SyntheticKnobs(
        n_prompts=sampled_prompts,
        rollouts_per_prompt=n,
        min_tokens=max(1, call // 16 // t),
        max_tokens=max(1, call // 4 // t),
        observation_tokens=call // 16 // t,
        prompt_tokens=max(1, prompt_limit // 4 // t),
        level=level,
        max_prompt_length=max(1, prompt_limit // t),
        max_response_length=max(1, response_limit // t),
    )
    total = limits["max_total_length"]
    rows, metrics = aggregate(
        synthetic_rollouts(knobs),
        level=level,
        max_prompt_length=knobs.max_prompt_length,
        max_response_length=knobs.max_response_length,
        max_total_length=None if total is None else total // t,
        reward_fillna_value=limits["reward_fillna_value"],
    )
    run_cfg = copy.deepcopy(cfg)
    OmegaConf.update(run_cfg, TRAIN_BATCH, sampled_prompts)
    OmegaConf.update(run_cfg, MINI_BATCH, sampled_mini)
    lines = [
        f"Example batch: one step of {TRAIN_BATCH}={prompts} x rollout.n={n} = {prompts * n} rollouts, "
        f"synthetic, aggregated at the {level} level under the config's limits "
        f"(prompt {limits['max_prompt_length']}, response {limits['max_response_length']}"
        + ("" if total is None else f", total {total}")
        + f" tokens): {len(rows)} rows",
        *(f"  assumed: {text}" for text in ASSUMED.values()),
    ]
    if t > 1:
        lines.append(
            f"  tokens scaled by 1/{t}, lengths and limits alike (which rows are cut or dropped is kept, up to "
            f"rounding): token counts below are 1/{t} of a real step's"
        )
    if k > 1:
        lines.append(
            f"  sampled: 1/{k} of the step ({sampled_prompts} of {prompts} prompts, mini-batches of {sampled_mini} "
            f"prompts for {mini}), so the step keeps its mini-batches, cap and drops in proportion"
            + ("" if exact else " (roughly: no whole divisor of both sizes fits)")
            + f": multiply counts by {k}"
        )
    return ExampleBatch(rows, run_cfg, tuple(lines), k, metrics)


def _sample_factor(prompts: int, mini: int, n: int) -> tuple[int, bool]:
    """``(k, exact)``: the smallest k dividing ``prompts`` and ``mini`` with ``prompts / k × n <= MAX_ROLLOUTS``
    (exact), else the smallest k that brings the step there with both sizes rounded (not exact)."""
    common = math.gcd(prompts, max(mini, 1))
    for k in range(1, common + 1):
        if common % k == 0 and prompts // k * n <= MAX_ROLLOUTS:
            return k, True
    return min(math.ceil(prompts * n / MAX_ROLLOUTS), prompts), False  # at least one prompt's rollouts
