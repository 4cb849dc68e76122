"""A reproduction's report: ``report.md`` with the claim, the source, the verdict and how it was run, plus figures.

Written by :func:`agl_lab.studies.reproduce.run_reproduction` into the reproduction's folder
(``runs/reproduce-<name>/``): ``report.md``; ``effects.csv`` (every check and shown comparison, the effects columns
plus window, expectation, verdict line, whether it passed and its outcome: as claimed, unresolved, or opposite to
the claim); ``forest.png`` (each comparison's difference and 95% interval, :mod:`agl_lab.curves.forest`); one
``bands-<metric>.png`` per metric compared (mean and 95% t-interval per step over the seeds,
:mod:`agl_lab.curves.figures`); ``summary.csv`` (one line per setting). A check that did not pass is reported as it
came out, with its numbers.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import yaml

from agl_lab.curves.figures import plot_bands, save_figure
from agl_lab.curves.forest import plot_forest
from agl_lab.curves.summary import markdown_table
from agl_lab.files.atomic_files import write_whole
from agl_lab.studies.demo import demo_summary

if TYPE_CHECKING:
    from agl_lab.studies.reproduce import Reproduction

__all__ = ["played", "report_markdown", "study_verdict", "write_report"]

_EXPECT = {"higher": "> 0", "lower": "< 0", "zero": "= 0 at every step", "none": "(no claim)"}


def write_report(reproduction: Reproduction, out: str | Path) -> dict[str, Path]:
    """Write the report, its table and figures into ``out``; returns name → path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    compared = pd.concat([reproduction.checks, reproduction.shown], ignore_index=True)
    files = {"effects.csv": out / "effects.csv", "summary.csv": out / "summary.csv"}
    compared.to_csv(files["effects.csv"], index=False)
    demo_summary(reproduction.sweep).to_csv(files["summary.csv"], index=False)
    drawable = compared[np.isfinite(compared.get("ci_low", pd.Series(dtype=float)).astype(float))]
    if len(drawable):
        forest = drawable.assign(metric=drawable["metric"] + " (" + drawable["window"] + ")")
        title = "differences (setting − baseline, paired by seed; − 0: the setting's own runs) and 95% t-intervals"
        if (drawable.get("method") == "rliable").any():
            title += "; rliable rows: IQM difference, stratified-bootstrap 95% interval"
        files["forest"] = save_figure(plot_forest(forest, title=title), out / "forest", formats=("png",))[0]
    for metric in dict.fromkeys(compared["metric"]):
        if metric in set(reproduction.sweep.table["metric"]):
            figure = plot_bands(reproduction.sweep.table, metric, band="ci95")
            stem = "bands-" + re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_")
            files[stem] = save_figure(figure, out / stem, formats=("png",))[0]
    files["report.md"] = out / "report.md"
    write_whole(files["report.md"], report_markdown(reproduction, figures=[p.name for p in files.values()]))
    return files


def report_markdown(reproduction: Reproduction, *, figures: list[str] = ()) -> str:
    """The report's text (module docstring); ``figures``: file names to show at its end."""
    experiment, checks, shown = reproduction.experiment, reproduction.checks, reproduction.shown
    seeds = reproduction.seeds
    if reproduction.is_study:
        lines = [f"# Study `{experiment.name}` {played(reproduction)}", "", f"**Question.** {experiment.claim}", ""]
        lines += [f"**Source.** {experiment.source}", "", f"**Verdict.** {study_verdict(reproduction)}", ""]
        lines += ["## Comparisons", "", "| comparison | metric, window | measured | resolved |", "|---|---|---|---|"]
        lines += [_study_line(row) for row in shown.to_dict("records")]
    else:
        status = ("reproduced" if reproduction.reproduced else "NOT reproduced") + f" {played(reproduction)}"
        failed = checks[~checks["passed"].astype(bool)]
        lines = [
            f"# Reproduction `{experiment.name}`: {status}",
            "",
            f"**Claim.** {experiment.claim}",
            "",
            f"**Source.** {experiment.source}",
            "",
            f"**Verdict.** {status[0].upper() + status[1:]}: "
            + (
                f"every one of the {len(checks)} checks passed at {len(seeds)} seeds."
                if reproduction.reproduced
                else f"{len(failed)} of {len(checks)} checks did not pass at {len(seeds)} seeds (their numbers below)."
            ),
            "",
            "## Checks",
            "",
            "| check | metric, window | expected | measured | passed |",
            "|---|---|---|---|---|",
            *(_check_line(row) for row in checks.to_dict("records")),
        ]
        if len(shown):
            lines += ["", "## Also measured (no claim)", ""]
            lines += [f"- `{row['metric']}` (`{row['window']}`): {row['verdict']}" for row in shown.to_dict("records")]
    lines += ["", "## How it was run", "", *_setup(reproduction)]
    summary = demo_summary(reproduction.sweep)
    if len(summary):
        lines += ["", "## Per setting (means over seeds)", "", markdown_table(summary).rstrip("\n")]
    pictures = [name for name in figures if name.endswith(".png")]
    if pictures:
        lines += ["", "## Figures", "", *(f"![{Path(name).stem}]({name})" for name in pictures)]
    return "\n".join(lines) + "\n"


