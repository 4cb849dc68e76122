"""The doctor's checks of per-turn credit: the combinations of a per-turn estimator that cannot work, one line each.

A per-turn estimator (``algorithm.adv_estimator`` = ``mt_grpo``, ``mt_grpo_fix`` or ``turn_grpo``:
:mod:`agl_lab.core.turn_estimators`) gives each turn its own advantage from per-turn rewards. It cannot work

* with ``algorithm.enable_rollout_level_advantage=true``: that path runs the estimator on one row per rollout and
  needs every row of a rollout to carry the same reward (an error, the pipeline's own text);
* without per-turn rewards (``lab.turn_cost=0``): every turn but a rollout's last has reward 0, so the estimators
  see the outcome alone, and per-turn credit is a name for outcome credit (an error);
* in Agent Lightning's trainer (``agl-lab launch``, ``--base agl``): it gives each rollout one reward on every row
  and runs verl's estimator on rows, not on rollouts stitched by turn (an error: per-turn credit is the lab's);

and it works, with a warning, beside ``lab.cap_drop_unit=row``: a rollout trained in part has lost turns, so its
stitched trajectory is shorter and its last kept turn's reward reads as its outcome. :mod:`agl_lab.config.doctor`
runs :func:`turn_credit_findings`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agl_lab.config.checks import Finding
from agl_lab.core.keys import CAP_DROP_UNIT, ESTIMATOR, ROLLOUT_LEVEL, TURN_COST
from agl_lab.core.turn_advantage import rollout_level_problem
from agl_lab.core.turn_estimators import TURN_ESTIMATORS, is_turn_estimator

__all__ = ["turn_credit_findings"]

_OUTCOME = f"use an outcome estimator ({ESTIMATOR}=grpo)"


def turn_credit_findings(get: Callable[[str], Any], *, trainer: str) -> list[Finding]:
    """The findings about per-turn credit in a config (``get``: dotted key -> value), for ``trainer`` (lab, agl)."""
    estimator = get(ESTIMATOR)
    if not is_turn_estimator(estimator):
        return []
    name = str(estimator)
    if trainer == "agl":
        return [
            Finding(
                "error",
                ESTIMATOR,
                f"{name} ({TURN_ESTIMATORS[name].label}) is agl_lab's per-turn credit: Agent Lightning's trainer gives "
                "every row of a rollout the rollout's reward and runs the estimator on rows, not on turns",
                f"{_OUTCOME} to launch; train per-turn credit in the lab (agl-lab train, agl-lab reproduce)",
            )
        ]
    findings = []
    if problem := rollout_level_problem(estimator, bool(get(ROLLOUT_LEVEL))):
        findings.append(Finding("error", ROLLOUT_LEVEL, *problem))
    if not get(TURN_COST):
        findings.append(
            Finding(
                "error",
                ESTIMATOR,
                f"{name} is per-turn credit but the task gives no per-turn rewards ({TURN_COST}=0): every turn but a "
                "rollout's last has reward 0, so it would train on the outcome alone",
                f"set {TURN_COST} above 0 (a wrong guess's cost, e.g. 0.25), or {_OUTCOME}",
            )
        )
    if get(CAP_DROP_UNIT) == "row":
        findings.append(
            Finding(
                "warning",
                CAP_DROP_UNIT,
                f"{name} with per-row drops: a rollout the cap trains in part loses turns, so per-turn credit sees a "
                "shorter trajectory whose last kept turn's reward reads as its outcome",
                f"set {CAP_DROP_UNIT}=rollout (whole rollouts dropped, seeded)",
            )
        )
    return findings
