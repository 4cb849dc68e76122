"""``agl-lab demo``: the settings that matter, trained side by side on the embedded default, in a few minutes on a CPU.

The demo is a sweep with one seed (:func:`agl_lab.run_sweep`, serially): three short runs of the default task
and policy (``agl_lab.short_run_config``), same seed, one setting apart (``agl_lab.config.settings.DEMO_SETTINGS``):

* ``both_on`` — Agent Lightning's defaults: rollout-level advantage and ``per_rollout_mean`` (no cap);
* ``both_off`` — plain verl: advantage per row and the ``token-mean`` loss;
* ``both_on_cap2`` — both on with ``agentlightning.max_ppo_update_times=2``, as the docs recommend.

Written to the output folder: the standard panels of :mod:`agl_lab.curves.figures` (``panels.png`` and one PNG per
panel: ``success.png``, ``rows_vs_rollouts.png``, ``drops.png``, ``loss_scale.png``), ``summary.csv`` and
``summary.md`` (one line per setting, :func:`agl_lab.curves.summary.summarize`; ``make readme`` copies the latter
into the README), ``effects.csv`` and ``effects.md`` (each setting's success over the last 20% of steps against
``both_off``, paired by seed: :func:`agl_lab.curves.effects.compare_settings`; with the demo's one seed they say it
needs ≥ 2), ``cells.csv`` (the finished cells the summary and panels cover, with the hash of each one's config)
and each run's directory ``<setting>/seed-<seed>/``. Every file is written whole (temporary file + rename): a stop
while they are written leaves the previous version, never half of one. ``agl-lab sweep`` writes the same files for
settings × seeds (:func:`save_results`). Notebook: ``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from agl_lab.config.arguments import string_list
from agl_lab.config.compose import short_run_config
from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.core.keys import SEED
from agl_lab.curves.bands import Band
from agl_lab.curves.effects import compare_settings, default_baseline
from agl_lab.curves.figures import save_panels
from agl_lab.curves.summary import SUCCESS, markdown_table, summarize
from agl_lab.curves.verdicts import save_effects
from agl_lab.files.atomic_files import write_whole
from agl_lab.studies.sweep import SweepResult, run_sweep

__all__ = ["demo_summary", "run_demo", "save_results"]


def run_demo(
    *,
    out_dir: str | Path | None = None,
    dotlist: Sequence[str] = (),
    settings: Mapping[str, Sequence[str]] = DEMO_SETTINGS,
    progress: bool = True,
) -> SweepResult:
    """Train each setting at one seed (``lab.seed`` in ``dotlist``, default 0), then save the panels and the summary.

    ``dotlist`` applies to every run. ``out_dir`` defaults to a fresh ``runs/demo-<time>/``. Returns the sweep's
    result with ``figures`` (name → PNG path) and the summary files among them; Ctrl-C keeps what finished.
    """
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"demo-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    dotlist = string_list(dotlist, name="dotlist", what="Hydra overrides like 'key.path=value'")
    seed = int(short_run_config(dotlist=dotlist).lab.seed)
    # the seed is the demo's one sweep seed; the sweep refuses it as an item (it sets every cell's own)
    rest = [item for item in dotlist if item.partition("=")[0].lstrip("+") != SEED]
    result = run_sweep(settings, [seed], sweep_dir=out, dotlist=rest, executor="serial", progress=progress)
    return save_results(result, out)  # effects against both_off (default_baseline) when the settings have it


def save_results(
    result: SweepResult, out: str | Path, *, band: Band = "std", baseline: str | None = None
) -> SweepResult:
    """Write a sweep's panels (with ``band`` across seeds), ``summary.csv``/``summary.md`` and the effects against
    ``baseline`` (default :func:`agl_lab.curves.effects.default_baseline`) as ``effects.csv``/``effects.md`` into
    ``out``; set ``result.figures`` (name → path) and ``result.effects``. The demo and ``agl-lab sweep`` both end
    here; nothing is written for an empty table, and no effects when the baseline has no finished run (a warning)."""
    out = Path(out)
    if result.table.empty:
        return result
    summary = demo_summary(result)
    covered = result.cells.loc[result.cells.status == "done", ["setting", "seed", "status", "config_sha256", "run_dir"]]
    write_whole(out / "summary.csv", summary.to_csv(index=False))
    write_whole(out / "summary.md", markdown_table(summary))
    write_whole(out / "cells.csv", covered.to_csv(index=False))
    result.figures = {
        **save_panels(result.table, out, band=band),
        "summary.csv": out / "summary.csv",
        "summary.md": out / "summary.md",
        "cells.csv": out / "cells.csv",
    }
    settings = list(dict.fromkeys(result.table["setting"]))
    baseline = baseline or default_baseline(settings)
    if baseline not in settings or SUCCESS not in set(result.table["metric"]):
        warnings.warn(f"no effects table: the baseline {baseline!r} has no finished run with {SUCCESS}", stacklevel=2)
        return result
    result.effects = compare_settings(result.table, baseline=baseline, metric=SUCCESS, window="last_20pct")
    result.figures.update(save_effects(result.effects, out))
    return result


def demo_summary(result: SweepResult):
    """The sweep's summary with each setting's wall time (seconds, summed over its cells)."""
    summary = summarize(result.table)
    walls = result.cells.groupby("setting", sort=False)["wall_s"].sum(min_count=1)
    return summary.assign(wall_s=summary["setting"].map(walls))
