"""Figures of short runs: metric histories (one line per step, Agent Lightning's metric names) drawn over steps.

Histories come from :func:`agl_lab.train` (``Run.history``), a run directory's ``metrics.jsonl`` or the W&B readers
of :mod:`agl_lab.history`. Like :mod:`agl_lab.plots`, each function takes an optional Axes and returns the Figure,
made without pyplot. Notebooks: ``notebooks/01_per_rollout_weighting.ipynb`` (``n_rows`` vs ``n_rollouts``),
``notebooks/03_short_training_runs.ipynb``; the training panel redraws them live.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from agl_lab.plots import FATE_STYLE, figure_and_axes

__all__ = [
    "aggregated_counts",
    "compare_runs",
    "n_rows_vs_n_rollouts",
    "step_rows",
    "success_curve",
    "training_overview",
]

N_ROWS = "training/rollout_level_advantage/n_rows"
N_ROLLOUTS = "training/rollout_level_advantage/n_rollouts"
SUCCESS = "lab/success_rate"
# Rows of a step: collected by trace aggregation, then trained or dropped (FATE_STYLE's fates as metric names).
STEP_ROWS = {
    "kept": "training/n_sample_trained",
    "dropped/same_reward": "training/n_sample_dropped/same_reward",
    "dropped/random": "training/n_sample_dropped/random",
    "dropped/marked": "training/n_sample_dropped/marked",
}


def n_rows_vs_n_rollouts(history: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """``n_rows`` and ``n_rollouts`` per training step; the gap is rows that split rollouts added.

    ``history``: one line per step with ``training/rollout_level_advantage/n_rows`` and ``.../n_rollouts`` (or
    ``n_rows``/``n_rollouts``), optionally ``step``: the two metrics Agent Lightning tells users to watch. The right
    axis shows v1.0's batch total n_rollouts/n_rows, the loss scale that drifts with them (Agent Lightning #593).
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    n_rows = history[N_ROWS if N_ROWS in history else "n_rows"].to_numpy(dtype=float)
    n_rollouts = history[N_ROLLOUTS if N_ROLLOUTS in history else "n_rollouts"].to_numpy(dtype=float)
    steps = history["step"].to_numpy() if "step" in history else np.arange(len(history))
    ax.plot(steps, n_rows, color="tab:blue", marker="o", ms=3, label="n_rows")
    ax.plot(steps, n_rollouts, color="tab:purple", ls="--", label="n_rollouts")
    ax.fill_between(steps, n_rollouts, n_rows, color="tab:blue", alpha=0.12, label="extra rows of split rollouts")
    ax.set_ylim(0, max(n_rows.max(initial=1), n_rollouts.max(initial=1)) * 1.15)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("count per step")
    scale = ax.twinx()
    scale.plot(steps, n_rollouts / n_rows, color="tab:gray", ls=":", lw=2, label="v1.0 total: n_rollouts/n_rows")
    scale.set_ylim(0, 1.05)
    scale.set_ylabel("per_rollout_mean v1.0 batch total", color="0.35")
    ax.set_title("n_rows vs n_rollouts per step")
    handles = ax.get_legend_handles_labels()[0] + scale.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=8, loc="lower left")
    return fig


def success_curve(
    history: pd.DataFrame, *, label: str | None = None, window: int = 5, ax: Axes | None = None
) -> Figure:
    """Task success rate per training step (thin) and its rolling mean over ``window`` steps (thick).

    ``history``: a short run's history (``step``, ``lab/success_rate``). The default task's reward is 1 on success
    and 0 otherwise, so ``training/reward`` is the same curve. Call again on the same ``ax`` with another
    ``label`` to compare runs.
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    steps, success = history["step"].to_numpy(), history[SUCCESS].to_numpy(dtype=float)
    smooth = pd.Series(success).rolling(window, min_periods=1).mean().to_numpy()
    (line,) = ax.plot(steps, smooth, lw=2.2, label=label or f"rolling mean ({window} steps)")
    ax.plot(steps, success, lw=0.8, alpha=0.45, color=line.get_color())
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("success rate (= training/reward)")
    ax.set_title("Task success per step (thin: per step; thick: rolling mean)", fontsize=11)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def step_rows(history: pd.DataFrame, *, ax: Axes | None = None) -> Figure:
    """Rows of each training step, stacked: trained, and dropped by cause (Agent Lightning's drop counters).

    The bars' total is ``training/n_sample_collected``. ``history`` lacks the dropped counters of a cause that
    never fired only if it was written without them; missing columns count as 0.
    """
    fig, ax = figure_and_axes(ax, (6, 4))
    steps = history["step"].to_numpy()
    bottom = np.zeros(len(history))
    for fate, metric in STEP_ROWS.items():
        values = history[metric].fillna(0).to_numpy(dtype=float) if metric in history else np.zeros(len(history))
        label, colour = FATE_STYLE[fate]
        if values.any() or fate == "kept":
            ax.bar(steps, values, 0.85, bottom=bottom, color=colour, label=f"{label}: {int(values.sum())}", lw=0)
            bottom += values
    ax.set_ylim(0, max(bottom.max(initial=1), 1) * 1.3)  # headroom for the legend
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("rows")
    ax.set_title("Rows per step: trained, and dropped by the alignment and cap", fontsize=11)
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    return fig


def training_overview(history: pd.DataFrame, *, title: str | None = None) -> Figure:
    """A short run in one figure: success, ``n_rows`` vs ``n_rollouts`` (as aggregated), rows trained and dropped."""
    fig = Figure(figsize=(17, 4.4), layout="constrained")
    axes = fig.subplots(1, 3)
    success_curve(history, ax=axes[0])
    n_rows_vs_n_rollouts(aggregated_counts(history), ax=axes[1])
    step_rows(history, ax=axes[2])
    if title:
        fig.suptitle(title)
    return fig


def compare_runs(histories: dict[str, pd.DataFrame]) -> dict[str, Figure]:
    """Runs side by side (``{setting: history}``): ``success`` in one axes, ``rows_vs_rollouts`` and ``drops``
    one panel per run, on shared axes."""
    success = Figure(figsize=(7.5, 4.4), layout="constrained")
    ax = success.add_subplot()
    for name, history in histories.items():
        success_curve(history, label=name, ax=ax)
    ax.set_title("Task success per step, by setting (thin: per step; thick: rolling mean)", fontsize=11)
    figures = {"success": success}
    for kind, draw in (
        ("rows_vs_rollouts", lambda h, a: n_rows_vs_n_rollouts(aggregated_counts(h), ax=a)),
        ("drops", lambda h, a: step_rows(h, ax=a)),
    ):
        fig = Figure(figsize=(5.6 * len(histories), 4.2), layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(histories), sharey=True))
        for a, (name, history) in zip(axes, histories.items(), strict=True):
            draw(history, a)
            a.set_title(f"{name}\n{a.get_title()}", fontsize=10)
        figures[kind] = fig
    return figures


def aggregated_counts(history: pd.DataFrame) -> pd.DataFrame:
    """``step``, ``n_rows``, ``n_rollouts`` from the adapter's counts (``training/n_sample``, ``training/n_rollouts``).

    Unlike ``training/rollout_level_advantage/*`` (logged only with rollout-level advantage on, and after the
    drops) these exist in every run, so settings can be compared on them.
    """
    return pd.DataFrame(
        {"step": history["step"], "n_rows": history["training/n_sample"], "n_rollouts": history["training/n_rollouts"]}
    )
