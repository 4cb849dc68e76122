"""``agl-lab weighting PATH``: verl PR #7580's weighting diagnostics of a batch or a run, for every loss mode.

PATH is a run (verl's ``trainer.rollout_data_dir`` of ``<step>.jsonl`` files, a folder of ``<step>.parquet``/``.csv``
tables, one such table, an agl_lab run directory) or a batch (a folder :func:`agl_lab.files.batch_io.save_batch` wrote,
such as ``data/sample_batch``; a verl pickle with ``--trusted``). It prints the whole run's table, one line per loss
mode in the columns ``mode, trajectories, rows, solve_by_trajectory, solve_by_row, gap, mean_rows_solved,
mean_rows_failed, adv_cosine, ess_fraction`` (rates and shares as fractions: 0.105 is the PR's 10.5 points; a
``missing`` column when the source lacks something a mode's numbers need), then the influence by rows-per-rollout
class (for an agl_lab run: its own mode's). ``--steps 1-100`` picks steps; ``--out DIR`` writes
``DIR/weighting_steps.csv`` (``step, mode`` + the columns), ``weighting_run.csv``, ``weighting_influence.csv`` and the
figures ``weighting_steps.png`` (gap, cosine, ESS per mode over steps) and ``weighting_influence.png`` (a class for
every row count the run has), all computed before the first is written. ``key=value`` items configure how rows are
measured (estimator, mini-batch; base ``short-run``). ``--outcome`` says how a session's outcome is read where its
rows' scores differ (:data:`agl_lab.files.outcome_rules.OUTCOMES`; default ``last``), and the output says which rule
it used and how many sessions it changed. A PATH that is none of these, or a file whose rows cannot be read as
sessions (a session in two groups, turns of a session the file does not name, a step file holding another step, a
step in two files, a batch header disagreeing with its tensors): one line, exit 5 (``docs/reading-runs.md``).
"""

from __future__ import annotations

import argparse
import numbers
import os

from agl_lab.cli.commands import Subcommand
from agl_lab.cli.help import print_base
from agl_lab.core.keys import ESTIMATOR
from agl_lab.files.outcome_rules import DEFAULT_OUTCOME, OUTCOMES

__all__ = ["COMMAND", "add_weighting_arguments", "run_weighting_command"]

# The influence tables printed when --modes is not given: the baseline the PR measures, its proposals, Agent
# Lightning's answer (the full table has every mode).
_INFLUENCE_MODES = ("seq-mean-token-mean", "session_equal", "partition_preserving", "per_rollout_mean:rows")


def add_weighting_arguments(weighting: argparse.ArgumentParser) -> None:
    """``weighting``'s arguments."""
    weighting.add_argument("path", help="a run (verl rollout_data_dir, step tables, an agl_lab run) or a batch")
    weighting.add_argument("dotlist", nargs="*", help=f"key=value for how rows are measured (e.g. {ESTIMATOR}=rloo)")
    weighting.add_argument("--modes", nargs="+", default=None, help="loss modes (default: every catalogue mode)")
    weighting.add_argument("--steps", default=None, help="which steps of a run: 1-100, 5, 1,3,8-10 (default: all)")
    weighting.add_argument("--out", default=None, help="write weighting_steps.csv, the run's tables and figures here")
    weighting.add_argument("--trajectory-column", default=None, help="the field of a verl dump holding the trajectory")
    weighting.add_argument("--group-column", default=None, help="the field of a verl dump holding the GRPO group")
    weighting.add_argument("--trusted", action="store_true", help="load a pickled verl dump (unpickling runs code)")
    rules = "; ".join(f"{name}: {meaning}" for name, meaning in OUTCOMES.items())
    weighting.add_argument(
        "--outcome",
        choices=tuple(OUTCOMES),
        default=DEFAULT_OUTCOME,
        help=f"a session's outcome where its rows' scores differ ({rules}; default: {DEFAULT_OUTCOME})",
    )


