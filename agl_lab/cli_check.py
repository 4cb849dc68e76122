"""``agl-lab check [key.path=value ...]``: the config as Agent Lightning would resolve it, before anything runs.

Composes the config like Agent Lightning's training scripts (base ``example`` unless ``--base``), prints the three
per-rollout settings as resolved, the doctor's findings (and those of what ``launch`` would send), and runs trainer
steps 1–5 on a small built-in batch (rollouts of 1–3 rows), printing each row's advantage mass and every metric.
"""

from __future__ import annotations

import argparse
import warnings

from agl_lab.cli_help import (
    SUBCOMMAND_BASES,
    print_base,
    print_findings,
    print_launch_view,
    print_settings,
    shown,
)
from agl_lab.config.compose import BASES

__all__ = ["add_check_parser", "run_check_command"]


def add_check_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``check`` among the ``agl-lab`` subcommands."""
    check = commands.add_parser("check", help="resolve the three settings, run the doctor and the example batch")
    check.add_argument("dotlist", nargs="*", help="Hydra overrides, e.g. agentlightning.max_ppo_update_times=2")
    check.add_argument("--show-config", action="store_true", help="print the whole composed config (secrets as ***)")
    check.add_argument(
        "--base", choices=tuple(BASES), default=SUBCOMMAND_BASES["check"], help="compose from this base (agl: what "
        "launch sends)",
    )  # fmt: skip
    check.set_defaults(run=run_check_command)


def run_check_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab check``: 0 when the doctor found no error, 1 otherwise."""
    return _check(args.dotlist, show_config=args.show_config, base=args.base)


def _check(dotlist: list[str], *, show_config: bool, base: str) -> int:
    import pandas as pd

    from agl_lab.config.checks import lab_estimator_problem
    from agl_lab.config.compose import compose_from
    from agl_lab.config.doctor import diagnose
    from agl_lab.config.secrets import redacted_yaml
    from agl_lab.core.pipeline import mini_batch_rows, prepare_batch
    from agl_lab.core.rows import rows_frame
    from agl_lab.lab.examples import example_rows

    cfg = compose_from(base, dotlist=dotlist)
    if show_config:
        print(redacted_yaml(cfg))
    print_base(base)
    print_settings(cfg)
    print(f"  {'PPO mini-batch':<26} {'(ppo_mini_batch_size x rollout.n)':<48} {mini_batch_rows(cfg)} rows")

    findings = diagnose(cfg)
    print("\nDoctor:" + ("" if findings else " no findings"))
    ok = print_findings(findings)
    if base != SUBCOMMAND_BASES["launch"]:
        print_launch_view(dotlist)
    if not ok:
        return 1
    if problem := lab_estimator_problem(cfg):  # a valid config for Agent Lightning that the example cannot run
        print(f"\nExample batch skipped: {problem}")
        return 0

    rows = example_rows()
    print(
        f"\nExample batch: {len(rows)} rows from {len(set(rows.non_tensor_batch['rollout_id_list']))} rollouts "
        f"of 2 prompts (1–3 rows each; failing rollouts took more calls). Sizes for it: "
        + " ".join(
            f"{k}={shown(cfg, k)}"
            for k in (
                "data.train_batch_size",
                "actor_rollout_ref.rollout.n",
                "actor_rollout_ref.actor.ppo_mini_batch_size",
            )
        )
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch, metrics = prepare_batch(rows, cfg)
    for warning in caught:
        print(f"warning: {warning.message}")
    if len(batch):
        print("\nRows after steps 1–5 (advantage_mass = Σ advantage·mask, the row's weight in a summed loss):")
        print(rows_frame(batch).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("\nMetrics:")
    table = pd.Series(metrics, dtype=object).rename_axis("metric").rename("value")
    print(table.to_string(float_format=lambda v: f"{v:.4g}"))
    return 0
