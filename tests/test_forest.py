"""The forest plot: a panel per metric, a line per setting with its interval, hollow where one pair says nothing."""

import numpy as np
import pytest
from test_effects import long_table

from agl_lab.curves.effects import compare_metrics
from agl_lab.curves.forest import plot_forest


def test_a_panel_per_metric_a_line_per_setting_and_honest_labels():
    rng = np.random.default_rng(0)
    values = {
        (s, seed): rng.normal(i, 1, 5).tolist() for i, s in enumerate(("both_off", "both_on")) for seed in range(3)
    }
    values[("one_seed", 0)] = [0.5] * 5
    with pytest.warns(UserWarning):
        effects = compare_metrics(long_table(values), baseline="both_off", metrics=["m", "other"])
    assert effects.attrs["unpaired_seeds"] == {"one_seed, m": [1, 2], "one_seed, other": [1, 2]}
    fig = plot_forest(effects)
    axes = fig.get_axes()
    # the metric's name and unit from the catalogue (these two are unknown to it: "as logged")
    assert [ax.get_xlabel() for ax in axes] == ["difference in m (as logged)", "difference in other (as logged)"]
    assert [ax.get_ylabel() for ax in axes] == ["setting − baseline"] * 2
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["both_on − both_off", "one_seed − both_off"]
    notes = [t.get_text() for t in axes[0].texts]
    assert notes[0].startswith("n=3, p=") and notes[1] == "n=1: need ≥ 2 seeds per setting"
    interval = [line for line in axes[0].get_lines() if len(line.get_xdata()) == 2 and line.get_ydata()[0] == 0]
    on = effects.iloc[0]
    assert list(interval[0].get_xdata()) == pytest.approx([on.ci_low, on.ci_high])
    assert "95% t-intervals" in fig.get_suptitle()


def test_nothing_to_draw_is_an_error():
    with pytest.raises(ValueError, match="no effects to draw"):
        plot_forest(compare_metrics(long_table({("a", 0): [1.0]}), baseline="a", metrics=["m"]))
