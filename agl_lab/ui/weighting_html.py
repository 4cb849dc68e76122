"""The weighting panel's text: the summary line under its settings and the rows of a clicked rollout.

Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd

from agl_lab.config.modes import LOSS_MODES
from agl_lab.lab.weighting import Weighting

__all__ = ["rows_html", "summary_html"]

_SHORT = {"mini_batch": "mini-batch", "micro_batch": "micro", "trainable_tokens": "tokens", "advantage": "adv."}


def rows_html(rollout_id: Any, table: pd.DataFrame) -> str:
    """An HTML table of one rollout's rows (``table``: its lines of ``Weighting.row_table``)."""
    head = "".join(f"<th>{html.escape(_SHORT.get(c, c))}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in line) + "</tr>"
        for line in table.itertuples(index=False)
    )
    rid = html.escape(str(rollout_id), quote=True)
    return (
        f"<b>Rows of rollout {html.escape(str(rollout_id))}</b> (mini-batch −1: dropped)"
        f"<table class='rollout-rows' data-rollout='{rid}' style='font-size:10px; line-height:1.2'>"
        f"<thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float | np.floating) else str(value)


def summary_html(result: Weighting, s: dict[str, Any], dotlist: list[str]) -> str:
    """The shown mode's formula, the batch's loss scale, the spread and what was trained; the settings as overrides."""
    mode = LOSS_MODES[s["mode"]]
    weight = result.rollout_weight(s["mode"])[result.rows_kept > 0]
    ratio = f"{weight.max() / weight.min():.3g}×" if len(weight) and weight.min() > 0 else "–"
    trainable = "" if mode.trainable else " (not trainable in Agent Lightning's trainer: the overrides leave it out)"
    mini_batches = int(result.layout.mini_batch.max(initial=-1)) + 1
    return (
        f"<b>{html.escape(mode.label)}</b> <code>{html.escape(mode.formula)}</code>: batch total loss scale Σ weights "
        f"= <b>{weight.sum():.4g}</b>; heaviest / lightest rollout = <b>{ratio}</b>; "
        f"{len(result.kept)} of {len(result.compact)} rows and {result.n_rollouts_kept} of "
        f"{result.rollout_groups.n_groups} rollouts trained in {mini_batches} mini-batches."
        f"<br><small>As config overrides{trainable}: <code>" + html.escape(" ".join(dotlist)) + "</code></small>"
    )
