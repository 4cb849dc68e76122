"""A sweep's plan: every cell of settings × seeds, each config composed and checked before the first cell trains.

:func:`plan_sweep` turns the settings (name → dotlist items) and seeds into :class:`~agl_lab.studies.sweep_cells.Cell`
records and refuses, before anything is created, every sweep that would train something other than what was asked:

* a config any stage would refuse: every setting's config goes through :func:`~agl_lab.training.preflight.
  check_trainable` (the doctor, the estimator, verl's actor checks, the memory and time of a step) — the cells of a
  setting differ only in ``lab.seed``, ``lab.run_dir`` and ``trainer.experiment_name``, which the sweep sets itself;
  so a ``gae`` setting fails the sweep at once, not after the ``grpo`` cells trained;
* the keys the sweep owns — ``lab.seed`` (from the seeds), ``lab.run_dir`` (``<sweep_dir>/<setting>/seed-<n>``) and
  ``trainer.experiment_name`` (the setting's name) — given in an item or the overrides: they would be printed as
  applied, then silently replaced;
* duplicate seeds, seeds outside ``lab.seed``'s range, names that are not folder names (``..`` included) or differ
  only in case;
* more cells (settings × seeds) than a sweep holds (:data:`agl_lab.config.grid.MAX_SWEEP_CELLS`), with a rough count
  of the time they would take, before any config is composed; planning takes time in proportion to what is asked
  (one composed config per setting, each cell's seed put into it);
* two settings with one config (each cell trained and counted twice), and two settings that differ only in a
  secret's value: the records hold secrets as ``***``, so their cells could not be told apart; the message names the
  key, never the values.

Arguments from a notebook may be numpy values (``np.arange(3)`` as seeds); a wrong kind is a ``TypeError`` naming
the parameter (:mod:`agl_lab.config.arguments`). Each cell's ``lab.run_dir`` item is quoted for Hydra, so a sweep
folder may hold spaces, accents, ``=`` and ``,`` (``--out 'démo out'``, ``--out lr=1e-5``).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agl_lab.config.arguments import integer_list, mapping, path, string_list
from agl_lab.config.compose import ConfigError, short_run_config
from agl_lab.config.doctor import DoctorError
from agl_lab.config.dotlist import hydra_value
from agl_lab.config.feasibility import estimate_step
from agl_lab.config.grid import MAX_SWEEP_CELLS, too_many_cells
from agl_lab.config.secrets import is_secret_key, redact, redact_argv
from agl_lab.config.tree import leaves
from agl_lab.core.keys import EXPERIMENT_NAME, RUN_DIR, SEED
from agl_lab.studies.sweep_cells import Cell, config_sha256, container_sha256
from agl_lab.training.preflight import check_trainable

__all__ = ["SWEEP_OWNED_KEYS", "plan_sweep"]

# Keys a sweep sets for each cell, and what it sets them from.
SWEEP_OWNED_KEYS = {
    SEED: "each cell's seed (the seeds you give: --seeds)",
    RUN_DIR: "each cell's folder, <sweep_dir>/<setting>/seed-<n> (choose the sweep folder: --out)",
    EXPERIMENT_NAME: "each cell's setting name (name the settings instead)",
}


def plan_sweep(
    settings: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    *,
    sweep_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    dotlist: Sequence[str] = (),
) -> list[Cell]:
    """The cells of a sweep, every config composed and checked now (module docstring); raises before anything runs.

    ``ConfigError`` for a bad item, a key the sweep owns or settings that collide, ``DoctorError`` for what a run
    would refuse, ``ValueError`` for bad seeds or names, ``TypeError`` for arguments of the wrong kind.
    """
    settings = mapping(settings, name="settings", what="a mapping of setting name -> list of key=value items")
    seeds = _checked_seeds(seeds)
    root = path(sweep_dir, name="sweep_dir")
    overrides = mapping(overrides, name="overrides", what="a mapping of config keys to values", optional=True)
    dotlist = string_list(dotlist, name="dotlist", what="Hydra overrides like 'key.path=value'")
    if not settings:
        raise ValueError("settings is empty: give at least one {name: [key=value, ...]}")
    settings = {
        name: string_list(items, name=f"settings[{name!r}]", what="the setting's key=value items")
        for name, items in settings.items()
    }
    _refuse_owned_keys(settings, overrides, dotlist)
    _refuse_too_many(settings, seeds, overrides, dotlist)
    cells, names, configs = [], {}, {}
    for name, items in settings.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name) or set(name) == {"."}:
            raise ValueError(
                f"setting name {name!r} must be letters, digits or _ . + - and not only dots (it names a directory)"
            )
        if name.lower() in names:
            raise ValueError(f"settings {names[name.lower()]!r} and {name!r} differ only in case: rename one")
        names[name.lower()] = name
        unnamed = short_run_config(overrides, (*dotlist, *items, f"{SEED}={seeds[0]}"))  # raises ConfigError
        cfg = short_run_config(overrides, (*dotlist, *items, *_owned(root, name, seeds[0])))
        _check_setting(name, cfg)
        _refuse_same_config(name, unnamed, configs)
        resolved = redact(OmegaConf.to_container(cfg, resolve=True))  # the cells differ only in the seed (and folder)
        for seed in seeds:
            resolved["lab"]["seed"] = seed
            cell_dotlist = (*dotlist, *items, *_owned(root, name, seed))
            run_dir = str(root / name / f"seed-{seed}")
            cells.append(Cell(name, seed, cell_dotlist, run_dir, config_sha256=container_sha256(resolved)))
    return cells


def _owned(root: Path, name: str, seed: int) -> tuple[str, ...]:
    run_dir = hydra_value(str(root / name / f"seed-{seed}"))  # quoted when it holds spaces, accents, = or ,
    return (f"{SEED}={seed}", f"{RUN_DIR}={run_dir}", f"{EXPERIMENT_NAME}={name}")


def _refuse_too_many(
    settings: dict[str, list[str]], seeds: list[int], overrides: Mapping[str, Any] | None, dotlist: list[str]
) -> None:
    """Refuse more cells than a sweep holds, saying how long they would take by the doctor's rough count."""
    cells = len(settings) * len(seeds)
    if cells <= MAX_SWEEP_CELLS:
        return
    try:
        cfg = short_run_config(overrides, (*dotlist, *next(iter(settings.values()))))
        seconds = estimate_step(cfg).seconds * int(cfg.trainer.total_training_steps)
        took = f" (~{_duration(seconds)} a cell by a rough count, an upper bound: ~{_duration(seconds * cells)} in all)"
    except (ConfigError, TypeError, ValueError):  # what is wrong with the config is said once there are fewer cells
        took = ""
    raise ValueError(f"{len(settings)} settings x {len(seeds)} seeds = {too_many_cells('cells', cells, took=took)}")


