"""The metric catalogue: each metric's name, unit and bounds (counts at 0, rates and shares in [0, 1], the rest
unbounded)."""

import math

import pytest

from agl_lab.curves.metrics import AS_LOGGED, METRICS, axis_label, metric_bounds, metric_info


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


def test_every_rule_has_low_below_high_a_unit_and_names_a_metric_once():
    assert all(m.low < m.high and m.name and m.unit for m in METRICS)
    patterns = [m.pattern for m in METRICS]
    assert len(patterns) == len(set(patterns))


@pytest.mark.parametrize(
    ("metric", "label"),
    [
        ("lab/success_rate", "success rate (share of rollouts)"),
        ("training/n_sample_dropped/same_reward", "rows dropped from same-reward groups (rows)"),
        ("response_length/max", "response length: max (tokens)"),  # a family's name refined by the metric's tail
        ("timing_s/step", "wall time: step (s)"),
        ("my/own_metric", f"my/own_metric ({AS_LOGGED})"),  # unknown: its own name, no claimed unit
    ],
)
def test_axis_label_names_the_quantity_and_its_unit(metric, label):
    assert axis_label(metric) == label


def test_an_unknown_metric_keeps_its_name_and_has_no_bounds():
    entry = metric_info("my/own_metric")
    assert (entry.name, entry.unit, entry.low, entry.high) == ("my/own_metric", AS_LOGGED, -math.inf, math.inf)
