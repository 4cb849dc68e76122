"""The standard panels of a training history: what each compares, its lines, its y axis and any reference line.

One definition for the PNGs (:mod:`agl_lab.curves.figures`) and the notebooks' plotly curves
(``agl_lab.ui.curve_view.CurveView``): success per rollout beside the score per row, rows against rollouts, the rows the
update cap dropped, the loss scale per PPO mini-batch and the held-out success (verl's ``val-core``, when the run
evaluated). A line's legend name and unit come from the metric
catalogue (:mod:`agl_lab.curves.metrics`); a reference value comes from the loss-mode catalogue
(:data:`agl_lab.LOSS_MODES`), so a reader can check it there (``agl-lab check`` prints the catalogue's table).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from agl_lab.config.modes import LOSS_MODES
from agl_lab.core.keys import (
    CRITIC_SCORE_MEAN,
    LOSS_SCALE_PER_MINI_BATCH,
    N_ROLLOUTS,
    N_SAMPLE,
    N_SAMPLE_DROPPED_RANDOM,
    N_SAMPLE_DROPPED_SAME_REWARD,
    REWARD,
    SUCCESS_RATE,
    VAL_CORE_REWARD,
)
from agl_lab.curves.metrics import metric_info

__all__ = ["PANELS", "Panel", "first_present", "panel_lines", "panel_reference", "panel_ylabel", "usable_panels"]


@dataclass(frozen=True)
class Panel:
    """One standard panel: its title (what is compared), its lines (``a|b`` = the first metric the table has; a
    pattern with ``*``: its first match, in sorted order, e.g. any data source's ``val-core/*/reward/mean@*``), the
    y quantity, and a unit when the lines' units differ; ``reference``: a loss mode whose catalogued loss scale
    per mini-batch is drawn as a dotted line."""

    title: str
    lines: tuple[str, ...]
    quantity: str
    unit: str | None = None
    reference: str | None = None


# Lab runs log success; real runs only reward (success|reward). Loss scale per mini-batch: token-mean's weights sum
# to 1 in each mini-batch, while per_rollout_mean's batch total n_rollouts/n_rows (v1.0) is shared by the step's
# mini-batches, so every loss mode is on one scale.
PANELS: dict[str, Panel] = {
    "success": Panel(
        "success per rollout vs score per row, by setting",
        # verl's score is a mean over trained rows: a rollout split into k rows counts k times, and failing rollouts
        # split more, so it sits below the per-rollout success on the same batch.
        (f"{SUCCESS_RATE}|{REWARD}", CRITIC_SCORE_MEAN),
        "success / score",
    ),
    "rows_vs_rollouts": Panel(
        "rows vs rollouts per step, by setting",
        (N_SAMPLE, N_ROLLOUTS),
        "rows or rollouts per step",
        "count",
    ),
    "drops": Panel(
        "rows dropped per step (same-reward groups vs random), by setting",
        (N_SAMPLE_DROPPED_SAME_REWARD, N_SAMPLE_DROPPED_RANDOM),
        "rows dropped per step",
    ),
    "loss_scale": Panel(
        "loss scale per PPO mini-batch, by setting",
        (LOSS_SCALE_PER_MINI_BATCH,),
        "loss scale per PPO mini-batch",
        reference="token-mean",
    ),
    # verl's held-out evaluation (trainer.test_freq; agl_lab.training.validation): greedy, on fixed items, at step 0,
    # every test_freq steps and the last step; a lab task's reward is its success
    "heldout": Panel(
        "held-out success, greedy (verl's val-core), by setting",
        (VAL_CORE_REWARD,),
        "held-out success",
    ),
}
_PER_MINI_BATCH = "mini-batches"  # a catalogue scale of one per mini-batch: Σ w over a step = its mini-batches


def first_present(metrics: str, present: Iterable[str]) -> str | None:
    """The first of ``a|b|...`` that ``present`` holds (for a pattern with ``*``: its first match in sorted order), or
    None."""
    present = set(present)
    for metric in metrics.split("|"):
        if "*" in metric:
            found = sorted(m for m in present if fnmatchcase(m, metric))
            if found:
                return found[0]
        elif metric in present:
            return metric
    return None


def panel_lines(panel: str, present: Iterable[str]) -> list[str]:
    """The metrics panel ``panel`` draws from a table holding ``present``, in its order (none: an empty list)."""
    present = set(present)
    return [m for m in (first_present(line, present) for line in PANELS[panel].lines) if m]


def usable_panels(present: Iterable[str], panels: Iterable[str] = tuple(PANELS)) -> list[str]:
    """The panels of ``panels`` that draw at least one line from a table holding ``present``."""
    present = set(present)
    return [p for p in panels if panel_lines(p, present)]


def panel_ylabel(panel: str, metrics: Iterable[str]) -> str:
    """``quantity (unit)``: the panel's unit, or the units of the metrics it draws (in order, each once)."""
    spec = PANELS[panel]
    unit = spec.unit or "; ".join(dict.fromkeys(metric_info(m).unit for m in metrics))
    return f"{spec.quantity} ({unit})"


def panel_reference(panel: str) -> tuple[float, str] | None:
    """``(value, legend label)`` of the panel's reference line, read from the loss-mode catalogue; None: none."""
    mode = PANELS[panel].reference
    if mode is None:
        return None
    scale = LOSS_MODES[mode].scale
    if scale != _PER_MINI_BATCH:
        raise ValueError(f"the catalogue's scale of {mode} is {scale!r}, not one per mini-batch: no reference line")
    return 1.0, f"{mode}: 1 (catalogue: Σ w = {scale} per step)"
