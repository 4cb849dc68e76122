"""The README's demo table, copied from a demo's ``summary.md``, never typed by hand.

``make readme`` runs ``agl-lab demo`` into ``runs/readme-demo/`` and then
``python -m agl_lab.curves.readme_table runs/readme-demo/summary.md README.md``, which replaces what lies between
the README's two markers (:data:`START`, :data:`END`) with that file, unchanged. So the README's numbers are the
demo's, its columns are :func:`agl_lab.curves.summary.summarize`'s, and a test reads the table back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

__all__ = ["END", "START", "parse_markdown_table", "readme_table", "with_table"]

START = "<!-- demo table: `make readme` copies it from the demo's summary.md; do not edit by hand -->"
END = "<!-- end of demo table -->"


def readme_table(readme: str) -> str:
    """The table between the markers (as the summary.md it was copied from)."""
    _, inside, _ = _split(readme)
    return inside


def with_table(readme: str, table: str) -> str:
    """``readme`` with the text between its markers replaced by ``table`` (a summary.md)."""
    parse_markdown_table(table)  # refuse anything that is not one Markdown table
    before, _, after = _split(readme)
    return f"{before}{START}\n{table.rstrip(chr(10))}\n{END}{after}"


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


def _split(readme: str) -> tuple[str, str, str]:
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"the README needs each marker exactly once, in this order:\n{START}\n{END}")
    before, rest = readme.split(START)
    inside, after = rest.split(END)
    if not before.endswith("\n") and before:
        raise ValueError("the start marker must begin a line")
    return before, inside.strip("\n") + "\n", after


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m agl_lab.curves.readme_table SUMMARY_MD README_MD", file=sys.stderr)
        return 2
    summary, readme = (Path(arg) for arg in argv)
    readme.write_text(with_table(readme.read_text(), summary.read_text()))
    print(f"{readme}: demo table copied from {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
