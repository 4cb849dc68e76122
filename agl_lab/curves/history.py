"""Training histories from anywhere, as one long-form table: ``source, run, setting, seed, step, metric, value``.

Sources: an agl_lab run directory (``metrics.jsonl`` + ``config.yaml``), an offline W&B run directory
(read with :mod:`agl_lab.curves.wandb_offline`), an online W&B run through ``wandb.Api`` (needs a key), a CSV
exported from the W&B UI, and verl's ``file``-backend JSONL (``{"step": N, "data": {...}}`` lines). One
table lets local lab runs and runs you already have from real Agent Lightning training share a plot.

Readers never guess. A torn last line (a killed run, a full disk; a CSV without its final newline) or a damaged W&B
record is left out with a :class:`~agl_lab.files.jsonl.DamagedFileWarning` that counts it, and every complete step is
read; anything else that cannot be read as written is a ValueError naming the file, the line and what was expected:
a damaged line in the middle, a CSV row with more or fewer fields than its header, a step that is not an integer
(``abc``, ``2.5``, ``"x"``, missing), a metric value that is not a number in an agl_lab or verl file (W&B runs also
log text and media, which are not metrics and are skipped). Empty and binary files are errors that name the file; a
UTF-8 byte-order mark is accepted; a CSV with a header and no rows warns.

**NaN and ±inf, one policy for every reader:** a value logged as NaN or ±inf is kept as it was logged (a diverged
loss is a finding, not a gap) and each file's reader warns once (:class:`NonFiniteWarning`), naming the metrics and
counting the values; an empty CSV cell or a JSON ``null`` is a step at which the metric was not logged (no row).
Means and bands skip NaN (pandas), so a NaN step leaves a gap in a figure; an inf moves its mean to inf.
Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from agl_lab.config import arguments
from agl_lab.core.keys import EXPERIMENT_NAME, SEED
from agl_lab.curves.history_table import COLUMNS, NonFiniteWarning, finish, gap, long_table, warn_non_finite
from agl_lab.curves.wandb_csv import csv_steps
from agl_lab.curves.wandb_offline import find_offline_runs, read_offline_run
from agl_lab.files.jsonl import DamagedFileWarning, read_jsonl_lines, read_text_file

__all__ = [
    "COLUMNS",
    "NonFiniteWarning",
    "long_form",
    "missing_metrics",
    "read_history",
    "read_run_dir",
    "read_timings",
    "read_verl_jsonl",
    "read_wandb_csv",
    "read_wandb_offline",
    "read_wandb_online",
    "require_metrics",
]


def read_history(path: str | Path) -> pd.DataFrame:
    """Read any supported source, chosen by what ``path`` is; ``wandb://entity/project/run_id`` goes online."""
    arguments.path(path, name="path")  # a TypeError naming it for anything but a str or a Path
    text = str(path)
    if text.startswith("wandb://"):
        return read_wandb_online(text.removeprefix("wandb://"))
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such run, W&B directory or export: {path}")
    if path.is_dir():
        if (path / "metrics.jsonl").exists():
            return read_run_dir(path)
        if any(path.rglob("run-*.wandb")):
            return read_wandb_offline(path)
        raise ValueError(
            f"{path} is neither an agl_lab run directory (metrics.jsonl) nor holds offline W&B runs (run-*.wandb)"
        )
    if path.suffix == ".wandb":
        return read_wandb_offline(path)
    if path.suffix == ".csv":
        return read_wandb_csv(path)
    if path.suffix == ".jsonl":
        return read_verl_jsonl(path)
    raise ValueError(f"{path}: unknown kind of file; expected a run directory, .wandb, .csv or .jsonl")


def read_run_dir(
    path: str | Path, *, setting: str | None = None, seed: int | None = None, validation: bool = True
) -> pd.DataFrame:
    """An agl_lab run directory: its ``metrics.jsonl``, labelled by its config (experiment name and lab.seed), and
    (``validation``) the held-out evaluations of ``validation.jsonl`` at steps metrics.jsonl has no line for (step 0,
    before training; the later ones are in their step's line already)."""
    before = "validation.jsonl" if validation else None
    return _read_run_file(Path(path), "metrics.jsonl", setting=setting, seed=seed, before=before)


def read_timings(path: str | Path, *, setting: str | None = None, seed: int | None = None) -> pd.DataFrame:
    """An agl_lab run directory's ``timings.jsonl`` (``timing_s/*``, ``perf/*`` per step), labelled like its metrics."""
    return _read_run_file(Path(path), "timings.jsonl", setting=setting, seed=seed)


def _read_run_file(
    path: Path, name: str, *, setting: str | None, seed: int | None, before: str | None = None
) -> pd.DataFrame:
    file = path / name
    if not file.exists():
        raise FileNotFoundError(f"{path} has no {name}: is it an agl_lab run directory?")
    config = _yaml(path / "config.yaml")
    steps = [(f"{file}, line {n}", row.get("step"), row) for n, row in read_jsonl_lines(file)]
    if before is not None and (path / before).is_file():  # records of steps the main file lacks (step 0)
        logged = {step for _, step, _ in steps}
        extra = [(f"{path / before}, line {n}", r.get("step"), r) for n, r in read_jsonl_lines(path / before)]
        steps = [row for row in extra if row[1] not in logged] + steps
    return long_table(
        steps,
        source="agl_lab",
        run=path.name,
        setting=setting or _get(config, EXPERIMENT_NAME) or path.name,
        seed=seed if seed is not None else _get(config, SEED),
        origin=file,
    )


