"""The doctor on per-turn credit: each combination that cannot work is one finding naming its fix; none otherwise."""

import pytest

from agl_lab import compose_config, diagnose, short_run_config
from agl_lab.config.doctor import raise_for_errors

PER_TURN = ("algorithm.enable_rollout_level_advantage=false", "lab.turn_cost=0.25", "lab.cap_drop_unit=rollout")


def turn_findings(dotlist, trainer="lab"):
    cfg = short_run_config(dotlist=dotlist) if trainer == "lab" else compose_config(dotlist=dotlist)
    return [f for f in diagnose(cfg, trainer=trainer) if f.level != "note"]


@pytest.mark.parametrize("estimator", ["mt_grpo", "mt_grpo_fix", "turn_grpo"])
def test_a_working_per_turn_config_has_no_finding_and_trains(estimator):
    # per_rollout_mean with rollout-level advantage off would warn for an outcome estimator (a rollout split into k
    # rows sits k times in its GRPO group); per-turn credit groups turns, not rows, so it does not
    assert turn_findings([f"algorithm.adv_estimator={estimator}", *PER_TURN]) == []
    assert [f.key for f in turn_findings(["algorithm.adv_estimator=grpo", *PER_TURN])] == [
        "algorithm.enable_rollout_level_advantage"
    ]


@pytest.mark.parametrize(
    ("dotlist", "level", "key", "message", "fix"),
    [
        (["algorithm.enable_rollout_level_advantage=true"], "error", "algorithm.enable_rollout_level_advantage",
         "needs every row of a rollout to carry the same reward", "set algorithm.enable_rollout_level_advantage=false"),
        (["lab.turn_cost=0"], "error", "algorithm.adv_estimator",
         "the task gives no per-turn rewards (lab.turn_cost=0)", "set lab.turn_cost above 0"),
        (["lab.cap_drop_unit=row"], "warning", "lab.cap_drop_unit", "loses turns", "set lab.cap_drop_unit=rollout"),
    ],
)  # fmt: skip
def test_each_combination_that_cannot_work_is_one_line_with_its_fix(dotlist, level, key, message, fix):
    findings = turn_findings(["algorithm.adv_estimator=mt_grpo", *PER_TURN, *dotlist])
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.level, finding.key) == (level, key) and message in finding.message and finding.fix.startswith(fix)
    assert "\n" not in str(finding)
    if level == "error":
        with pytest.raises(Exception, match=key):
            raise_for_errors(findings)


def test_agent_lightnings_trainer_is_told_per_turn_credit_is_the_labs():
    findings = turn_findings(["algorithm.adv_estimator=mt_grpo_fix", "algorithm.enable_rollout_level_advantage=false"],
                             trainer="agl")  # fmt: skip
    assert [(f.level, f.key) for f in findings] == [("error", "algorithm.adv_estimator")]
    assert "agl_lab's per-turn credit" in findings[0].message and "to launch" in findings[0].fix