def played(reproduction: Reproduction) -> str:
    """Which policy played which task in the runs (their config.yaml, or the record's meta.json when the report is
    redrawn from it): a verdict holds for those, not in general."""
    if "played" in reproduction.meta:
        return reproduction.meta["played"]
    played = set()
    for cell in reproduction.sweep.cells.itertuples():
        config = Path(cell.run_dir) / "config.yaml"
        if config.is_file():
            lab = (yaml.safe_load(config.read_text()) or {}).get("lab", {})
            model = lab.get("model", "tiny")
            played.add(f"{'the tiny policy' if model == 'tiny' else model} on the {lab.get('task')} task")
    return f"({'; '.join(sorted(played))})" if played else ""


def study_verdict(reproduction: Reproduction) -> str:
    """How many comparisons resolved at the seeds run, and how many the power analysis asked for."""
    shown, effect = reproduction.shown, reproduction.experiment.smallest_effect
    resolved = int((shown["ci_low"].astype(float) > 0).sum() + (shown["ci_high"].astype(float) < 0).sum())
    asked = reproduction.seeds_asked
    needed = "an unknown number of" if asked is None or not np.isfinite(asked) else f"{int(asked)}"
    ran = len(reproduction.seeds)
    enough = "ran that many" if asked is not None and np.isfinite(asked) and ran >= asked else f"ran {ran}"
    return (
        f"{resolved} of {len(shown)} comparisons resolved (their 95% interval excludes 0) at {ran} seeds. To detect "
        f"an effect of {effect:g} at 80% power the pilot's spread asks for {needed} seeds per setting; {enough}."
        + ("" if ran >= (asked or 0) else " Unresolved comparisons say nothing about an effect of that size.")
    )


def _study_line(row: dict) -> str:
    head, _, measured = row["verdict"].partition(": ")
    low, high = float(row.get("ci_low", np.nan)), float(row.get("ci_high", np.nan))
    resolved = "yes" if low > 0 or high < 0 else "no"
    return f"| {head} | `{row['metric']}`, `{row['window']}` | {measured.replace('|', chr(92) + '|')} | {resolved} |"


def _check_line(row: dict) -> str:
    passed = "yes" if row["passed"] else f"**no**: {row['outcome']}"
    head, _, measured = row["verdict"].partition(": ")
    measured = measured.replace("|", "\\|")  # "largest |value|" inside a table cell
    return f"| {head} | `{row['metric']}`, `{row['window']}` | {_EXPECT[row['expect']]} | {measured} | {passed} |"


def _setup(reproduction: Reproduction) -> list[str]:
    experiment, sweep = reproduction.experiment, reproduction.sweep
    table, cells = sweep.table, sweep.cells
    steps = int(table.groupby(["setting", "seed"])["step"].max().max()) if len(table) else 0
    asked = reproduction.seeds_asked
    if asked is None:
        asked_text = "nothing more (every check resolved at the pilot)"
    else:
        asked_text = f"{int(asked)} pairs" if np.isfinite(asked) else "more than any number (an observed effect of 0)"
    asks = (
        f"the power analysis for an effect of {experiment.smallest_effect:g} asked for"
        if reproduction.is_study
        else "its unresolved checks asked for"
    )
    cell_time = float(cells["wall_s"].sum()) if "wall_s" in cells else float("nan")
    lines = [f"- `{name}`: {' '.join(items)}" for name, items in experiment.settings.items()]
    lines += [
        f"- every run: base short-run (`agl_lab.short_run_config`), {steps} steps"
        + (f", {' '.join(experiment.dotlist)}" if experiment.dotlist else ""),
        f"- seeds: a pilot of {reproduction.pilot_seeds}; {asks} {asked_text}; cap "
        f"{reproduction.max_seeds}; ran seeds {_seed_range(reproduction.seeds)} ({len(reproduction.seeds)})",
        f"- wall time {reproduction.wall_s:.0f} s for this call"
        + (
            f" ({reproduction.resumed_runs} of the {len(cells)} runs had finished before it and were skipped)"
            if reproduction.resumed_runs
            else ""
        )
        + f"; {cell_time:.0f} s of run time summed over the {len(cells)} runs; {os.cpu_count()} CPU cores, shared "
        "with whatever else ran (times inflate under load)",
        "- not finished: "
        + (
            ", ".join(f"{c.setting} seed {c.seed} ({c.status})" for c in cells.itertuples() if c.status != "done")
            or "none"
        ),  # fmt: skip
    ]
    meta = reproduction.meta
    if meta:
        versions = ", ".join(f"{name} {version}" for name, version in meta.get("versions", {}).items() if version)
        lines.append(
            f"- recorded {meta.get('date')} at commit {meta.get('commit')} on {meta.get('machine')} ({versions})"
        )
    if experiment.note:
        lines.append(f"- note: {experiment.note}")
    return lines


def _seed_range(seeds: list[int]) -> str:
    if seeds and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return " ".join(map(str, seeds))