def read_wandb_offline(path: str | Path, *, include_incomplete: bool = False) -> pd.DataFrame:
    """Every offline W&B run below ``path``; runs without their exit record are left out unless asked for."""
    tables, unfinished = [], []
    for file in find_offline_runs(path):
        run = read_offline_run(file)
        if run.damaged:
            warnings.warn(
                f"{file}: left out {len(run.damaged)} damaged record(s) (bad checksum or type at bytes "
                f"{', '.join(map(str, run.damaged[:5]))}); kept every record that checks out",
                DamagedFileWarning,
                stacklevel=2,
            )
        if not run.complete and not include_incomplete:
            unfinished.append(file.parent.name)
            continue
        tables.append(
            long_table(
                ((f"{file}, history record {i}", row.get("_step"), row) for i, row in enumerate(run.history, 1)),
                source="wandb-offline",
                run=run.run_id,
                setting=_get(run.config, EXPERIMENT_NAME) or run.name or run.run_id,
                seed=_get(run.config, SEED),
                origin=file,
                strict=False,
            )
        )
    if unfinished:
        warnings.warn(
            f"left out {len(unfinished)} unfinished offline W&B run(s) below {path} (no exit record yet: still "
            f"running, or crashed): {', '.join(unfinished)}; include_incomplete=True reads them as they are",
            stacklevel=2,
        )
    if not tables:
        raise ValueError(f"no finished offline W&B run below {path} (a run is finished once it has its exit record)")
    return pd.concat(tables, ignore_index=True)


def read_wandb_online(run_path: str, *, api: Any | None = None) -> pd.DataFrame:
    """A run on the W&B server (``entity/project/run_id``); needs network and a W&B key (``wandb login``)."""
    if api is None:
        import wandb

        api = wandb.Api()
    run = api.run(run_path)
    config = dict(run.config)
    rows = enumerate(run.scan_history(), 1)
    return long_table(
        ((f"W&B run {run_path}, history row {i}", row.get("_step"), row) for i, row in rows),
        source="wandb",
        run=run.id,
        setting=_get(config, EXPERIMENT_NAME) or run.name,
        seed=_get(config, SEED),
        origin=f"W&B run {run_path}",
        strict=False,
    )


def read_wandb_csv(path: str | Path) -> pd.DataFrame:
    """A CSV exported from the W&B UI: a ``Step`` column and ``<run> - <metric>`` columns (``__MIN``/``__MAX``
    band columns are ignored), or plain metric columns for one run named after the file
    (:mod:`agl_lab.curves.wandb_csv`: ragged rows and cells that are not numbers are refused)."""
    path = Path(path)
    by_run: dict[str, list[tuple[str, Any, dict[str, float]]]] = {}
    for where, run, step, values in csv_steps(path):
        by_run.setdefault(run, []).append((where, step, values))
    tables = [
        long_table(steps, source="wandb-csv", run=run, setting=run, origin=path, warn=False)
        for run, steps in by_run.items()
    ]
    table = pd.concat(tables, ignore_index=True) if tables else finish(pd.DataFrame(columns=COLUMNS))
    warn_non_finite(table, origin=path)
    return table


def read_verl_jsonl(path: str | Path) -> pd.DataFrame:
    """verl's ``file`` tracking backend: one ``{"step": N, "data": {...}}`` object per line."""
    path = Path(path)
    rows = read_jsonl_lines(path)
    if not all("step" in r and isinstance(r.get("data"), dict) for _, r in rows):
        if all("step" in r for _, r in rows):  # an agl_lab metrics.jsonl given directly
            return long_table(
                ((f"{path}, line {n}", r["step"], r) for n, r in rows),
                source="agl_lab", run=path.parent.name, setting=None, origin=path,
            )  # fmt: skip
        raise ValueError(f"{path} is not verl file-backend output: lines must be {{'step': N, 'data': {{...}}}}")
    return long_table(
        ((f"{path}, line {n}", r["step"], r["data"]) for n, r in rows),
        source="verl-file", run=path.stem, setting=path.parent.name, origin=path,
    )  # fmt: skip


def long_form(
    history: pd.DataFrame, *, setting: str, seed: int | None = None, run: str | None = None, source: str = "agl_lab"
) -> pd.DataFrame:
    """One run's wide history (a line per step: ``step`` + a column per metric, as :func:`agl_lab.train` returns
    it) as the long-form table every history figure and band reads."""
    if "step" not in history:
        raise ValueError(f"a run history needs a step column; it has {list(history.columns)[:10]}")
    records = [{k: v for k, v in row.items() if v is not None and not gap(v)} for row in history.to_dict("records")]
    return long_table(
        ((f"history row {i}", row.get("step"), row) for i, row in enumerate(records, 1)),
        source=source, run=run or setting, setting=setting, seed=seed, origin="the history",
    )  # fmt: skip


def missing_metrics(table: pd.DataFrame, expected: Iterable[str]) -> dict[str, list[str]]:
    """For each run, the expected metrics it never logged (runs with everything are left out)."""
    expected = list(expected)
    present = table.groupby("run")["metric"].agg(set)
    return {
        run: [m for m in expected if m not in metrics] for run, metrics in present.items() if set(expected) - metrics
    }


def require_metrics(table: pd.DataFrame, expected: Sequence[str]) -> None:
    """Raise a ValueError naming, per run, the expected metrics it lacks."""
    missing = missing_metrics(table, expected)
    if missing:
        lines = [f"  {run}: {', '.join(metrics)}" for run, metrics in missing.items()]
        raise ValueError("runs without the expected metrics:\n" + "\n".join(lines))


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        # libyaml's parser where PyYAML has it (the same values, the same types): a run's config.yaml is ~600 lines
        loaded = yaml.load(read_text_file(path, what="YAML file"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from exc
    return loaded if isinstance(loaded, dict) else {}
