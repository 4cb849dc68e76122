"""Settings × values from the command line: dotlist items with several values (``key=a,b``) into named settings.

``agl-lab sweep`` takes a dotlist in which some items hold several values in Hydra's sweep grammar
(``algorithm.enable_rollout_level_advantage=true,false``, ``agentlightning.max_ppo_update_times=null,2``,
``lab.max_turns=range(2,5)``; an ``interval(...)`` is refused, it cannot be enumerated). Every combination of
their values is one setting, named after its values (``enable_rollout_level_advantage-true``, joined by ``+`` for
several keys); the single-valued items apply to every setting. Everywhere else (``check``, ``train``, ``launch``,
the notebooks) a config holds one value per key, and :func:`agl_lab.compose_config` refuses such items.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import QuotedString
from hydra.errors import HydraException

from agl_lab.config.compose import ConfigError
from agl_lab.config.dotlist import hydra_value
from agl_lab.config.secrets import is_secret_key, redact_argv

__all__ = ["sweep_grid"]

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def sweep_grid(dotlist: Sequence[str]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Split ``dotlist`` into settings (name → their dotlist items) and the items common to every setting.

    The settings are the product of the multi-valued items' values, in the order given (the first key varies
    slowest); empty when no item has several values. Raises :class:`ConfigError` naming an item that cannot be
    parsed or enumerated.
    """
    parser = OverridesParser.create()
    axes: list[list[tuple[str, str]]] = []  # per multi-valued item: (name part, dotlist item) per value
    common: list[str] = []
    problems = []
    for item in dotlist:
        try:
            (override,) = parser.parse_overrides([item])
        except HydraException as exc:
            shown = redact_argv([item])[0]  # a secret's value is never echoed
            reason = str(exc).splitlines()[0].replace(item, shown)
            problems.append(f"{shown}: {reason}: write key.path=value or key.path=a,b")
            continue
        if not override.is_sweep_override():
            common.append(item)
            continue
        try:
            values = [_plain(value) for value in override.sweep_iterator()]
        except HydraException:
            problems.append(f"{item}: a continuous range cannot be swept; list the values (key=a,b,c or range(1,4))")
            continue
        if is_secret_key(override.key_or_group):  # setting names (folders, lines printed) would carry the values
            problems.append(
                f"{override.key_or_group}: a secret cannot take several values (the settings would differ only in a "
                "value never shown, and be named after it); give it once, for every run"
            )
            continue
        key = override.get_key_element()  # with Hydra's + or ++ prefix when the item has one
        short = override.key_or_group.rsplit(".", 1)[-1]
        axes.append([(f"{short}-{_name_part(value)}", f"{key}={hydra_value(value)}") for value in values])
    if problems:
        raise ConfigError("config has problems:\n" + "\n".join(f"  - {p}" for p in problems))
    settings: dict[str, tuple[str, ...]] = {}
    for combination in itertools.product(*axes) if axes else ():
        name = "+".join(part for part, _ in combination)
        while name in settings:  # values that differ only in characters a folder name cannot hold
            name += "_"
        settings[name] = tuple(item for _, item in combination)
    return settings, common


def _plain(value):
    """Hydra's parsed value with its quoted strings as plain text."""
    if isinstance(value, QuotedString):
        return value.text
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _name_part(value) -> str:
    text = hydra_value(value).strip("'")
    return _NAME_CHARS.sub("_", text) or "empty"
