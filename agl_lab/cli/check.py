"""``agl-lab check [--config FILE.yaml] [key.path=value ...]``: the config as Agent Lightning would resolve it, before
anything runs.

Composes the config like Agent Lightning's training scripts (base ``example`` unless ``--base``; with ``--config``,
a YAML file of the user's read after the base and before the items (:mod:`agl_lab.config.config_file`), base ``agl``
unless ``--base``: the file is an Agent Lightning config, checked by its trainer's rules), prints the three
per-rollout settings as resolved, the policy a lab run would train (or why a lab run refuses the config's model: a
Hugging Face Hub id in ``actor_rollout_ref.model.path`` is right for a GPU cluster, so check only says it), the
findings of the lab trainer's start-up gate — the doctor and what the trainer's start-up code refuses, as
``agl-lab train`` prints them (:func:`agl_lab.training.preflight.trainer_findings`; the doctor alone for
``--base agl``) — and those of what ``launch`` would send, and runs trainer steps 1–5 on an example batch of one step
of the config's size (:mod:`agl_lab.lab.example_batch`), printing every metric (and each row's advantage mass when
there are few).
"""

from __future__ import annotations

import argparse
import warnings

from agl_lab.cli import launch
from agl_lab.cli.commands import Subcommand
from agl_lab.cli.help import gate_findings, print_base, print_findings, print_launch_view, print_settings
from agl_lab.config.bases import BASES
from agl_lab.core.keys import MAX_PPO_UPDATE_TIMES

__all__ = ["COMMAND", "add_check_arguments", "run_check_command"]

_LISTED_ROWS = 24  # check lists the rows after steps 1–5 up to this many
_FILE_BASE = "agl"  # a user's file is an Agent Lightning config: composed over its defaults alone, its trainer's rules


def add_check_arguments(check: argparse.ArgumentParser) -> None:
    """``check``'s arguments."""
    check.add_argument("dotlist", nargs="*", help=f"Hydra overrides, e.g. {MAX_PPO_UPDATE_TIMES}=2")
    check.add_argument(
        "--config",
        default=None,
        metavar="FILE.yaml",
        help="a YAML file read before the key=value items: a training script's overrides or a run's config.yaml",
    )
    check.add_argument("--show-config", action="store_true", help="print the whole composed config (secrets as ***)")
    check.add_argument(
        "--base",
        choices=tuple(BASES),
        default=None,
        help=f"compose from this base (agl: what launch sends; default {COMMAND.base}, agl with --config)",
    )


def run_check_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab check``: 0 when the doctor found no error, 1 otherwise."""
    base = args.base or (_FILE_BASE if args.config else COMMAND.base)
    return _check(args.dotlist, show_config=args.show_config, base=base, config_file=args.config)


def _check(dotlist: list[str], *, show_config: bool, base: str, config_file: str | None) -> int:
    import pandas as pd

    from agl_lab.config.checks import lab_estimator_problem
    from agl_lab.config.compose import compose_from
    from agl_lab.config.model_source import describe_policy
    from agl_lab.config.secrets import redacted_yaml
    from agl_lab.core.pipeline import mini_batch_rows, prepare_batch
    from agl_lab.core.rows import rows_frame
    from agl_lab.lab.example_batch import example_batch, example_problem

    cfg = compose_from(base, dotlist=dotlist, config_file=config_file)
    if show_config:
        print(redacted_yaml(cfg))
    print_base(base)
    if config_file is not None:
        print(f"Config file: {config_file} (after the base, before the key=value items)")
    print_settings(cfg)
    findings = gate_findings(cfg, trainer=BASES[base].trainer)  # what train prints for the same config
    if not any(f.level == "error" for f in findings):  # the sizes it multiplies may be what the doctor refuses
        print(f"  {'PPO mini-batch':<26} {'(ppo_mini_batch_size x rollout.n)':<48} {mini_batch_rows(cfg)} rows")
    # said, never refused here: a config for a GPU cluster may name a Hub id that only a lab run cannot load
    print(f"\nPolicy a lab run trains: {describe_policy(cfg)}")

    print("\nDoctor:" + ("" if findings else " no findings"))
    ok = print_findings(findings)
    if base != launch.COMMAND.base:
        print_launch_view(dotlist, config_file=config_file)
    if not ok:
        return 1
    if problem := lab_estimator_problem(cfg) or example_problem(cfg):  # valid, but beyond the example batch
        print(f"\nExample batch skipped: {problem}")
        return 0

    example = example_batch(cfg)  # one step of the config's size (sampled when large), or the built-in batch
    print("\n" + "\n".join(example.lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch, metrics = prepare_batch(example.rows, example.cfg)
    for warning in caught:
        print(f"warning: {warning.message}")
    if 0 < len(batch) <= _LISTED_ROWS:
        print("\nRows after steps 1–5 (advantage_mass = Σ advantage·mask, the row's weight in a summed loss):")
        print(rows_frame(batch).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    elif len(batch):
        print(f"\n{len(batch)} rows after steps 1–5 (rows are listed up to {_LISTED_ROWS})")
    print("\nMetrics:")
    table = pd.Series({**example.metrics, **metrics}, dtype=object).rename_axis("metric").rename("value")
    print(table.to_string(float_format=lambda v: f"{v:.4g}"))
    return 0


COMMAND = Subcommand(
    name="check",
    help="resolve the three settings, run the doctor and the example batch",
    base="example",
    add_arguments=add_check_arguments,
    run=run_check_command,
)
