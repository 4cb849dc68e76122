"""The demo is a sweep with one seed: its summary adds each setting's wall time (the real runs: test_cli)."""

from pathlib import Path

import pandas as pd
import pytest
from test_summary import history

from agl_lab.curves.history import long_form
from agl_lab.studies.demo import demo_summary
from agl_lab.studies.sweep import SweepResult


def test_demo_summary_adds_each_settings_wall_time():
    table = pd.concat(
        [long_form(history([0.0, 1.0]), setting="both_on", seed=0), long_form(history([0.0, 0.0]), setting="x", seed=0)]
    )
    cells = pd.DataFrame({"setting": ["both_on", "x"], "seed": [0, 0], "wall_s": [12.3, None]})
    summary = demo_summary(SweepResult(sweep_dir=Path("."), table=table, cells=cells)).set_index("setting")
    assert summary.loc["both_on", "wall_s"] == pytest.approx(12.3)
    assert pd.isna(summary.loc["x", "wall_s"])
    assert summary.loc["both_on", "success_last_20pct"] == 1.0
