"""``agl-lab train [key.path=value ...]``: a short training run (base ``short-run`` + the dotlist).

Prints the settings and the doctor's findings, trains (:func:`agl_lab.train`), and prints the run directory as the
last line. Ctrl-C, SIGTERM or SIGHUP stop it at a step boundary (exit 130, 143 or 129) with the finished steps kept.
"""

from __future__ import annotations

import argparse

from agl_lab.cli.commands import Subcommand
from agl_lab.cli.help import print_base, print_settings_and_findings
from agl_lab.core.keys import MINI_BATCH, SEED, STEPS, TRAIN_BATCH, VAL_CORE_REWARD
from agl_lab.exit_codes import TrainedNothingError, stopped

__all__ = ["COMMAND", "add_train_arguments", "run_train_command"]


def add_train_arguments(train: argparse.ArgumentParser) -> None:
    """``train``'s arguments."""
    train.add_argument("dotlist", nargs="*", help=f"Hydra overrides, e.g. {SEED}=1 {STEPS}=20")
    train.add_argument("--show-config", action="store_true", help="print the resolved config (secrets as ***)")


def run_train_command(args: argparse.Namespace) -> int:
    """Run ``agl-lab train``: 0 when it trained, 1 on a doctor's error, 129/130/143 when stopped, 6 if nothing trained
    (the exit code ``status.json`` records)."""
    return _train(args.dotlist, show_config=args.show_config)


def _train(dotlist: list[str], *, show_config: bool) -> int:
    from agl_lab.config.bases import BASES
    from agl_lab.config.compose import compose_from
    from agl_lab.curves.panels import first_present
    from agl_lab.curves.summary import SUCCESS, success_first_last
    from agl_lab.training.runs import TRAINED_NOTHING, resolved_config_yaml
    from agl_lab.training.trainer import train

    cfg = compose_from(COMMAND.base, dotlist=dotlist)
    if show_config:
        print(resolved_config_yaml(cfg))
    print_base(COMMAND.base)
    if not print_settings_and_findings(cfg, trainer=BASES[COMMAND.base].trainer):
        return 1
    result = train(cfg, composed=True)  # compose_from checked its keys, types and interpolations
    history = result.history
    if len(history):
        first, last = success_first_last(history[SUCCESS])
        print(
            f"{len(history)} steps{' (stopped early)' if result.stopped else ''}; success rate "
            f"{first:.2f} over the first 20% of steps -> {last:.2f} over the last"
        )
    core = first_present(VAL_CORE_REWARD, result.validation.columns)  # trainer.test_freq > 0: verl's val-core
    if core is not None:
        val = result.validation.dropna(subset=[core])
        curve = ", ".join(f"{v:.2f} at step {s}" for s, v in zip(val["step"], val[core], strict=True))
        print(f"held-out success, greedy ({core}): {curve}")
    if result.wandb_run:
        print(f"W&B run: {result.wandb_run}")
    print(result.run_dir)
    if result.stopped:
        return stopped(result.interrupted_by or "SIGINT")
    if result.exit_code == TRAINED_NOTHING:
        raise TrainedNothingError(
            f"every one of the {len(history)} steps was skipped: no rows were left for a PPO mini-batch after the "
            f"drops (see training/n_sample_dropped/* in {result.run_dir / 'metrics.jsonl'}): lower "
            f"{MINI_BATCH} or raise {TRAIN_BATCH} / the length limits"
        )
    return 0


COMMAND = Subcommand(
    name="train",
    help="a short training run; prints its run directory last",
    base="short-run",
    add_arguments=add_train_arguments,
    run=run_train_command,
)
