"""The README's demo table, copied from a demo's ``summary.md``, never typed by hand.

``make readme`` runs ``agl-lab demo`` into ``runs/readme-demo/`` and then
``python -m agl_lab.curves.readme_table runs/readme-demo/summary.md README.md``, which replaces what lies between
the README's two markers (:data:`START`, :data:`END`) with that file, unchanged. So the README's numbers are the
demo's, its columns are :func:`agl_lab.curves.summary.summarize`'s, and a test reads the table back.

The numbers depend on the CPU's kernels: with a third argument, ``data/demo_spread.json``
(``benchmarks/bench_numbers.py``: the demo under torch's other CPU kernels, 2 threads and a rerun), the line between
:data:`SPREAD_START` and :data:`SPREAD_END` says which CPU and torch made the table and how far the numbers moved
(:func:`spread_line`). The spread file is measured apart from ``make readme``'s demo: when the README's table is not
the file's first run (the code or the machine changed in between), the line says so and names the cells that differ,
rather than claim for the table a spread measured on other numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from agl_lab.curves.summary import number  # the summary's own cell format: the spread's first run as the table shows it

__all__ = ["END", "SPREAD_END", "SPREAD_START", "START", "parse_markdown_table", "readme_table", "spread_line",
           "with_spread", "with_table"]  # fmt: skip

START = "<!-- demo table: `make readme` copies it from the demo's summary.md; do not edit by hand -->"
END = "<!-- end of demo table -->"
SPREAD_START = "<!-- demo spread: `make readme` writes it from data/demo_spread.json; do not edit by hand -->"
SPREAD_END = "<!-- end of demo spread -->"
SPREAD_COLUMNS = ("success_first_20pct", "success_last_20pct", "rows_trained_per_step")  # what the line names


def readme_table(readme: str) -> str:
    """The table between the markers (as the summary.md it was copied from)."""
    _, inside, _ = _split(readme)
    return inside


def with_table(readme: str, table: str) -> str:
    """``readme`` with the text between its markers replaced by ``table`` (a summary.md)."""
    parse_markdown_table(table)  # refuse anything that is not one Markdown table
    before, _, after = _split(readme)
    return f"{before}{START}\n{table.rstrip(chr(10))}\n{END}{after}"


def with_spread(readme: str, spread: dict) -> str:
    """``readme`` with the text between its spread markers replaced by :func:`spread_line` of ``spread`` and the
    README's own table."""
    before, _, after = _split(readme, SPREAD_START, SPREAD_END)
    return f"{before}{SPREAD_START}\n{spread_line(spread, table=readme_table(readme))}\n{SPREAD_END}{after}"


def spread_line(spread: dict, *, table: str | None = None) -> str:
    """What made the table and how far its numbers move elsewhere, from ``benchmarks/bench_numbers.py``'s JSON.

    ``table``: the README's table (a summary.md); when its numbers are not the spread file's first run, the line
    says that the spread was measured on other numbers, and which."""
    for key in ("cpu", "torch", "kernels", "threads", "spread", "runs"):
        if key not in spread:
            raise ValueError(f"the spread file lacks {key!r}: write it with benchmarks/bench_numbers.py")
    tried = {}  # CPU -> its kernels × threads, in the file's order: the table's own CPU first
    for run in spread["runs"][2:]:  # after the table's run and its rerun
        threads = f"{run['threads']} thread{'s' if run['threads'] > 1 else ''}"
        tried.setdefault(run.get("cpu", spread["cpu"]), set()).add(f"{run['kernels'].lower()} × {threads}")
    said = [", ".join(sorted(kinds)) if cpu == spread["cpu"] else f"on {cpu}: {', '.join(sorted(kinds))}"
            for cpu, kinds in tried.items()]  # fmt: skip
    moved = ", ".join(f"{c} ±{spread['spread'][c]:g}" for c in SPREAD_COLUMNS if c in spread["spread"])
    differ = [] if table is None else _differing_cells(spread["runs"][0]["table"], parse_markdown_table(table))
    if differ:
        theirs = ", ".join(f"{setting} {column} {value}" for setting, column, value, _ in differ)
        ours = ", ".join(mine for *_, mine in differ)
        return (
            f"The spread was measured on a demo whose numbers are not this table's (its first run, on {spread['cpu']} "
            f"with torch {spread['torch']}, {spread['kernels'].lower()} kernels, {spread['threads']} thread, gave "
            f"{theirs} where this table has {ours}), so this table's own spread is unmeasured "
            f"(`benchmarks/bench_numbers.py` measures it). There, runs with {'; '.join(said)} moved the numbers by at "
            f"most {moved}; {_rerun_words(spread['runs'], past=True)}."
        )
    return (
        f"Made on {spread['cpu']} with torch {spread['torch']} ({spread['kernels'].lower()} kernels, "
        f"{spread['threads']} thread). Other CPUs: the numbers depend on the CPU and the kernels torch picks for it; "
        f"run with {'; '.join(said)} (`benchmarks/bench_numbers.py`), they moved by at most {moved}. A fresh "
        f"clone's demo agrees with this table within that spread; {_rerun_words(spread['runs'])}."
    )


