"""The prepared reproductions: one table of experiments, each a claim, its source, its settings and its checks.

What an experiment is (:class:`~agl_lab.studies.experiment.Experiment`, its :class:`~agl_lab.studies.experiment.Check`
s): :mod:`agl_lab.studies.experiment`. Each runs short runs of the lab's default task (the lock game, the tiny policy)
unless its ``dotlist`` says otherwise: those on the pretrained SmolLM2-135M-Instruct are declared in
:mod:`agl_lab.studies.real_model_experiments`. Adding an experiment is one entry of :data:`EXPERIMENTS`;
:mod:`agl_lab.studies.reproduce` runs and judges them (``agl-lab reproduce NAME``).
"""

from __future__ import annotations

import pandas as pd

from agl_lab.config.settings import DEMO_SETTINGS
from agl_lab.config.task_rows import lock_row_lengths
from agl_lab.core.keys import (
    CAP_DROP_UNIT,
    ESTIMATOR,
    MAX_PPO_UPDATE_TIMES,
    MAX_PROMPT_LENGTH,
    MAX_RESPONSE_LENGTH,
    MEAN_TURNS,
    MULTI_ROW_MASS_SHARE,
    MULTI_ROW_OVERWEIGHT,
    N_SAMPLE_DROPPED_RANDOM,
    N_SAMPLE_DROPPED_SAME_REWARD,
    PPO_UPDATES,
    RESPONSE_LENGTH_FAILED,
    TRACE_LEVEL,
    TRAJECTORY_MAX_PROMPT,
    TRAJECTORY_MAX_RESPONSE,
    TURN_COST,
)
from agl_lab.curves.summary import SUCCESS
from agl_lab.studies.experiment import Check, Experiment, mode_setting
from agl_lab.studies.real_model_experiments import REAL_MODEL_EXPERIMENTS

__all__ = ["EXPERIMENTS", "Check", "Experiment", "experiment_table"]

_AGL_DOCS = "https://microsoft.github.io/agent-lightning/stable/4-trainer-configuration/"
_VERL_7580 = "https://github.com/verl-project/verl/pull/7580"
# weighting-proposals: the settings it trains (each its own loss mode's diagnostics) and the baseline they face
_PROPOSALS = {
    "seq-mean-token-mean": mode_setting("seq-mean-token-mean", rollout_level=True, level="transition"),
    "session_equal": mode_setting("session_equal", rollout_level=True, level="transition"),
    "partition_preserving": mode_setting("partition_preserving", rollout_level=True, level="transition"),
    "per_rollout_mean": mode_setting("per_rollout_mean:rows", rollout_level=True, level="transition"),
    "trajectory": mode_setting("seq-mean-token-mean", rollout_level=True, level="trajectory"),
}
_UNWEIGHTED = "seq-mean-token-mean"
_GAP, _ESS, _COSINE = "lab/diagnostics/gap", "lab/diagnostics/ess_fraction", "lab/diagnostics/adv_cosine"
# turn-index-bias: per-turn credit (rollout-level off) beside rollout-level advantage, one loss for all
_RFC_7244 = "https://github.com/verl-project/verl/issues/7244"
_TURNS = {
    name: (*mode_setting("per_rollout_mean:rows", rollout_level=name == "rollout_level"), f"{ESTIMATOR}={est}")
    for name, est in (("mt_grpo", "mt_grpo"), ("mt_grpo_fix", "mt_grpo_fix"), ("rollout_level", "grpo"),
                      ("turn_grpo", "turn_grpo"))
}  # fmt: skip


