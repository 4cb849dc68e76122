"""The README's demo table is a demo's summary.md, copied between two markers by `make readme` (no demo runs here:
a summary built from hand-made histories stands in)."""

from pathlib import Path

import pandas as pd
import pytest
from test_summary import history

from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.curves.history import long_form
from agl_lab.curves.readme_table import END, START, main, parse_markdown_table, readme_table, with_table
from agl_lab.curves.summary import markdown_table
from agl_lab.training.demo import demo_summary
from agl_lab.training.sweep import SweepResult

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
