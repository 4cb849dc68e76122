"""The metric catalogue: each metric's display name, unit and physical range, one table for every figure.

Every figure (matplotlib PNGs and the notebooks' plotly curves) names its axes, legends and hover texts from
:data:`METRICS`, and the bands across seeds (:mod:`agl_lab.curves.bands`) cut their intervals at its bounds, so no
figure shows a negative drop count or a success rate above 1. Rules are ``fnmatch`` patterns over metric names, the
first match wins; a metric no rule names keeps its own name, the unit "as logged" and no bounds (a reward, an
advantage, a loss can be any number). Why cutting is honest: the true mean of a bounded metric lies within its
bounds, so an interval cut at them still holds it whenever the uncut one did (same coverage) and shows no impossible
value. What each metric means: the docs' metrics page (docs/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from agl_lab.core.keys import (
    ACTOR_ENTROPY,
    ACTOR_GRAD_NORM,
    ACTOR_LR,
    ACTOR_PG_CLIPFRAC,
    ACTOR_PG_CLIPFRAC_LOWER,
    ACTOR_PG_LOSS,
    ACTOR_PPO_KL,
    CONTEXT_REWRITES,
    CRITIC_N_TRANSITION_AFTER_DROPPING,
    CRITIC_SCORE_MEAN,
    GENERATED_TOKENS,
    LOSS_SCALE,
    LOSS_SCALE_PER_MINI_BATCH,
    MEAN_TURNS,
    MULTI_ROW_MASS_SHARE,
    MULTI_ROW_OVERWEIGHT,
    MULTI_ROW_ROLLOUT_SHARE,
    N_GROUPS,
    N_ROLLOUTS,
    N_SAMPLE,
    N_SAMPLE_COLLECTED,
    N_SAMPLE_DROPPED_MARKED,
    N_SAMPLE_DROPPED_RANDOM,
    N_SAMPLE_DROPPED_SAME_REWARD,
    N_SAMPLE_TRAINED,
    N_SKIPPED_EMPTY_ROWS,
    N_TRACE_MERGE_MISMATCH_ROWS,
    N_TRUNCATED_SAMPLE,
    N_TURNS,
    N_UNMERGED_ROLLOUTS,
    N_ZERO_ADV_GROUPS,
    NO_GUESS_RATE,
    PPO_UPDATES,
    REWARD,
    ROLLOUT_LEVEL_MAX_ROWS_PER_ROLLOUT,
    ROLLOUT_LEVEL_N_MULTI_ROW_ROLLOUTS,
    ROLLOUT_LEVEL_N_ROLLOUTS,
    ROLLOUT_LEVEL_N_ROWS,
    SUCCESS_RATE,
    TRAJECTORY_LOGICAL_SESSIONS,
    TRAJECTORY_SEGMENTS_PER_SESSION_MEAN,
    TRAJECTORY_STORED_ROWS,
    VAL_AUX,
    VAL_CORE,
    VAL_CORE_REWARD,
    VAL_ITEMS_HELD_OUT,
)

__all__ = ["AS_LOGGED", "METRICS", "Metric", "axis_label", "metric_bounds", "metric_info"]

_INF = float("inf")
AS_LOGGED = "as logged"  # the unit of a metric the catalogue does not know


@dataclass(frozen=True)
class Metric:
    """How a metric is shown: ``name`` (the quantity, for legends and hover), ``unit`` (for axes), its range."""

    pattern: str
    name: str
    unit: str
    low: float = -_INF
    high: float = _INF


def _count(pattern: str, name: str, unit: str) -> Metric:
    return Metric(pattern, name, unit, 0.0, _INF)


def _share(pattern: str, name: str, unit: str) -> Metric:
    return Metric(pattern, name, unit, 0.0, 1.0)


# First match wins: exact names first, then the families (training/n_*, response_length/*, ...).
METRICS: tuple[Metric, ...] = (
    _share(SUCCESS_RATE, "success rate", "share of rollouts"),
    _share(NO_GUESS_RATE, "answers without a code", "share of rollouts"),
    _share(MULTI_ROW_ROLLOUT_SHARE, "multi-row rollouts", "share of trained rollouts"),
    _share(MULTI_ROW_MASS_SHARE, "multi-row rollouts' gradient mass", "share of the step's mass"),
    Metric(MULTI_ROW_OVERWEIGHT, "mass share − rollout share", "difference of shares", -1.0, 1.0),
    _share(ACTOR_PG_CLIPFRAC, "clipped fraction", "share of tokens"),
    _share(ACTOR_PG_CLIPFRAC_LOWER, "dual-clipped fraction", "share of tokens"),
    Metric(REWARD, "mean reward per rollout", "reward"),
    # verl's held-out evaluation (agl_lab.training.validation; greedy, on lab.heldout_size items): a lab task's reward
    # is its success, so its val-core reward is the share of the items solved; a real run's reward has its own range
    Metric(VAL_CORE_REWARD, "held-out reward, greedy", "mean reward per item"),
    _share(VAL_ITEMS_HELD_OUT, "evaluated items held out of training", "1 = held out, 0 = training items"),
    _count(f"{VAL_AUX}/num_turns/*", "held-out messages per episode", "messages"),
    Metric(f"{VAL_CORE}/*", "held-out (val-core)", AS_LOGGED),
    Metric(f"{VAL_AUX}/*", "held-out (val-aux)", AS_LOGGED),
    Metric(CRITIC_SCORE_MEAN, "mean score per row (k rows count k times)", "reward"),
    _count(N_SAMPLE, "rows", "rows"),
    _count(N_ROLLOUTS, "rollouts", "rollouts"),
    _count(N_TURNS, "LLM calls", "calls"),
    _count(N_SAMPLE_COLLECTED, "rows collected", "rows"),
    _count(N_SAMPLE_DROPPED_SAME_REWARD, "rows dropped from same-reward groups", "rows"),
    _count(N_SAMPLE_DROPPED_RANDOM, "rows dropped at random", "rows"),
    _count(N_SAMPLE_DROPPED_MARKED, "marked rows dropped", "rows"),
    _count(N_SAMPLE_TRAINED, "rows trained", "rows"),
    _count(CRITIC_N_TRANSITION_AFTER_DROPPING, "rows trained", "rows"),
    _count(N_TRUNCATED_SAMPLE, "rows truncated", "rows"),
    _count(N_SKIPPED_EMPTY_ROWS, "empty rows skipped", "rows"),
    _count(N_UNMERGED_ROLLOUTS, "multi-row rollouts", "rollouts"),
    _count(N_TRACE_MERGE_MISMATCH_ROWS, "calls that broke their context", "calls"),
    _count(N_GROUPS, "GRPO groups trained", "groups"),
    _count(N_ZERO_ADV_GROUPS, "groups with one reward", "groups"),
    _count("training/n_rollouts_w_*", "rollouts with a trace or reward", "rollouts"),
    _count(ROLLOUT_LEVEL_N_ROWS, "rows in the advantage step", "rows"),
    _count(ROLLOUT_LEVEL_N_ROLLOUTS, "rollouts in the advantage step", "rollouts"),
    _count(ROLLOUT_LEVEL_N_MULTI_ROW_ROLLOUTS, "multi-row rollouts", "rollouts"),
    _count(ROLLOUT_LEVEL_MAX_ROWS_PER_ROLLOUT, "most rows of one rollout", "rows"),
    _count("training/n_*", "count", "count"),
    # verl PR #7580's names, logged by agl_lab's recorder on an Agent Lightning run (a session = a rollout)
    _count(TRAJECTORY_STORED_ROWS, "rows trained", "rows"),
    _count(TRAJECTORY_LOGICAL_SESSIONS, "rollouts trained", "rollouts"),
    _count(TRAJECTORY_SEGMENTS_PER_SESSION_MEAN, "rows per rollout", "rows"),
    _count("training/trajectory/loss_weight/*", "row weight (mean 1)", "× a row-equal objective's"),
    _count("training/rollout_level_advantage/*", "count", "count"),
    _count(PPO_UPDATES, "PPO mini-batch updates", "updates"),
    _count(MEAN_TURNS, "LLM calls per rollout", "calls"),
    _count(CONTEXT_REWRITES, "context rewrites", "rewrites"),
    _count(GENERATED_TOKENS, "tokens sampled", "tokens"),
    _count("lab/response_length_*", "tokens per LLM call", "tokens"),
    _count(LOSS_SCALE_PER_MINI_BATCH, "loss scale per PPO mini-batch", "Σ token weights"),
    _count(LOSS_SCALE, "loss scale per step", "Σ token weights"),
    Metric("critic/score/*", "score per row", "reward"),
    Metric("critic/rewards/*", "reward per row", "reward"),
    Metric("critic/advantages/*", "advantage", "advantage"),
    Metric("critic/returns/*", "return", "reward"),
    _count("response_length/*", "response length", "tokens"),
    _count("response_length_non_aborted/*", "response length", "tokens"),
    _count("prompt_length/*", "prompt length", "tokens"),
    _share("response/aborted_ratio", "aborted responses", "share of rows"),
    _count(ACTOR_ENTROPY, "entropy", "nats per token"),
    Metric(ACTOR_PPO_KL, "KL to the old policy", "nats per token"),
    Metric(ACTOR_PG_LOSS, "policy loss", "loss per mini-batch"),
    _count(ACTOR_GRAD_NORM, "gradient norm", "L2 norm"),
    _count(ACTOR_LR, "learning rate", "per update"),
    _count("timing_s/*", "wall time", "s"),
    _count("perf/*", "performance", AS_LOGGED),
)


def metric_info(metric: str) -> Metric:
    """The catalogue's entry for ``metric`` (its name refined by the pattern's tail, e.g. ``response length: max``);
    a metric no rule names keeps its own name, unit "as logged" and no bounds."""
    for entry in METRICS:
        if fnmatchcase(metric, entry.pattern):
            if "*" not in entry.pattern:
                return entry
            tail = metric[len(entry.pattern.split("*", 1)[0]) :]
            return Metric(metric, f"{entry.name}: {tail}" if tail else entry.name, entry.unit, entry.low, entry.high)
    return Metric(metric, metric, AS_LOGGED)


def metric_bounds(metric: str) -> tuple[float, float]:
    """``(low, high)`` of ``metric``'s values; ``(-inf, inf)`` for a metric no rule of :data:`METRICS` names."""
    entry = metric_info(metric)
    return entry.low, entry.high


def axis_label(metric: str) -> str:
    """``name (unit)``: the axis label of one metric."""
    entry = metric_info(metric)
    return f"{entry.name} ({entry.unit})"
