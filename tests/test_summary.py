"""One line per setting from a long-form table: success early and late, rows, drops, updates, over seeds."""

import numpy as np
import pandas as pd
import pytest

from agl_lab.curves.history import long_form
from agl_lab.curves.summary import markdown_table, success_first_last, summarize


def history(success, *, trained=64):
    n = len(success)
    return pd.DataFrame(
        {
            "step": range(1, n + 1),
            "lab/success_rate": success,
            "training/n_sample": [96] * n,
            "training/n_rollouts": [64] * n,
            "training/n_sample_trained": [trained] * n,
            "training/n_sample_dropped/same_reward": [20] * n,
            "training/n_sample_dropped/random": [12] * n,
            "lab/ppo_updates": [trained // 32] * n,
        }
    )


def test_summary_has_one_line_per_setting_averaged_over_seeds():
    table = pd.concat(
        [
            long_form(history([0.1, 0.2, 0.3, 0.4, 0.9]), setting="on", seed=0),
            long_form(history([0.3, 0.2, 0.3, 0.4, 0.7]), setting="on", seed=1),
            long_form(history([0.0] * 5, trained=32), setting="off", seed=0),
        ]
    )
    summary = summarize(table).set_index("setting")
    assert summary.index.tolist() == ["on", "off"]  # in the table's order
    on = summary.loc["on"]
    assert on["n_seeds"] == 2 and on["steps"] == 5
    # 5 steps: 20% = 1 step at each end; seeds (0.1, 0.9) and (0.3, 0.7) → means 0.2 and 0.8
    assert (on["success_first_20pct"], on["success_last_20pct"]) == pytest.approx((0.2, 0.8))
    assert on["rows_per_rollout"] == pytest.approx(1.5)  # 96 rows / 64 rollouts
    assert on["updates_per_step"] == pytest.approx(2.0)
    assert (on["dropped_same_reward"], on["dropped_random"]) == (100, 60)  # summed over a run's steps
    assert summary.loc["off", "updates_per_step"] == pytest.approx(1.0)


def test_success_first_last_takes_at_least_one_step():
    assert success_first_last([0.5, 1.0]) == (0.5, 1.0)


def test_markdown_table_has_a_header_a_rule_and_one_line_per_row():
    table = markdown_table(
        pd.DataFrame({"setting": ["a", "b", "c"], "x": [0.123456, 2.0, 1103.0], "y": [80.84, 1.0, float("nan")]})
    )
    assert table.splitlines() == [
        "| setting | x | y |",
        "|---|---|---|",
        "| a | 0.123 | 80.8 |",
        "| b | 2 | 1 |",
        "| c | 1103 | nan |",  # no exponent form (1.1e+03)
    ]


def test_numbers_are_never_in_exponent_form():
    from agl_lab.curves.summary import number

    # the CLI's and summary.md's tables: 1164 dropped rows read 1164, not 1.16e+03
    assert [number(v) for v in (1164.0, 64.0, 2.5799, 0.000123, float("nan"), "both_on")] == [
        "1164", "64", "2.58", "0.000123", "nan", "both_on",
    ]  # fmt: skip


def test_the_windows_of_a_runs_steps_are_defined_once():
    from agl_lab.curves.summary import WINDOWS, window_mean

    values = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, float("nan")]  # 10 steps: 20% = 2 steps
    assert window_mean(values, "first_20pct") == 0.5
    assert window_mean(values, "last_20pct") == 8.0  # the NaN step is left out of its window
    assert window_mean(values, "all") == 4.0
    assert window_mean(values, "last_minus_first") == 7.5
    assert np.isnan(window_mean([1.0, float("nan")], "last_20pct"))  # nothing finite: NaN, and no warning
    assert success_first_last(values) == (0.5, 8.0)
    with pytest.raises(ValueError, match=r"window must be one of \['first_20pct', 'last_20pct', 'all', 'last_minus"):
        window_mean(values, "middle")
    assert list(WINDOWS) == ["first_20pct", "last_20pct", "all", "last_minus_first", "final", "auc"]


def test_the_final_value_and_the_area_under_a_curve_logged_at_some_steps():
    from agl_lab.curves.summary import window_mean

    nan = float("nan")
    held_out = [0.2, nan, nan, 0.4, nan, 0.6]  # evaluated at steps 0, 3 and 5
    assert window_mean(held_out, "final") == 0.6
    # trapezoid: (0.2 + 0.4) / 2 · 3 + (0.4 + 0.6) / 2 · 2 = 1.9 over a span of 5 steps
    assert window_mean(held_out, "auc") == pytest.approx(0.38)
    # the same values at steps 0, 30 and 50: the area is over the steps given, not the positions
    assert window_mean(held_out, "auc", steps=np.array([0, 10, 20, 30, 40, 50])) == pytest.approx(0.38)
    assert window_mean([0.2, 0.4, 0.6], "auc", steps=np.array([0, 1, 5])) == pytest.approx((0.3 + 0.5 * 4) / 5)
    assert np.isnan(window_mean([nan, 0.5], "auc")) and np.isnan(window_mean([nan], "final"))  # one value: no area
