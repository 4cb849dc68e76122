"""Verdict lines and the effects files: what a researcher reads after a sweep (printing and saving: test_cli)."""

import math
import re

import pandas as pd
import pytest
from test_effects import long_table

from agl_lab.curves.effects import EFFECT_COLUMNS, compare_settings
from agl_lab.curves.verdicts import effects_markdown, effects_text, save_effects, verdict


def row(**values):
    base = {"setting": "both_on", "baseline": "both_off", "metric": "lab/success_rate", "n_pairs": 3}
    base |= {"mean_diff": 0.06, "sd_diff": 0.032, "ci_low": -0.02, "ci_high": 0.14, "p_value": 0.12, "seeds_needed": 9}
    return base | values


@pytest.mark.parametrize(
    ("values", "line"),
    [
        ({}, "both_on − both_off: +0.06 [−0.02, +0.14], p=0.12, n=3 pairs; ~9 pairs would resolve it"),
        ({"ci_low": 0.01, "p_value": 0.031}, "both_on − both_off: +0.06 [+0.01, +0.14], p=0.031, n=3 pairs; the 95% "
         "interval excludes 0"),
        ({"p_value": 0.0001, "ci_low": 0.05}, "both_on − both_off: +0.06 [+0.05, +0.14], p<0.001, n=3 pairs; the 95% "
         "interval excludes 0"),
        ({"n_pairs": 1, "sd_diff": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan,
          "seeds_needed": math.nan}, "both_on − both_off: +0.060 from 1 pair: need ≥ 2 seeds per setting"),
        ({"n_pairs": 0, "mean_diff": math.nan}, "both_on − both_off: no pair: need ≥ 2 seeds per setting"),
        ({"mean_diff": 0.0, "sd_diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": math.nan,
          "seeds_needed": math.inf}, "both_on − both_off: +0 [+0, +0], p=n/a, n=3 pairs; no pair differs"),
        ({"mean_diff": 1e-17, "sd_diff": 2e-17, "ci_low": -3e-17, "ci_high": 4e-17, "p_value": 0.4},
         "both_on − both_off: +0 [+0, +0], p=0.40, n=3 pairs; ~9 pairs would resolve it"),  # float noise: 0
        ({"mean_diff": 0.0, "seeds_needed": math.inf, "p_value": 1.0}, "both_on − both_off: +0.00 [−0.02, +0.14], "
         "p=1.00, n=3 pairs; a mean of exactly 0: no number of pairs would resolve it"),
        ({"mean_diff": 392.0, "ci_low": 120.5, "ci_high": 663.2, "p_value": 0.02}, "both_on − both_off: +392 [+120, "
         "+663], p=0.02, n=3 pairs; the 95% interval excludes 0"),
        ({"baseline": "0", "metric": "m"}, "both_on (m): +0.06 [−0.02, +0.14], p=0.12, n=3 runs; ~9 runs would resolve "
         "it"),
    ],
)  # fmt: skip
def test_verdict_lines(values, line):
    assert verdict(row(**values)) == line


def test_numbers_are_never_in_exponent_form():
    line = verdict(row(mean_diff=3.2e-7, ci_low=-1.1e-6, ci_high=1.7e-6))
    # 2 significant digits of the largest number, all in fixed form
    assert not re.search(r"\de[+-]\d", line) and "+0.0000003 [−0.0000011, +0.0000017]" in line


def test_the_effects_files_and_the_cli_text(tmp_path):
    table = long_table({("both_off", s): [0.1 * s, 0.2] for s in range(3)} | {("both_on", 0): [0.5, 0.9]})
    with pytest.warns(UserWarning):
        effects = compare_settings(table, baseline="both_off", metric="m")
    paths = save_effects(effects, tmp_path / "out")
    assert sorted(paths) == ["effects.csv", "effects.md"]
    assert pd.read_csv(paths["effects.csv"]).columns.tolist() == [*EFFECT_COLUMNS, "method"]
    text = paths["effects.md"].read_text()
    assert text.startswith("# Effects vs both_off\n") and "scipy.stats.ttest_rel" in text
    assert "| setting | baseline | metric | n_pairs |" in text
    assert "- both_on − both_off: +0.70 from 1 pair: need ≥ 2 seeds per setting" in text
    assert "Left out (no pair): both_on: [1, 2]" in text
    assert effects_markdown(effects) == text
    assert effects_text(effects).splitlines() == [
        "Effects on m (per run, the mean over the last 20% of the run's steps; paired by seed, 95% t-interval):",
        "  both_on − both_off: +0.70 from 1 pair: need ≥ 2 seeds per setting",
    ]
