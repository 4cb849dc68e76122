"""What ``agl-lab`` says about itself: the base each subcommand composes from, the exit statuses, the version.

Every subcommand composes its config from a named base (:data:`agl_lab.config.compose.BASES`) and prints it first
(:func:`print_base`); ``--help`` lists the bases with the subcommands that use them and what each exit status
means. ``agl-lab check`` from any base other than ``agl`` also says what the doctor finds in the config ``launch``
would send with the same dotlist (:func:`print_launch_view`), so a check that passes never hides a launch that
stops.
"""

from __future__ import annotations

from agl_lab import __version__
from agl_lab.config.compose import BASES, ConfigError, compose_from
from agl_lab.config.doctor import diagnose
from agl_lab.exit_codes import EXIT_CODES, help_epilog

__all__ = ["DESCRIPTION", "EPILOG", "EXIT_CODES", "SUBCOMMAND_BASES", "print_base", "print_launch_view", "version"]

# The base each subcommand composes from (printed by --help and by the subcommand itself).
SUBCOMMAND_BASES = {
    "check": "example",
    "train": "short-run",
    "demo": "short-run",
    "sweep": "short-run",
    "reproduce": "short-run",
    "weighting": "short-run",
    "launch": "agl",
}
# What each exit status means (printed by --help): agl_lab.exit_codes holds the table.


DESCRIPTION = "\n".join(
    [
        "agl-lab (also python -m agl_lab): Agent Lightning's per-rollout settings on verl, from the command line.",
        "",
        "Each subcommand composes its config from a named base and prints which first:",
        *(
            f"  {name:<10} {base.label} [{', '.join(c for c, b in SUBCOMMAND_BASES.items() if b == name)}]"
            for name, base in BASES.items()
        ),
        "then your key=value items (Hydra overrides). `agl-lab check --base agl` checks exactly what launch sends.",
    ]
)
EPILOG = help_epilog()


def print_base(base: str) -> None:
    """The first line of every subcommand: the base its config was composed from."""
    print(f"Base: {base} = {BASES[base].label}")


def print_launch_view(dotlist: list[str]) -> None:
    """What the doctor says of the config ``launch`` would send with the same dotlist (base agl)."""
    try:
        errors = [f for f in diagnose(compose_from(SUBCOMMAND_BASES["launch"], dotlist=dotlist)) if f.level == "error"]
    except ConfigError:  # the same dotlist problem was reported above
        return
    print("\nWhat `agl-lab launch` sends with this dotlist (base agl):" + ("" if errors else " no errors"))
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
