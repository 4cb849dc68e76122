"""``agl-lab weighting PATH``: verl PR #7580's weighting diagnostics of a batch or a run, for every loss mode.

PATH is a batch (a folder :func:`agl_lab.lab.batch_io.save_batch` wrote, such as ``data/sample_batch``; a verl pickle
with ``--trusted``) or a run directory (``metrics.jsonl``). It prints one line per loss mode in the columns ``mode,
trajectories, rows, solve_by_trajectory, solve_by_row, gap, mean_rows_solved, mean_rows_failed, adv_cosine,
ess_fraction`` (rates and shares as fractions: 0.105 is the PR's 10.5 points), then each chosen mode's influence by
rows-per-rollout class (for a run: its own mode's). ``--modes`` picks modes; ``key=value`` items configure how a batch
is measured (estimator, mini-batch; base ``short-run``). A PATH that is neither a batch nor a run: one line, exit 5.
"""

from __future__ import annotations

import argparse
import numbers

from agl_lab.cli_help import SUBCOMMAND_BASES, print_base

__all__ = ["add_weighting_parser", "run_weighting_command"]

# The influence tables printed when --modes is not given: the baseline the PR measures, its proposals, Agent
# Lightning's answer (the full table has every mode).
_INFLUENCE_MODES = ("seq-mean-token-mean", "session_equal", "partition_preserving", "per_rollout_mean:rows")


def add_weighting_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``weighting`` among the ``agl-lab`` subcommands."""
    weighting = commands.add_parser(
        "weighting",
        help="verl PR #7580's weighting diagnostics of a batch or a run, for every loss mode",
        description=(
            "Prints, per loss mode, the solve rate by trajectory and the one the mode's objective sees (by row), their "
            "gap, rows per solved and failed rollout, the cosine between weighted and unweighted advantages and the "
            "effective sample size of the row weights; then the influence by rows-per-rollout class."
        ),
        epilog="example: agl-lab weighting data/sample_batch --modes seq-mean-token-mean session_equal",
    )
    weighting.add_argument("path", help="a batch folder (or a verl pickle with --trusted) or a run directory")
    weighting.add_argument("dotlist", nargs="*", help="key=value for how a batch is measured (e.g. lab.seed=1)")
    weighting.add_argument("--modes", nargs="+", default=None, help="loss modes (default: every catalogue mode)")
    weighting.add_argument("--trusted", action="store_true", help="load a pickled verl dump (unpickling runs code)")
    weighting.set_defaults(run=run_weighting_command)


def run_weighting_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab weighting``; 0 when the table was printed."""
    from pathlib import Path

    from agl_lab.config.compose import compose_from
    from agl_lab.lab.diagnostics import INFLUENCE_COLUMNS
    from agl_lab.training.weighting_source import weighting_diagnostics

    base = SUBCOMMAND_BASES["weighting"]
    is_run = (Path(args.path) / "metrics.jsonl").exists()
    if is_run and args.dotlist:
        raise ValueError("key=value items configure how a batch is measured; a run was measured as it trained")
    cfg = None if is_run else compose_from(base, dotlist=args.dotlist)
    if not is_run:
        print_base(base)
    table = weighting_diagnostics(args.path, modes=args.modes, cfg=cfg, trusted=args.trusted)
    what = f"run {args.path} ({table.attrs.get('steps', 0)} steps, trained rows)" if is_run else f"batch {args.path}"
    print(f"Weighting diagnostics of {what} (verl PR #7580's columns; rates as fractions):")
    print(table.to_string(index=False, formatters=dict.fromkeys(table.columns[1:], _cell)))
    influence = table.attrs["influence"]
    if not is_run:
        chosen = args.modes or [m for m in _INFLUENCE_MODES if m in set(table["mode"])]
        influence = influence[influence["mode"].isin(chosen)]
    for mode, part in influence.groupby("mode", sort=False, dropna=False):
        print(f"\nInfluence by rows per rollout under {mode} (share of rollouts, of gradient mass, failures):")
        print(part[INFLUENCE_COLUMNS[1:]].to_string(index=False, formatters=dict.fromkeys(INFLUENCE_COLUMNS, _cell)))
    return 0


def _cell(value) -> str:
    """Counts as integers, other numbers to 3 decimals (a gap of 4e-11 is 0.000), never in exponent form."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):  # numpy's integers too
        return f"{int(value)}"
    return "nan" if value != value else f"{round(float(value), 3) + 0.0:.3f}"
