"""What a prepared reproduction is: a claim, its source, the settings that test it and the checks that judge it.

An :class:`Experiment` names a claim from a paper or the docs, the settings that test it (short runs,
:func:`agl_lab.short_run_config`, plus the experiment's own ``dotlist``), and its :class:`Check` s: what must hold for
the claim to count as reproduced. A check compares one setting with another, paired by seed
(:func:`agl_lab.curves.effects.compare_settings`), or with 0 (``baseline=None``: the setting's own runs), and passes
when the 95% interval lies on the expected side of 0; or it asks that a metric be exactly 0 at every step of every
run (``expect="zero"``). ``shown`` comparisons are measured with no claim. The catalogue is
:data:`agl_lab.studies.experiments.EXPERIMENTS`; :mod:`agl_lab.studies.reproduce` runs and judges them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.settings import setting_overrides
from agl_lab.core.keys import TRACE_LEVEL

__all__ = ["Check", "Experiment", "mode_setting"]


@dataclass(frozen=True)
class Check:
    """What must hold: ``setting`` − ``baseline`` (or the setting's own values, ``baseline=None``) of ``metric`` over
    ``window`` is ``higher``/``lower`` than 0 (95% interval), or ``metric`` is 0 at every step (``zero``);
    ``none``: measured and shown, no claim (a study's comparisons are all ``none``). ``method``: compare_settings'
    statistics for a comparison with a baseline (``rliable``: the IQM difference's stratified-bootstrap interval, and
    the probability of improvement)."""

    setting: str
    metric: str
    expect: Literal["higher", "lower", "zero", "none"]
    window: str = "all"
    baseline: str | None = None
    method: str = "paired_t"


@dataclass(frozen=True)
class Experiment:
    name: str
    claim: str
    source: str
    settings: dict[str, tuple[str, ...]]
    checks: tuple[Check, ...]
    shown: tuple[Check, ...] = ()  # measured with no claim (expect="none")
    dotlist: tuple[str, ...] = ()  # for every run, before the user's
    note: str = ""
    # A study states the smallest effect worth finding (in the compared metric's unit) instead of a claim: its seed
    # count is what a paired t-test needs to detect that effect at 80% power given the pilot's spread
    # (agl_lab.studies.reproduce), not what the observed effect would need.
    smallest_effect: float | None = None
    recorded: tuple[str, ...] = ()  # metrics its record keeps beside the compared ones (agl_lab.studies.study_record)


def mode_setting(mode: str, *, rollout_level: bool, level: str | None = None) -> tuple[str, ...]:
    """A setting's dotlist: the loss mode ``mode`` (a catalogue name), rollout-level advantage on or off, no update
    cap, and the aggregation ``level`` when given."""
    items = tuple(format_dotlist(setting_overrides(rollout_level=rollout_level, mode=mode, max_ppo_update_times=None)))
    return items if level is None else (*items, f"{TRACE_LEVEL}={level}")