# The lock task reads only an answer's first word, so its length is free up to the per-call budget; the short-run
# preset's 4 tokens leave it at ~3.9 from the start. length-bias raises the budget to 16 and the row limits to fit.
_LONG = lock_row_lengths(max_turns=4, call_tokens=16)
EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "row-split",
            "During training, under verl's token-mean and seq-mean-token-mean a rollout split into more rows carries "
            "more gradient mass than its share of the rollouts (per step, on the rows the actor trained on); "
            "per_rollout_mean gives every rollout the same mass.",
            f"Agent Lightning v1.0 docs, the per_rollout_mean loss ({_AGL_DOCS}); agl_lab issue 18",
            {
                "token-mean": mode_setting("token-mean", rollout_level=False),
                "seq-mean-token-mean": mode_setting("seq-mean-token-mean", rollout_level=False),
                "per_rollout_mean": mode_setting("per_rollout_mean:rows", rollout_level=True),
            },
            (
                Check("token-mean", MULTI_ROW_OVERWEIGHT, "higher", baseline="per_rollout_mean"),
                Check("seq-mean-token-mean", MULTI_ROW_OVERWEIGHT, "higher", baseline="per_rollout_mean"),
                Check("per_rollout_mean", MULTI_ROW_OVERWEIGHT, "zero"),
            ),
            shown=(
                Check("token-mean", MULTI_ROW_MASS_SHARE, "none", baseline="per_rollout_mean"),
                Check("seq-mean-token-mean", MULTI_ROW_MASS_SHARE, "none", baseline="per_rollout_mean"),
                Check("token-mean", SUCCESS, "none", "last_20pct", baseline="per_rollout_mean"),
                Check("seq-mean-token-mean", SUCCESS, "none", "last_20pct", baseline="per_rollout_mean"),
            ),
            note="lab/multi_row_overweight = the multi-row rollouts' share of the step's gradient mass (unit "
            "advantage, the mode's per-token weights) minus their share of the step's rollouts "
            "(agl_lab.lab.rollout_mass).",
        ),
        Experiment(
            "length-bias",
            "Under per-response length normalization (verl seq-mean-token-mean) the responses of failing rollouts grow "
            "over training; under a constant normalizer (TRL dr_grpo = verl seq-mean-token-sum-norm) they do not.",
            "Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO), arXiv:2503.20783",
            {
                "seq-mean-token-mean": mode_setting("seq-mean-token-mean", rollout_level=False),
                "seq-mean-token-sum-norm": mode_setting("seq-mean-token-sum-norm", rollout_level=False),
            },
            (
                Check(
                    "seq-mean-token-mean",
                    RESPONSE_LENGTH_FAILED,
                    "higher",
                    "last_minus_first",
                    baseline="seq-mean-token-sum-norm",
                ),
                Check("seq-mean-token-mean", RESPONSE_LENGTH_FAILED, "higher", "last_minus_first"),
            ),  # fmt: skip
            shown=(
                Check("seq-mean-token-sum-norm", RESPONSE_LENGTH_FAILED, "none", "last_minus_first"),
                Check(
                    "seq-mean-token-mean",
                    "lab/response_length_solved",
                    "none",
                    "last_minus_first",
                    baseline="seq-mean-token-sum-norm",
                ),
                Check("seq-mean-token-mean", SUCCESS, "none", "last_20pct", baseline="seq-mean-token-sum-norm"),
            ),  # fmt: skip
            dotlist=(
                f"{MAX_RESPONSE_LENGTH}=16",
                f"{MAX_PROMPT_LENGTH}={_LONG['transition_prompt']}",
                f"{TRAJECTORY_MAX_PROMPT}={_LONG['trajectory_prompt']}",
                f"{TRAJECTORY_MAX_RESPONSE}={_LONG['trajectory_response']}",
            ),
            note="The lock task's answers are free in length (only the first word is read), but the short-run preset "
            "gives each call 4 tokens and a fresh policy already fills ~3.9: this experiment gives each call 16 tokens "
            "(row limits raised to fit). TRL's dr_grpo is not trainable in verl; verl's seq-mean-token-sum-norm has "
            "the same per-token weight 1/(G·H). GRPO's std normalization is left on in both (only the aggregation "
            "differs). At the trajectory level (the default) a row merges a rollout's calls, so seq-mean-token-mean "
            "divides by the row's trainable tokens (all its responses), not by one response's. Length = tokens per LLM "
            "call (EOS included) over the failed rollouts of a step; growth = its mean over the last 20% of steps "
            "minus the first 20%.",
        ),
        Experiment(
            "update-cap",
            f"{MAX_PPO_UPDATE_TIMES}=2 caps the PPO updates per step at 2 by dropping the surplus rows, "
            "same-reward groups first (recommended for stability); its effect on success is measured, not claimed.",
            f"Agent Lightning v1.0 docs, max_ppo_update_times ({_AGL_DOCS})",
            {name: DEMO_SETTINGS[name] for name in ("both_on", "both_on_cap2")},
            (
                Check("both_on_cap2", PPO_UPDATES, "lower", baseline="both_on"),
                Check("both_on_cap2", N_SAMPLE_DROPPED_SAME_REWARD, "higher", baseline="both_on"),
            ),
            shown=(
                Check("both_on_cap2", N_SAMPLE_DROPPED_RANDOM, "none", baseline="both_on"),
                Check("both_on_cap2", SUCCESS, "none", "last_20pct", baseline="both_on"),
                Check("both_on_cap2", SUCCESS, "none", "all", baseline="both_on"),
            ),
        ),
        Experiment(
            "weighting-proposals",
            "When trace aggregation splits a trajectory into N rows, an objective that weighs rows alike (verl's "
            "seq-mean-token-mean) sees a lower solve rate than the trajectories have (failing ones split more): a gap "
            "above 0. verl PR #7580's session-equal loss_weight 1/N closes it exactly, at an effective sample size of "
            "the row weights below 1 (the PR: +10.5 to +13.8 points closed, ESS 53-60%); Agent Lightning's "
            "per_rollout_mean closes it too.",
            f"verl PR #7580 (open, proposed, not released; {_VERL_7580}); verl-project/uni-agent issue #185; "
            "Agent Lightning v1.0's per_rollout_mean; rLLM PR #512 (one row per trajectory, like the trajectory level)",
            _PROPOSALS,
            (
                Check(_UNWEIGHTED, _GAP, "higher"),
                Check("session_equal", _GAP, "zero"),
                Check("session_equal", _ESS, "lower", baseline=_UNWEIGHTED),
                Check("per_rollout_mean", _GAP, "zero"),
            ),
            shown=(
                *(Check(s, _GAP, "none") for s in ("partition_preserving", "trajectory")),
                *(Check(s, _GAP, "none", baseline=_UNWEIGHTED) for s in ("partition_preserving", "trajectory")),
                *(Check(s, _ESS, "none") for s in _PROPOSALS),
                *(Check(s, _COSINE, "none") for s in ("session_equal", "partition_preserving", "per_rollout_mean")),
                *(
                    Check(s, SUCCESS, "none", "last_20pct", _UNWEIGHTED, "rliable")
                    for s in _PROPOSALS
                    if s != _UNWEIGHTED
                ),
            ),
            dotlist=(f"{TRACE_LEVEL}=transition",),
            note="Every run measures its own loss mode's diagnostics on the rows each step trains (lab/diagnostics/*, "
            "agl_lab.lab.diagnostics): gap = solve rate by trajectory − the solve rate the mode's objective sees "
            "(rows weighted by their gradient mass); ess_fraction = Kish's effective sample size of the row weights ÷ "
            "rows; adv_cosine = cosine of weighted and unweighted row advantages. Rows are LLM calls (transition "
            "level, the PR's multi-output case) except in `trajectory` (Agent Lightning's trajectory level: a "
            "rollout's calls merge into one row unless the lock task rewrites its context). Rollout-level advantage "
            "is on in every setting (the PR's session-aware advantage), so only the weighting differs. Success is "
            "compared with rliable (IQM and probability of improvement).",
        ),
        Experiment(
            "turn-index-bias",
            "MT-GRPO-style per-turn-index normalisation, aggregated over a trajectory, subtracts a baseline with as "
            "many terms as the trajectory has turns left: a hidden bonus of −E[intermediate reward] on every further "
            "turn. Under a per-turn cost the cost normalises away, so rollouts take more turns than under the RFC's "
            "fix (a turn-level baseline on the return to go) or rollout-level advantage, on the same rewards.",
            f"verl RFC #7244 (open; {_RFC_7244}); MT-GRPO, Zeng, Wei et al. 2025, arXiv:2505.11821",
            _TURNS,
            (
                Check("mt_grpo", MEAN_TURNS, "higher", "last_20pct", baseline="mt_grpo_fix"),
                Check("mt_grpo", MEAN_TURNS, "higher", "last_20pct", baseline="rollout_level"),
            ),
            shown=(
                Check("mt_grpo_fix", MEAN_TURNS, "none", "last_20pct", baseline="rollout_level"),
                Check("turn_grpo", MEAN_TURNS, "none", "last_20pct", baseline="mt_grpo_fix"),
                *(Check(s, MEAN_TURNS, "none", "last_minus_first") for s in _TURNS),
                *(
                    Check(s, SUCCESS, "none", "last_20pct", baseline="rollout_level")
                    for s in _TURNS
                    if s != "rollout_level"
                ),
            ),
            dotlist=(f"{TURN_COST}=0.25", f"{CAP_DROP_UNIT}=rollout"),
            note=f"{TURN_COST}=0.25: a wrong guess that earns another try costs 0.25 (an intermediate reward of −0.25 "
            "on that call), so a success after k tries returns 1 − 0.25·(k − 1). Under a per-turn estimator "
            "(rollout-level advantage off) the rewards sit on each call (agl_lab.core.turn_rewards: per_turn); under "
            "rollout_level (verl's grpo, Agent Lightning's default path) each rollout's rows carry its return. Every "
            "trajectory at a turn index pays the same cost, so mt_grpo's per-index normalisation makes it 0; "
            "mt_grpo_fix normalises the return to go per turn index and keeps it. Loss per_rollout_mean ÷ rows and "
            f"GRPO's std normalisation in every setting; {CAP_DROP_UNIT}=rollout keeps every rollout's turns whole "
            "(the doctor warns about per-row drops with per-turn credit). turn_grpo (AgileRL's turn granularity) is "
            "shown, not claimed. Turns = LLM calls per rollout (lab/mean_turns); drift = its last 20% minus first 20%.",
        ),
    )
}


EXPERIMENTS.update({e.name: e for e in REAL_MODEL_EXPERIMENTS})


def experiment_table() -> pd.DataFrame:
    """One line per experiment: its claim, source, settings and checks (what ``agl-lab reproduce --list`` says)."""
    return pd.DataFrame(
        [
            {
                "experiment": e.name,
                "claim": e.claim,
                "source": e.source,
                "settings": ", ".join(e.settings),
                "checks": "; ".join(
                    f"{c.setting} {c.metric} ({c.window}) {c.expect}" + (f" than {c.baseline}" if c.baseline else "")
                    for c in e.checks
                ),
            }
            for e in EXPERIMENTS.values()
        ]
    ).set_index("experiment")
