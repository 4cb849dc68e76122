"""The physical range of each metric: counts are never negative, rates and shares lie in [0, 1].

One table (:data:`BOUNDS`) says which metric has which bounds; the bands across seeds (:mod:`agl_lab.curves.bands`)
cut their intervals there, so no figure shows a negative drop count or a success rate above 1. Rules are
``fnmatch`` patterns over metric names, the first match wins; a metric no rule names is unbounded (a reward, an
advantage, a loss can be any number). Why cutting is honest: the true mean of a bounded metric lies within its
bounds, so an interval cut at them still holds it whenever the uncut one did (same coverage) and shows no
impossible value.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

__all__ = ["BOUNDS", "metric_bounds"]

_INF = float("inf")

# (pattern, low, high), first match wins: rates and shares first, then the counts, lengths and sizes.
BOUNDS: tuple[tuple[str, float, float], ...] = (
    ("lab/success_rate", 0.0, 1.0),
    ("lab/no_guess_rate", 0.0, 1.0),
    ("lab/multi_row_rollout_share", 0.0, 1.0),
    ("lab/multi_row_mass_share", 0.0, 1.0),
    ("lab/multi_row_overweight", -1.0, 1.0),  # a difference of two shares
    ("actor/pg_clipfrac*", 0.0, 1.0),
    ("training/n_*", 0.0, _INF),  # rows, rollouts, turns, drops (training/n_sample_dropped/*), groups
    ("training/rollout_level_advantage/*", 0.0, _INF),
    ("critic/n_transition_after_dropping", 0.0, _INF),
    ("lab/ppo_updates", 0.0, _INF),
    ("lab/mean_turns", 0.0, _INF),
    ("lab/context_rewrites", 0.0, _INF),
    ("lab/generated_tokens", 0.0, _INF),
    ("lab/response_length_*", 0.0, _INF),
    ("lab/loss_scale*", 0.0, _INF),
    ("response_length/*", 0.0, _INF),
    ("prompt_length/*", 0.0, _INF),
    ("actor/entropy", 0.0, _INF),
    ("actor/grad_norm", 0.0, _INF),
    ("actor/lr", 0.0, _INF),
    ("timing_s/*", 0.0, _INF),
    ("perf/*", 0.0, _INF),
)


def metric_bounds(metric: str) -> tuple[float, float]:
    """``(low, high)`` of ``metric``'s values; ``(-inf, inf)`` for a metric no rule of :data:`BOUNDS` names."""
    for pattern, low, high in BOUNDS:
        if fnmatchcase(metric, pattern):
            return low, high
    return -_INF, _INF