def run_weighting_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab weighting``; 0 when the table was printed (and written)."""
    from agl_lab.lab.row_diagnostics import COLUMNS, INFLUENCE_COLUMNS
    from agl_lab.studies.weighting_source import diagnose_run, is_lab_run

    base = COMMAND.base
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out} is a file: give a folder for the tables and figures")
    lab_run = is_lab_run(args.path)
    if lab_run and args.dotlist:
        raise ValueError("key=value items configure how rows are measured; an agl_lab run was measured as it trained")
    cfg = None
    if not lab_run:
        print_base(base)
        if args.dotlist:  # composing checks every item against verl's config (loads verl)
            from agl_lab.config.compose import compose_from

            cfg = compose_from(base, dotlist=args.dotlist)
    run = diagnose_run(
        args.path,
        modes=args.modes,
        steps=args.steps,
        cfg=cfg,
        trusted=args.trusted,
        trajectory_column=args.trajectory_column,
        group_column=args.group_column,
        outcome=args.outcome,
    )
    table = run.table()
    steps = table.attrs.get("steps", 0)
    if run.sessions:  # rows read from files (an agl_lab run was measured as it trained)
        from agl_lab.files.run_sessions import describe_sessions

        default = ", the default" if args.outcome == DEFAULT_OUTCOME else ""
        print(f"Outcome of a session (--outcome {args.outcome}{default}): {describe_sessions(run.sessions)}.")
    print(
        f"Weighting diagnostics of {args.path} ({steps} step{'s' * (steps != 1)}; verl PR #7580's columns, rates as "
        "fractions, the mean over steps):"
    )
    shown = COLUMNS + (["missing"] if table["missing"].astype(bool).any() else [])
    formatters = {**dict.fromkeys(COLUMNS[1:], _cell), "missing": lambda v: v or "-"}
    print(table[shown].to_string(index=False, formatters=formatters))
    influence = table.attrs["influence"]
    if not lab_run:
        chosen = args.modes or [m for m in _INFLUENCE_MODES if m in set(table["mode"])]
        influence = influence[influence["mode"].isin(chosen)]
    for mode, part in influence.groupby("mode", sort=False, dropna=False):
        print(f"\nInfluence by rows per rollout under {mode} (share of rollouts, of gradient mass, failures):")
        print(part[INFLUENCE_COLUMNS[1:]].to_string(index=False, formatters=dict.fromkeys(INFLUENCE_COLUMNS, _cell)))
    if args.out:
        for path in _write_outputs(run, table, args.out, modes=args.modes):
            print(f"wrote {path}")
    return 0


def _write_outputs(run, table, out: str, *, modes) -> list:
    """The tables and figures of ``--out``, each made before any is written, each written whole."""
    from pathlib import Path

    from agl_lab.files.atomic_files import write_whole, written_whole
    from agl_lab.lab.diagnostics_figures import PROPOSALS, plot_proposals
    from agl_lab.lab.run_figures import plot_steps

    out = Path(out)
    texts = {
        "weighting_steps.csv": run.steps.to_csv(index=False),
        "weighting_run.csv": table.to_csv(index=False),
        "weighting_influence.csv": table.attrs["influence"].to_csv(index=False),
    }
    figures = {"weighting_steps": plot_steps(run.steps, modes=modes)}
    own = [m for m in dict.fromkeys(table.attrs["influence"]["mode"]) if m is not None]
    own = [m for m in own if m in set(table["mode"])]
    chosen = [m for m in (modes or PROPOSALS) if m in own] or own[:1]
    if chosen:
        figures["weighting_influence"] = plot_proposals(table, modes=chosen)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        write_whole(out / name, text)
        written.append(out / name)
    for stem, figure in figures.items():
        with written_whole(out / f"{stem}.png") as partial:  # not curves.figures.save_figure: it loads the trainer
            figure.savefig(partial, dpi=120, bbox_inches="tight", format="png")
        written.append(out / f"{stem}.png")
    return written


def _cell(value) -> str:
    """Counts as integers, other numbers to 3 decimals (a gap of 4e-11 is 0.000), never in exponent form."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):  # numpy's integers too
        return f"{int(value)}"
    return "nan" if value != value else f"{round(float(value), 3) + 0.0:.3f}"


COMMAND = Subcommand(
    name="weighting",
    help="verl PR #7580's weighting diagnostics of a batch or a run, for every loss mode",
    description=(
        "Prints, per loss mode, the solve rate by trajectory and the one the mode's objective sees (by row), their "
        "gap, rows per solved and failed rollout, the cosine between weighted and unweighted advantages and the "
        "effective sample size of the row weights; then the influence by rows-per-rollout class."
    ),
    epilog="example: agl-lab weighting data/verl_rollout_dump --steps 1-4 --out weighting/",
    base="short-run",
    add_arguments=add_weighting_arguments,
    run=run_weighting_command,
)
