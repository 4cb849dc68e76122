"""The README's demo table is a demo's summary.md, copied between two markers by `make readme` (no demo runs here:
a summary built from hand-made histories stands in)."""

import json
from pathlib import Path

import pandas as pd
import pytest
from test_summary import history

from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.curves.history import long_form
from agl_lab.curves.readme_table import (
    END,
    SPREAD_END,
    SPREAD_START,
    START,
    main,
    parse_markdown_table,
    readme_table,
    spread_line,
    with_spread,
    with_table,
)
from agl_lab.curves.summary import markdown_table
from agl_lab.studies.demo import demo_summary
from agl_lab.studies.sweep import SweepResult

README = Path(__file__).resolve().parents[1] / "README.md"


def demo_like_summary() -> str:
    """summary.md as the demo writes it: one line per demo setting, demo_summary's columns."""
    table = pd.concat(
        [
            long_form(history([0.1 * i, 0.5, 0.9 - 0.1 * i]), setting=name, seed=0)
            for i, name in enumerate(DEMO_SETTINGS)
        ]
    )
    cells = pd.DataFrame({"setting": list(DEMO_SETTINGS), "seed": 0, "wall_s": [10.0, 11.5, 9.25]})
    return markdown_table(demo_summary(SweepResult(sweep_dir=Path("."), table=table, cells=cells)))


def test_the_readmes_table_has_the_demo_summarys_columns_and_settings():
    table = parse_markdown_table(readme_table(README.read_text()))
    expected = parse_markdown_table(demo_like_summary())
    assert list(table.columns) == list(expected.columns)  # setting, n_seeds, steps, success_first_20pct, ...
    assert table.setting.tolist() == list(DEMO_SETTINGS)
    assert table.drop(columns="setting").map(float).notna().all().all()  # every cell a number, as the demo wrote it


def test_the_generator_replaces_only_what_is_between_the_markers_and_round_trips():
    summary = demo_like_summary()
    readme = f"# title\n\nbefore\n{START}\n| old | table |\n|---|---|\n{END}\nafter\n"
    new = with_table(readme, summary)
    assert readme_table(new) == summary  # what was copied in is what reads back
    assert new.startswith("# title\n\nbefore\n" + START + "\n| setting | n_seeds |") and new.endswith(END + "\nafter\n")
    assert with_table(new, summary) == new  # running it again changes nothing
    real = README.read_text()
    assert with_table(real, readme_table(real)) == real  # the README as committed is the generator's output


def test_the_command_line_rewrites_the_readme(tmp_path, capsys):
    (tmp_path / "summary.md").write_text(demo_like_summary())
    (tmp_path / "README.md").write_text(f"x\n{START}\n{END}\n")
    assert main([str(tmp_path / "summary.md"), str(tmp_path / "README.md")]) == 0
    assert readme_table((tmp_path / "README.md").read_text()) == demo_like_summary()
    assert "demo table copied from" in capsys.readouterr().out
    assert main([]) == 2


@pytest.mark.parametrize(
    ("readme", "table", "text"),
    [
        ("no markers\n", "| a |\n|---|\n", "needs each marker exactly once"),
        (f"{START}\n{END}\n{START}\n{END}\n", "| a |\n|---|\n", "needs each marker exactly once"),
        (f"{START}\n{END}\n", "setting, n_seeds\n", "not a Markdown table"),
        (f"{START}\n{END}\n", "| a | b |\n| 1 | 2 |\n", "second line must be its rule"),
        (f"{START}\n{END}\n", "| a | b |\n|---|---|\n| 1 |\n", "every row of the table needs 2 cells"),
    ],
)
def test_bad_readmes_and_tables_are_refused_by_name(readme, table, text):
    with pytest.raises(ValueError, match=text):
        with_table(readme, table)


