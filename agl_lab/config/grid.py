"""Settings × values from the command line: dotlist items with several values (``key=a,b``) into named settings.

``agl-lab sweep`` takes a dotlist in which some items hold several values in Hydra's sweep grammar
(``algorithm.enable_rollout_level_advantage=true,false``, ``agentlightning.max_ppo_update_times=null,2``,
``lab.max_turns=range(2,5)``; an ``interval(...)`` is refused, it cannot be enumerated). Every combination of
their values is one setting, named after its values (``enable_rollout_level_advantage-true``, joined by ``+`` for
several keys); the single-valued items apply to every setting. Everywhere else (``check``, ``train``, ``launch``,
the notebooks) a config holds one value per key, and :func:`agl_lab.compose_config` refuses such items.

A sweep holds at most :data:`MAX_SWEEP_CELLS` cells (settings × seeds): more cannot finish as a lab sweep, so it is
refused before anything is listed (``range(0,100000000)`` is never enumerated, nor a product of axes counted by
enumerating it), and every step of planning a sweep takes time in proportion to what was asked.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

from agl_lab.config.compose import ConfigError
from agl_lab.config.dotlist import hydra_value
from agl_lab.config.secrets import is_secret_key, redact_argv

__all__ = ["MAX_SWEEP_CELLS", "sweep_grid", "too_many_cells"]

MAX_SWEEP_CELLS = 1000  # settings x seeds: a lab sweep of more cannot finish (module docstring)

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def sweep_grid(dotlist: Sequence[str]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Split ``dotlist`` into settings (name → their dotlist items) and the items common to every setting.

    The settings are the product of the multi-valued items' values, in the order given (the first key varies
    slowest); empty when no item has several values. Raises :class:`ConfigError` naming an item that cannot be
    parsed or enumerated.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser  # here: `agl-lab --help` and the commands
    from hydra.errors import HydraException  # that take no grid never load Hydra's parser

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
            values = [_plain(value) for value in itertools.islice(override.sweep_iterator(), MAX_SWEEP_CELLS + 1)]
        except HydraException:
            problems.append(f"{item}: a continuous range cannot be swept; list the values (key=a,b,c or range(1,4))")
            continue
        if is_secret_key(override.key_or_group):  # setting names (folders, lines printed) would carry the values
            problems.append(
                f"{override.key_or_group}: a secret cannot take several values (the settings would differ only in a "
                "value never shown, and be named after it); give it once, for every run"
            )
            continue
        if len(values) > MAX_SWEEP_CELLS:
            problems.append(f"{redact_argv([item])[0]}: {too_many_cells('values', MAX_SWEEP_CELLS + 1, exact=False)}")
            continue
        key = override.get_key_element()  # with Hydra's + or ++ prefix when the item has one
        short = override.key_or_group.rsplit(".", 1)[-1]
        axes.append([(f"{short}-{_name_part(value)}", f"{key}={hydra_value(value)}") for value in values])
    combinations = math.prod(len(axis) for axis in axes) if axes else 0
    if not problems and combinations > MAX_SWEEP_CELLS:
        sizes = " x ".join(str(len(axis)) for axis in axes)
        problems.append(f"{sizes} values: {too_many_cells('settings', combinations)}")
    if problems:
        raise ConfigError("config has problems:\n" + "\n".join(f"  - {p}" for p in problems))
    settings: dict[str, tuple[str, ...]] = {}
    for combination in itertools.product(*axes) if axes else ():
        name = "+".join(part for part, _ in combination)
        while name in settings:  # values that differ only in characters a folder name cannot hold
            name += "_"
        settings[name] = tuple(item for _, item in combination)
    return settings, common


def too_many_cells(what: str, count: int, *, exact: bool = True, took: str = "") -> str:
    """Why ``count`` ``what`` (values, seeds, settings, cells) are more than a sweep holds, and what to do; ``took``:
    how long they would take, when known."""
    shown = f"{count:,}" if exact else f"more than {count - 1:,}"
    return (
        f"{shown} {what}{took}: a sweep holds at most {MAX_SWEEP_CELLS:,} cells (settings x seeds), each a short run; "
        "sweep fewer values or seeds (several sweeps into one --out folder add up: new seeds extend it)"
    )


def _plain(value):
    """Hydra's parsed value with its quoted strings as plain text."""
    from hydra.core.override_parser.types import QuotedString

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
