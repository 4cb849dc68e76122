"""The prepared experiments on a pretrained chat model (SmolLM2-135M-Instruct through ``lab.model``), beside the tiny
policy's in :mod:`agl_lab.studies.experiments`, which lists them in ``EXPERIMENTS``.

* ``real-model-settings`` (issue 49): the demo's three settings and PR #7580's ``session_equal`` on ``retry_arith``,
  judged on training success — its rollouts barely split (1.19–1.30 rows per rollout), so it says little about the
  settings' multi-row handling;
* ``real-model-study`` (issue 55): each setting toggled alone from plain verl, on ``arith_workflow``, whose every
  rollout splits, judged on held-out success with as many seeds as a stated smallest effect needs.
"""

from __future__ import annotations

from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.settings import DEMO_SETTINGS, setting_overrides
from agl_lab.core.keys import (
    CPU_THREADS,
    MAX_TURNS,
    MODEL,
    MULTI_ROW_MASS_SHARE,
    N_SAMPLE,
    N_SAMPLE_DROPPED_RANDOM,
    N_SAMPLE_DROPPED_SAME_REWARD,
    N_SAMPLE_TRAINED,
    PPO_UPDATES,
    TASK,
    TASK_SIZE,
)
from agl_lab.curves.summary import SUCCESS
from agl_lab.studies.experiment import Check, Experiment, mode_setting

__all__ = ["REAL_MODEL_EXPERIMENTS"]

_AGL_DOCS = "https://microsoft.github.io/agent-lightning/stable/4-trainer-configuration/"
_VERL_7580 = "https://github.com/verl-project/verl/pull/7580"


# real-model-settings: the demo's three settings and PR #7580's session-equal weights, on the pretrained preset's model
_REAL = {**DEMO_SETTINGS, "session_equal": mode_setting("session_equal", rollout_level=True)}
_REAL_MODEL_SETTINGS = Experiment(
    "real-model-settings",
    "Measured, not claimed elsewhere: a pretrained chat model (SmolLM2-135M-Instruct, LoRA r16) learns the "
    "retry_arith task (addition with retries) within 20 short steps under each of the settings: its success over the "
    "last 20% of steps is above its success over the first 20%. Beside it, each setting against plain verl "
    "(both_off): success, rows per step, rows trained, drops.",
    "agl_lab issue 49; the settings: Agent Lightning v1.0 docs (" + _AGL_DOCS + "); session_equal: verl PR #7580 "
    f"(open, proposed; {_VERL_7580})",
    _REAL,
    tuple(Check(name, SUCCESS, "higher", "last_minus_first") for name in _REAL),
    shown=(
        *(Check(name, SUCCESS, "none", "last_20pct", baseline="both_off") for name in _REAL if name != "both_off"),
        *(Check(name, N_SAMPLE, "none", baseline="both_off") for name in _REAL if name != "both_off"),
        Check("both_on_cap2", N_SAMPLE_TRAINED, "none", baseline="both_on"),
        Check("both_on_cap2", N_SAMPLE_DROPPED_SAME_REWARD, "none", baseline="both_on"),
        Check("both_on_cap2", N_SAMPLE_DROPPED_RANDOM, "none", baseline="both_on"),
        Check("both_on_cap2", PPO_UPDATES, "none", baseline="both_on"),
    ),
    # the knobs it was measured at (2026-12-07), pinned: the retry_arith preset has moved to operands 0-19, 2 tries
    dotlist=(f"{MODEL}=smollm2-135m-instruct", f"{TASK_SIZE}=10", f"{MAX_TURNS}=3", f"{CPU_THREADS}=1"),
    note="Every run: the pretrained preset (conf/pretrained.yaml: retry_arith with operands 0-9 and up to 3 tries, "
    "4 questions x 4 rollouts a step, 32 tokens a call, LoRA r16 alpha 32 on every linear layer, lr 1e-4, 20 steps), "
    "Agent Lightning's trajectory level with lab.rewrite_prob 0.3 (a wrong answer's context is rewritten: a new row), "
    f"{CPU_THREADS}=1 so that Ray runs one cell per core. Success = the share of a step's 16 rollouts answered right "
    "within their tries; training/n_sample = rows per step (16 rollouts). A result on one model and one task, not a "
    "general one.",
)


# real-model-study: each setting toggled alone from plain verl, all three together, and PR #7580's session_equal, on a
# task whose rollouts split by construction; judged on held-out success (greedy, verl's val-core), paired by seed
_STUDY_TASK = "arith_workflow"
_HELD_OUT = f"val-core/{_STUDY_TASK}/reward/mean@1"
_PLAIN = "plain_verl"


def _alone(rollout_level: bool, mode: str, cap: int | None) -> tuple[str, ...]:
    return tuple(format_dotlist(setting_overrides(rollout_level=rollout_level, mode=mode, max_ppo_update_times=cap)))


_STUDY = {
    _PLAIN: _alone(False, "token-mean", None),
    "rollout_level_alone": _alone(True, "token-mean", None),
    "per_rollout_mean_alone": _alone(False, "per_rollout_mean:rows", None),
    "seq_mean_token_mean": _alone(False, "seq-mean-token-mean", None),
    "cap2_alone": _alone(False, "token-mean", 2),
    "all_three": _alone(True, "per_rollout_mean:rows", 2),
    "session_equal_alone": _alone(False, "session_equal", None),
}
_REAL_MODEL_STUDY = Experiment(
    "real-model-study",
    "What does each of the three settings do, alone, to a pretrained chat model's held-out success when every "
    "rollout splits into several rows? Each setting toggled alone from plain verl (rollout-level advantage; "
    "per_rollout_mean, also against seq-mean-token-mean; max_ppo_update_times=2), all three on, and PR #7580's "
    "session_equal, each against plain verl, paired by seed.",
    f"Agent Lightning v1.0 docs ({_AGL_DOCS}); verl PR #7580 (open, proposed; {_VERL_7580}); agl_lab issue 55",
    _STUDY,
    (),
    shown=(
        *(
            Check(name, _HELD_OUT, "none", window, _PLAIN)
            for name in _STUDY
            if name != _PLAIN
            for window in ("final", "auc")
        ),
        Check("per_rollout_mean_alone", _HELD_OUT, "none", "final", "seq_mean_token_mean"),
        Check("per_rollout_mean_alone", _HELD_OUT, "none", "auc", "seq_mean_token_mean"),
        *(Check(name, MULTI_ROW_MASS_SHARE, "none", "all") for name in (_PLAIN, "all_three")),
    ),
    dotlist=(f"{MODEL}=smollm2-135m-instruct", f"{TASK}={_STUDY_TASK}", f"{CPU_THREADS}=1"),
    note=f"Every run: the pretrained preset with the {_STUDY_TASK} task's (conf/pretrained_{_STUDY_TASK}.yaml): an "
    "addition solved, checked and revised in separate calls, each under its own prompt, so at Agent Lightning's "
    "trajectory level every call is its own row (2 or more rows per rollout). Held-out success = verl's "
    f"{_HELD_OUT}: greedy answers (verl's validation sampling) on a fixed set of questions never trained on, at step "
    "0, every trainer.test_freq steps and at the end; `final` = at the end, `auc` = the area under that curve over "
    "the run divided by its span. The seed count is what a paired t-test needs to detect a difference of 0.10 in "
    "held-out success at 80% power given the pilot's spread. One model and one task: not a general ranking.",
    smallest_effect=0.10,
)

REAL_MODEL_EXPERIMENTS = (_REAL_MODEL_SETTINGS, _REAL_MODEL_STUDY)
