"""One table says which metric has which bounds: counts at 0, rates and shares in [0, 1], the rest unbounded."""

import math

import pytest

from agl_lab.curves.bounds import BOUNDS, metric_bounds


@pytest.mark.parametrize(
    ("metric", "bounds"),
    [
        ("lab/success_rate", (0.0, 1.0)),
        ("lab/multi_row_mass_share", (0.0, 1.0)),
        ("actor/pg_clipfrac_lower", (0.0, 1.0)),
        ("training/n_sample_dropped/same_reward", (0.0, math.inf)),
        ("training/rollout_level_advantage/max_rows_per_rollout", (0.0, math.inf)),
        ("lab/ppo_updates", (0.0, math.inf)),
        ("lab/response_length_failed", (0.0, math.inf)),
        ("response_length/mean", (0.0, math.inf)),
        ("lab/multi_row_overweight", (-1.0, 1.0)),
        ("training/reward", (-math.inf, math.inf)),  # a reward can be any number in a real run
        ("critic/advantages/mean", (-math.inf, math.inf)),
        ("actor/pg_loss", (-math.inf, math.inf)),
    ],
)
def test_metric_bounds(metric, bounds):
    assert metric_bounds(metric) == bounds


def test_every_rule_has_low_below_high_and_names_a_metric_once():
    assert all(low < high for _, low, high in BOUNDS)
    patterns = [pattern for pattern, _, _ in BOUNDS]
    assert len(patterns) == len(set(patterns))
