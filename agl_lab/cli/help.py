"""What ``agl-lab`` says about itself and about a config: the bases, the exit statuses, the version, the settings.

Every subcommand composes its config from a named base (:data:`agl_lab.config.bases.BASES`) and prints it first
(:func:`print_base`); ``--help`` lists the bases with the subcommands that use them and what each exit status means.
``check``, ``train`` and ``launch`` then print the three settings as resolved and the findings
(:func:`print_settings_and_findings`): for a config the lab's trainer runs, its whole start-up gate
(:func:`gate_findings`), so ``check`` and ``train`` say the same line. ``agl-lab check`` from any base other than
``agl`` also says what the doctor finds in the config ``launch`` would send with the same dotlist
(:func:`print_launch_view`), so a check that passes never hides a launch that stops.
"""

from __future__ import annotations

import argparse
import sys

from agl_lab import __version__
from agl_lab.config.bases import BASES
from agl_lab.config.compose import ConfigError, compose_from
from agl_lab.core.keys import WANDB_MODE
from agl_lab.exit_codes import EXIT_CODES, help_epilog

__all__ = ["EPILOG", "EXIT_CODES", "add_run_options", "description", "gate_findings", "print_base", "print_findings"]
__all__ += ["print_launch_view", "print_settings", "print_settings_and_findings", "shown", "version"]

EPILOG = help_epilog()  # what each exit status means: agl_lab.exit_codes holds the table


def description(commands) -> str:
    """The top of ``agl-lab --help``: each base with the subcommands (:class:`agl_lab.cli.commands.Subcommand`) that
    compose from it."""
    return "\n".join(
        [
            "agl-lab (also python -m agl_lab): Agent Lightning's per-rollout settings on verl, from the command line.",
            "",
            "Each subcommand composes its config from a named base and prints which first:",
            *(
                f"  {name:<10} {base.label} [{', '.join(c.name for c in commands if c.base == name)}]"
                for name, base in BASES.items()
            ),
            "then your key=value items (Hydra overrides). `agl-lab check --base agl` checks exactly what launch sends.",
        ]
    )


def print_base(base: str) -> None:
    """The first line of every subcommand: the base its config was composed from."""
    print(f"Base: {base} = {BASES[base].label}")


def print_launch_view(dotlist: list[str], *, config_file: str | None = None) -> None:
    """What the doctor says of the config ``launch`` would send with the same dotlist (base agl), over the same
    config file if one was given."""
    from agl_lab.cli import launch
    from agl_lab.config.doctor import diagnose

    try:
        base = BASES[launch.COMMAND.base]
        cfg = compose_from(base.name, dotlist=dotlist, config_file=config_file)
        findings = diagnose(cfg, trainer=base.trainer, composed=True)
        errors = [f for f in findings if f.level == "error"]
    except ConfigError:  # the same dotlist problem was reported above
        return
    what = "this file and dotlist" if config_file else "this dotlist"
    print(f"\nWhat `agl-lab launch` sends with {what} (base agl):" + ("" if errors else " no errors"))
    for finding in errors:
        print(f"  {finding}")
    if errors:
        print("  launch stops there: add the fix to its dotlist (`agl-lab check --base agl ...` checks exactly that)")


def version() -> str:
    """``agl-lab --version``: agl_lab's version and the verl it runs on."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    def installed(name: str) -> str:
        try:
            return installed_version(name)
        except PackageNotFoundError:
            return "not installed"

    return f"agl-lab {__version__} (Agent Lightning v1.0's per-rollout settings on verl {installed('verl')})"


def print_settings_and_findings(cfg, *, trainer: str) -> bool:
    """The three settings and the findings for ``trainer``: for the lab's, its whole start-up gate
    (:func:`agl_lab.training.preflight.trainer_findings`, what ``check`` prints too); for Agent Lightning's
    (``agl``), the doctor's. False on an error."""
    print_settings(cfg)
    findings = gate_findings(cfg, trainer=trainer)
    print("\nDoctor:" + ("" if findings else " no findings"))
    return print_findings(findings)


def gate_findings(cfg, *, trainer: str) -> list:
    """What ``check`` and ``train`` print for ``trainer`` about a config they composed: the lab trainer's gate, or
    the doctor alone for Agent Lightning's trainer (the lab's start-up code never runs that config)."""
    if trainer == "lab":
        from agl_lab.training.preflight import trainer_findings

        return trainer_findings(cfg, composed=True)
    from agl_lab.config.doctor import diagnose

    return diagnose(cfg, trainer=trainer)


def print_findings(findings) -> bool:
    """The doctor's findings, errors to stderr; False when there is an error."""
    for finding in findings:
        print(f"  {finding}", file=sys.stderr if finding.level == "error" else sys.stdout)
    return not any(f.level == "error" for f in findings)


def print_settings(cfg) -> None:
    """The settings of the catalogue as resolved (label, key, value), with Agent Lightning's default where they
    differ, and the normalization the catalogue names for the combination."""
    from omegaconf import OmegaConf

    from agl_lab.config.modes import LOSS_MODES, mode_from_config
    from agl_lab.config.settings import NORMALIZATION, SETTINGS

    print("The per-rollout settings, as resolved:")
    for key, setting in SETTINGS.items():
        default = setting.default
        note = "" if OmegaConf.select(cfg, key) == default else f"  (Agent Lightning: {_show_value(key, default)})"
        print(f"  {setting.label:<26} {key:<48} {shown(cfg, key)}{note}")
    mode = mode_from_config(cfg)
    label = LOSS_MODES[mode].label if mode else "none in agl_lab's catalogue (agl_lab.LOSS_MODES)"
    print(f"  {NORMALIZATION:<26} {'(policy loss + loss_agg_mode + divisor)':<48} {label}")


def shown(cfg, key: str) -> str:
    """The value of ``key`` in ``cfg`` as the CLI prints it (null with its meaning where it has one, true/false)."""
    from omegaconf import OmegaConf

    return _show_value(key, OmegaConf.select(cfg, key))


def _show_value(key: str, value) -> str:
    from agl_lab.config.constraints import CONSTRAINTS

    if value is None:
        meaning = getattr(CONSTRAINTS.get(key), "null_means", None)  # the constraints table says what null does
        return "null" + (f" ({meaning})" if meaning else "")
    return str(value).lower() if isinstance(value, bool) else str(value)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--executor`` and ``--wandb-mode``, the options of every subcommand that trains several runs (sweep,
    reproduce): one definition, so their choices and defaults never drift apart."""
    parser.add_argument(
        "--executor", choices=("ray", "serial"), default="ray", help="ray: runs in parallel on the cores (default)"
    )
    parser.add_argument(
        "--wandb-mode",
        choices=("online", "offline", "disabled"),
        default=None,
        help=f"every run's {WANDB_MODE} (default auto: $WANDB_MODE, else offline unless a W&B key is configured)",
    )
