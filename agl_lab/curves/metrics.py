"""The metric catalogue: each metric's display name, unit and physical range, one table for every figure.

Every figure (matplotlib PNGs and the notebooks' plotly curves) names its axes, legends and hover texts from
:data:`METRICS`, and the bands across seeds (:mod:`agl_lab.curves.bands`) cut their intervals at its bounds, so no
figure shows a negative drop count or a success rate above 1. Rules are ``fnmatch`` patterns over metric names, the
first match wins; a metric no rule names keeps its own name, the unit "as logged" and no bounds (a reward, an
advantage, a loss can be any number). Why cutting is honest: the true mean of a bounded metric lies within its
bounds, so an interval cut at them still holds it whenever the uncut one did (same coverage) and shows no impossible
value. What each metric means: the README's metrics table.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

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
    _share("lab/success_rate", "success rate", "share of rollouts"),
    _share("lab/no_guess_rate", "answers without a code", "share of rollouts"),
    _share("lab/multi_row_rollout_share", "multi-row rollouts", "share of trained rollouts"),
    _share("lab/multi_row_mass_share", "multi-row rollouts' gradient mass", "share of the step's mass"),
    Metric("lab/multi_row_overweight", "mass share − rollout share", "difference of shares", -1.0, 1.0),
    _share("actor/pg_clipfrac", "clipped fraction", "share of tokens"),
    _share("actor/pg_clipfrac_lower", "dual-clipped fraction", "share of tokens"),
    Metric("training/reward", "mean reward per rollout", "reward"),
    Metric("critic/score/mean", "mean score per row (k rows count k times)", "reward"),
    _count("training/n_sample", "rows", "rows"),
    _count("training/n_rollouts", "rollouts", "rollouts"),
    _count("training/n_turns", "LLM calls", "calls"),
    _count("training/n_sample_collected", "rows collected", "rows"),
    _count("training/n_sample_dropped/same_reward", "rows dropped from same-reward groups", "rows"),
    _count("training/n_sample_dropped/random", "rows dropped at random", "rows"),
    _count("training/n_sample_dropped/marked", "marked rows dropped", "rows"),
    _count("training/n_sample_trained", "rows trained", "rows"),
    _count("critic/n_transition_after_dropping", "rows trained", "rows"),
    _count("training/n_truncated_sample", "rows truncated", "rows"),
    _count("training/n_skipped_empty_rows", "empty rows skipped", "rows"),
    _count("training/n_unmerged_rollouts", "multi-row rollouts", "rollouts"),
    _count("training/n_trace_merge_mismatch_rows", "calls that broke their context", "calls"),
    _count("training/n_groups", "GRPO groups trained", "groups"),
    _count("training/n_zero_adv_groups", "groups with one reward", "groups"),
    _count("training/n_rollouts_w_*", "rollouts with a trace or reward", "rollouts"),
    _count("training/rollout_level_advantage/n_rows", "rows in the advantage step", "rows"),
    _count("training/rollout_level_advantage/n_rollouts", "rollouts in the advantage step", "rollouts"),
    _count("training/rollout_level_advantage/n_multi_row_rollouts", "multi-row rollouts", "rollouts"),
    _count("training/rollout_level_advantage/max_rows_per_rollout", "most rows of one rollout", "rows"),
    _count("training/n_*", "count", "count"),
    # verl PR #7580's names, logged by agl_lab's recorder on an Agent Lightning run (a session = a rollout)
    _count("training/trajectory/stored_rows", "rows trained", "rows"),
    _count("training/trajectory/logical_sessions", "rollouts trained", "rollouts"),
    _count("training/trajectory/segments_per_session/mean", "rows per rollout", "rows"),
    _count("training/trajectory/loss_weight/*", "row weight (mean 1)", "× a row-equal objective's"),
    _count("training/rollout_level_advantage/*", "count", "count"),
    _count("lab/ppo_updates", "PPO mini-batch updates", "updates"),
    _count("lab/mean_turns", "LLM calls per rollout", "calls"),
    _count("lab/context_rewrites", "context rewrites", "rewrites"),
    _count("lab/generated_tokens", "tokens sampled", "tokens"),
    _count("lab/response_length_*", "tokens per LLM call", "tokens"),
    _count("lab/loss_scale_per_mini_batch", "loss scale per PPO mini-batch", "Σ token weights"),
    _count("lab/loss_scale", "loss scale per step", "Σ token weights"),
    Metric("critic/score/*", "score per row", "reward"),
    Metric("critic/rewards/*", "reward per row", "reward"),
    Metric("critic/advantages/*", "advantage", "advantage"),
    Metric("critic/returns/*", "return", "reward"),
    _count("response_length/*", "response length", "tokens"),
    _count("response_length_non_aborted/*", "response length", "tokens"),
    _count("prompt_length/*", "prompt length", "tokens"),
    _share("response/aborted_ratio", "aborted responses", "share of rows"),
    _count("actor/entropy", "entropy", "nats per token"),
    Metric("actor/ppo_kl", "KL to the old policy", "nats per token"),
    Metric("actor/pg_loss", "policy loss", "loss per mini-batch"),
    _count("actor/grad_norm", "gradient norm", "L2 norm"),
    _count("actor/lr", "learning rate", "per update"),
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