def _rerun_words(runs: list[dict], *, past: bool = False) -> str:
    first, rerun = (pd.DataFrame(run["table"]).drop(columns="wall_s", errors="ignore") for run in runs[:2])
    if first.equals(rerun):
        return f"on one machine a rerun {'gave' if past else 'gives'} the same numbers"
    return f"reruns on one machine {'differed' if past else 'differ'} too (see the file)"


def _differing_cells(first_run: list[dict], table: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    """(setting, column, the spread's first run as the table would show it, the table's cell) wherever the two differ
    (wall time aside: it is the machine's load, not the demo's numbers)."""
    cells = table.set_index("setting") if "setting" in table else table
    differ = []
    for line in first_run:
        setting = line.get("setting")
        if setting not in cells.index:
            differ.append((str(setting), "setting", "a line", "none"))
            continue
        for column, value in line.items():
            if column in ("setting", "wall_s") or column not in cells.columns:
                continue
            shown = number(float(value)) if isinstance(value, int | float) else str(value)
            if shown != cells.at[setting, column]:
                differ.append((str(setting), column, shown, cells.at[setting, column]))
    return differ


def parse_markdown_table(text: str) -> pd.DataFrame:
    """A Markdown table (header, rule, rows; as :func:`agl_lab.curves.summary.markdown_table` writes) as strings."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(lines) < 2 or not all(line.startswith("|") and line.endswith("|") for line in lines):
        raise ValueError("not a Markdown table: expected '| a | b |' lines, a header and a '|---|' rule first")
    cells = [[cell.strip() for cell in line[1:-1].split("|")] for line in lines]
    header, rule, rows = cells[0], cells[1], cells[2:]
    if not all(set(cell) <= set("-:") and cell for cell in rule) or len(rule) != len(header):
        raise ValueError(f"the table's second line must be its rule (|---|), one per column; got {lines[1]!r}")
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row of the table needs {len(header)} cells: {header}")
    return pd.DataFrame(rows, columns=header)


def _split(readme: str, start: str = START, end: str = END) -> tuple[str, str, str]:
    if readme.count(start) != 1 or readme.count(end) != 1:
        raise ValueError(f"the README needs each marker exactly once, in this order:\n{start}\n{end}")
    before, rest = readme.split(start)
    inside, after = rest.split(end)
    if not before.endswith("\n") and before:
        raise ValueError("the start marker must begin a line")
    return before, inside.strip("\n") + "\n", after


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m agl_lab.curves.readme_table SUMMARY_MD README_MD [SPREAD_JSON]", file=sys.stderr)
        return 2
    summary, readme = Path(argv[0]), Path(argv[1])
    text = with_table(readme.read_text(), summary.read_text())
    if len(argv) == 3:
        text = with_spread(text, json.loads(Path(argv[2]).read_text()))
    readme.write_text(text)
    print(f"{readme}: demo table copied from {summary}" + (f", its spread from {argv[2]}" if len(argv) == 3 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