def spread_file(rerun_success: float = 0.5) -> dict:
    """data/demo_spread.json as benchmarks/bench_numbers.py writes it, small."""
    table = [{"setting": "both_on", "success_last_20pct": 0.5, "rows_trained_per_step": 64.0, "wall_s": 5.0}]
    rerun = [{**table[0], "success_last_20pct": rerun_success, "wall_s": 6.0}]
    other = [{**table[0], "success_last_20pct": 0.52}]
    return {
        "cpu": "Some Xeon", "torch": "2.13.0+cpu", "kernels": "AVX512", "threads": 1,
        "spread": {"success_first_20pct": 0.004, "success_last_20pct": 0.02, "rows_trained_per_step": 1.5},
        "runs": [{"run": "as make readme", "kernels": "AVX512", "threads": 1, "table": table},
                 {"run": "rerun", "kernels": "AVX512", "threads": 1, "table": rerun},
                 {"run": "x", "kernels": "AVX2", "threads": 2, "table": other}],
    }  # fmt: skip


def test_the_spread_line_names_the_cpu_torch_the_kernels_tried_and_how_far_the_numbers_moved():
    line = spread_line(spread_file())
    assert line.startswith("Made on Some Xeon with torch 2.13.0+cpu (avx512 kernels, 1 thread).")
    assert "run with avx2 × 2 threads (" in line  # the rerun is said apart
    assert "success_first_20pct ±0.004, success_last_20pct ±0.02, rows_trained_per_step ±1.5" in line
    assert "A fresh clone's demo agrees with this table within that spread" in line
    assert "a rerun gives the same numbers" in line  # wall time aside, the rerun's table is the first's
    assert "reruns on one machine differ too" in spread_line(spread_file(rerun_success=0.51))
    with pytest.raises(ValueError, match="the spread file lacks 'torch': write it with benchmarks/bench_numbers.py"):
        spread_line({k: v for k, v in spread_file().items() if k != "torch"})


def test_runs_on_other_cpus_are_named_with_their_cpu_after_the_tables_own():
    spread = spread_file()
    other = {**spread["runs"][2], "cpu": "Some EPYC", "kernels": "AVX512", "threads": 1}
    spread["runs"] = [{"cpu": "Some Xeon", **run} for run in spread["runs"]] + [other]  # as --add writes them
    line = spread_line(spread)
    assert "run with avx2 × 2 threads; on Some EPYC: avx512 × 1 thread (" in line
    assert line.startswith("Made on Some Xeon with torch")
    assert "a rerun gives the same numbers" in line  # the first two runs are still the table's and its rerun


def test_the_readme_carries_the_spread_beside_the_table_and_the_command_line_writes_it(tmp_path):
    real = README.read_text()
    assert real.index(END) < real.index(SPREAD_START) < real.index(SPREAD_END)
    spread = json.loads((README.parent / "data" / "demo_spread.json").read_text())
    assert with_spread(real, spread) == real  # the README's line is the generator's, from the committed data
    (tmp_path / "summary.md").write_text(demo_like_summary())
    (tmp_path / "README.md").write_text(f"x\n{START}\n{END}\n{SPREAD_START}\n{SPREAD_END}\n")
    (tmp_path / "spread.json").write_text(json.dumps(spread_file()))
    assert main([str(tmp_path / n) for n in ("summary.md", "README.md", "spread.json")]) == 0
    assert spread_line(spread_file(), table=demo_like_summary()) in (tmp_path / "README.md").read_text()


def test_a_table_that_is_not_the_spreads_first_run_is_said_so_with_the_cells_that_differ():
    same = "| setting | success_last_20pct | rows_trained_per_step | wall_s |\n|---|---|---|---|\n"
    same += "| both_on | 0.5 | 64 | 7 |\n"  # spread_file()'s first run (its wall time 5.0)
    assert spread_line(spread_file(), table=same) == spread_line(spread_file())  # wall time aside, the same numbers
    other = same.replace("| 0.5 |", "| 0.452 |")
    line = spread_line(spread_file(), table=other)
    assert line.startswith("The spread was measured on a demo whose numbers are not this table's (its first run, on")
    assert "gave both_on success_last_20pct 0.5 where this table has 0.452), so this table's own spread" in line
    assert "A fresh clone's demo agrees with this table" not in line and "a rerun gave the same numbers" in line