def _check_setting(name: str, cfg: DictConfig) -> None:
    """What a run of the setting would refuse, raised now, each problem naming the setting."""
    try:
        check_trainable(cfg, composed=True)  # short_run_config composed it: its keys and types are checked
    except ConfigError as exc:
        lines = [line.removeprefix("  - ") for line in str(exc).splitlines()[1:]] or [str(exc)]
        problems = [line.removeprefix("error").lstrip() for line in lines]  # it is an error: say what and where
        kind = DoctorError if isinstance(exc, DoctorError) else ConfigError
        raise kind("config has problems:\n" + "\n".join(f"  - setting {name!r}: {p}" for p in problems)) from exc


def _refuse_owned_keys(settings: dict[str, list[str]], overrides: Mapping[str, Any] | None, dotlist: list[str]) -> None:
    given = [(item, "every cell") for item in dotlist]
    given += [(item, f"setting {name!r}") for name, items in settings.items() for item in items]
    given += [(f"{key}={value!r}", "the overrides") for key, value in leaves(overrides or {})]
    problems = []
    for item, where in given:
        key = str(item).partition("=")[0].lstrip("+~")
        if key in SWEEP_OWNED_KEYS:
            shown = redact_argv([str(item)])[0]
            problems.append(
                f"{shown} ({where}): a sweep sets {key} itself, to {SWEEP_OWNED_KEYS[key]}; remove the item "
                "(it would be ignored)"
            )
    if problems:
        raise ConfigError("config has problems:\n" + "\n".join(f"  - {p}" for p in problems))


def _refuse_same_config(name: str, cfg: DictConfig, configs: dict[str, tuple[str, DictConfig]]) -> None:
    """Refuse a setting whose config (without its name) another setting already has, or has but for secrets."""
    digest = config_sha256(cfg)  # secrets masked, as cell records store them
    if digest not in configs:
        configs[digest] = (name, cfg)
        return
    other, other_cfg = configs[digest]
    secrets = _secret_differences(other_cfg, cfg)
    if secrets:
        raise ConfigError(
            f"config has problems:\n  - settings {other!r} and {name!r} differ only in the secret "
            f"{', '.join(secrets)} (values not shown): their cells would be recorded alike (secrets are stored as "
            "***) and could not be told apart; give the secret once, for every run, and sweep something else"
        )
    raise ConfigError(
        f"config has problems:\n  - settings {other!r} and {name!r} resolve to the same config: each cell would be "
        "trained twice and counted twice; drop one, or make them differ"
    )


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _secret_differences(a: DictConfig, b: DictConfig) -> list[str]:
    values_a = dict(leaves(OmegaConf.to_container(a, resolve=True)))
    values_b = dict(leaves(OmegaConf.to_container(b, resolve=True)))
    keys = sorted(set(values_a) | set(values_b))
    return [key for key in keys if is_secret_key(key) and values_a.get(key) != values_b.get(key)]


def _checked_seeds(seeds: Any) -> list[int]:
    seeds = integer_list(seeds, name="seeds", what=f"the {SEED} of each cell")
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    out = []
    for seed in seeds:
        if not 0 <= seed <= 2**32 - 1:
            raise ValueError(f"seeds must be integers in [0, 2**32-1] ({SEED}), got {seed!r}")
        out.append(seed)
    repeated = sorted(seed for seed, n in collections.Counter(out).items() if n > 1)
    if repeated:
        raise ValueError(f"seeds {repeated} appear more than once: each would be trained twice and counted twice")
    return out
