"""Effects in words and files: one verdict line per setting, and ``effects.csv``/``effects.md`` beside ``summary.*``.

A row of :func:`agl_lab.curves.effects.compare_settings` becomes one line, e.g. ``both_on − both_off: +0.06 [−0.02,
+0.14], p=0.12, n=3 pairs; ~9 pairs would resolve it``: the mean difference and its 95% interval (2 significant
digits of the largest, a true minus, never exponent form), p, the pairs, and what more seeds would do (the interval
already excludes 0; ~N pairs would resolve it; need ≥ 2 seeds per setting). ``agl-lab sweep`` and ``agl-lab demo``
print these lines after the summary; :func:`save_effects` writes the table and the lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from agl_lab.curves.effects import ALPHA, METHODS, NEED_TWO_SEEDS
from agl_lab.curves.rliable_stats import RECOMMENDED_RUNS
from agl_lab.curves.summary import WINDOWS, markdown_table
from agl_lab.files.atomic_files import write_whole

__all__ = ["effects_markdown", "effects_text", "save_effects", "verdict"]


def verdict(row: Mapping) -> str:
    """One line for an effects row: the difference, its interval, p, the pairs and what more seeds would do."""
    if row.get("method") == "rliable":
        return _rliable_verdict(row)
    alone = row["baseline"] == "0"  # one_sample: the setting's own values against 0
    head = f"{row['setting']} ({row['metric']}):" if alone else f"{row['setting']} − {row['baseline']}:"
    unit = "run" if alone else "pair"
    n = int(row["n_pairs"])
    if n < 2:
        value = f"no {unit}" if n == 0 else f"{_signed([row['mean_diff']])[0]} from 1 {unit}"
        return f"{head} {value}: {NEED_TWO_SEEDS}"
    mean, low, high = _signed([row["mean_diff"], row["ci_low"], row["ci_high"]])
    p = row["p_value"]
    line = f"{head} {mean} [{low}, {high}], p{_p(p)}, n={n} {unit}s"
    needed = row["seeds_needed"]
    if row["sd_diff"] == 0 and row["mean_diff"] == 0:
        return f"{line}; no {unit} differs from 0" if alone else f"{line}; no pair differs"
    if p < ALPHA:
        return f"{line}; the 95% interval excludes 0"
    if math.isinf(needed):
        return f"{line}; a mean of exactly 0: no number of {unit}s would resolve it"
    return f"{line}; ~{int(needed)} {unit}s would resolve it" if needed > n else f"{line}; not resolved"


def effects_text(effects: pd.DataFrame) -> str:
    """The CLI's effects table: per metric a heading that says what was compared, then one verdict line per setting."""
    window = WINDOWS[effects.attrs.get("window", "last_20pct")]
    blocks = []
    how = METHODS[effects.attrs.get("method", "paired_t")].heading
    for metric, part in effects.groupby("metric", sort=False):
        head = f"Effects on {metric} (per run, {window}; {how}):"
        blocks += [head, *(f"  {verdict(row)}" for row in part.to_dict("records"))]
    return "\n".join(blocks or ["Effects: no setting besides the baseline"])


def effects_markdown(effects: pd.DataFrame) -> str:
    """``effects.md``: what was compared and how, the table, one verdict line per row, the seeds left out."""
    window = effects.attrs.get("window", "last_20pct")
    method = METHODS[effects.attrs.get("method", "paired_t")]
    metrics = ", ".join(dict.fromkeys(effects["metric"])) or "(none)"
    baselines = ", ".join(dict.fromkeys(effects["baseline"])) or "(none)"
    lines = [
        f"# Effects vs {baselines}",
        "",
        f"{metrics}: per run, {WINDOWS[window]}. {method.label}",
        "",
        markdown_table(effects).rstrip("\n"),
        "",
        *(f"- {verdict(row)}" for row in effects.to_dict("records")),
    ]
    unpaired = effects.attrs.get("unpaired_seeds") or {}
    if unpaired:
        lines += ["", "Left out (no pair): " + "; ".join(f"{s}: {seeds}" for s, seeds in unpaired.items())]
    return "\n".join(lines) + "\n"


def save_effects(effects: pd.DataFrame, out: str | Path) -> dict[str, Path]:
    """Write ``effects.csv`` and ``effects.md`` into ``out``; returns name → path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_whole(out / "effects.csv", effects.to_csv(index=False))  # never half a table after a stop
    write_whole(out / "effects.md", effects_markdown(effects))
    return {"effects.csv": out / "effects.csv", "effects.md": out / "effects.md"}


def _rliable_verdict(row: Mapping) -> str:
    """``a vs b: IQM 0.85 [0.80, 0.90] vs 0.79 [0.70, 0.84], difference +0.06 [−0.02, +0.14]; P(improvement) 0.72
    [0.45, 0.95], n=5 runs each``, with rliable's recommendation when fewer than 5."""
    head = f"{row['setting']} vs {row['baseline']}:"
    n = int(row["n_pairs"])
    if n < 2:
        return f"{head} {'no run' if n == 0 else '1 run each'}: {NEED_TWO_SEEDS}"
    iqm, low, high, base, base_low, base_high = _plain(
        [row[k] for k in ("iqm", "iqm_low", "iqm_high", "baseline_iqm", "baseline_iqm_low", "baseline_iqm_high")]
    )
    diff, diff_low, diff_high = _signed([row["mean_diff"], row["ci_low"], row["ci_high"]])
    line = (
        f"{head} IQM {iqm} [{low}, {high}] vs {base} [{base_low}, {base_high}], difference {diff} [{diff_low}, "
        f"{diff_high}]; P(improvement) {row['poi']:.2f} [{row['poi_low']:.2f}, {row['poi_high']:.2f}], n={n} runs each"
    )
    return line + (f"; rliable recommends ≥ {RECOMMENDED_RUNS} runs" if n < RECOMMENDED_RUNS else "")


def _plain(values: Sequence[float]) -> list[str]:
    """Numbers with 2 significant digits of the largest (at least 2 decimals), never in exponent form."""
    finite = [abs(v) for v in values if np.isfinite(v) and v != 0]
    decimals = min(max(2, 1 - math.floor(math.log10(max(finite)))) if finite else 2, 8)
    return [f"{v:.{decimals}f}".replace("-", "−") for v in values]


def _signed(values: Sequence[float]) -> list[str]:
    """Signed numbers with a true minus, 2 significant digits of the largest, never in exponent form, at most 8
    decimals: what rounds to 0 there (float noise, like a mean of 1e-17 where two settings give the same numbers)
    is 0, so it reads ``+0`` and not ``+0.00000000``."""
    values = [0.0 if np.isfinite(v) and abs(v) < 5e-9 else v for v in values]
    finite = [abs(v) for v in values if np.isfinite(v) and v != 0]
    decimals = min(max(0, 1 - math.floor(math.log10(max(finite)))), 8) if finite else 0
    return [f"{v:+.{decimals}f}".replace("-", "−") if np.isfinite(v) else str(v) for v in values]


def _p(p: float) -> str:
    """``=0.12``, ``=0.031``, ``<0.001``, or ``=n/a`` (no test: fewer than 2 pairs, or every difference 0)."""
    if not np.isfinite(p):
        return "=n/a"
    return "<0.001" if p < 0.001 else f"={p:.2g}" if p < 0.1 else f"={p:.2f}"
