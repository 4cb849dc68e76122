"""The per-turn estimators through verl's own compute_advantage (its registry): hand-worked batches, the MT-GRPO
paper's two-turn formula on verl's GRPO, AgileRL's published numbers, and a plain-loop reference on random batches."""

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab import compose_config
from agl_lab.core.turn_estimators import TURN_ESTIMATORS, is_turn_estimator, register_turn_estimators

ALGO = {norm: compose_config(dotlist=[f"algorithm.norm_adv_by_std_in_grpo={norm}"]).algorithm for norm in (True, False)}


def verl_rows(trajectories, *, groups=None, widths=None, observation=1, dtype=torch.float32):
    """verl's multi-turn layout, one row per trajectory: turn k = ``widths`` tokens (mask 1, its reward on the last),
    then ``observation`` untrainable tokens. ``trajectories``: per-turn rewards, the last one the outcome."""
    widths = widths or [[1] * len(t) for t in trajectories]
    length = max(sum(w + observation for w in ws) for ws in widths)
    rewards, mask = torch.zeros(len(trajectories), length, dtype=dtype), torch.zeros(len(trajectories), length)
    for i, (turns, ws) in enumerate(zip(trajectories, widths, strict=True)):
        at = 0
        for reward, width in zip(turns, ws, strict=True):
            mask[i, at : at + width] = 1
            rewards[i, at + width - 1] = reward
            at += width + observation
    groups = ["g"] * len(trajectories) if groups is None else groups
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask.long()},
        non_tensors={"uid": np.array(groups, dtype=object)},
    )


def per_turn(batch, estimator, *, norm=True):
    """Run ``estimator`` through verl's compute_advantage; return each trajectory's per-turn advantages (lists)."""
    out = compute_advantage(batch, adv_estimator=estimator, config=ALGO[norm])
    advantages, mask = out.batch["advantages"], out.batch["response_mask"]
    torch.testing.assert_close(out.batch["returns"], advantages)
    result = []
    for row, row_mask in zip(advantages, mask, strict=True):
        starts = row_mask.bool() & ~torch.nn.functional.pad(row_mask.bool()[:-1], (1, 0))
        runs = [row[i].item() for i in starts.nonzero().flatten()]
        assert torch.equal(row[~row_mask.bool()], torch.zeros_like(row[~row_mask.bool()]))  # untrainable: 0
        result.append(runs)
    return result


def close(actual, expected, tol=1e-5):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a == pytest.approx(e, abs=tol), (actual, expected)


def test_registered_in_verls_registry_and_named_as_per_turn():
    for name in TURN_ESTIMATORS:
        assert core_algos.get_adv_estimator_fn(name).__module__ == "agl_lab.core.turn_estimators"
        assert is_turn_estimator(name)
    register_turn_estimators()  # idempotent
    assert not is_turn_estimator("grpo") and not is_turn_estimator("gae")


@pytest.mark.parametrize("first", ["agl_lab.core.turn_estimators", "verl.trainer.ppo.core_algos"])
def test_the_estimators_and_losses_are_registered_whichever_module_a_process_imports_first(first):
    """The post-import hook fires inside turn_estimators' own import of verl when that module comes first: it must
    neither fail on the half-loaded module nor leave anything unregistered."""
    import subprocess
    import sys

    probe = (
        f"import {first}\nfrom verl.trainer.ppo import core_algos\nimport agl_lab\n"
        "print(sorted(set(core_algos.ADV_ESTIMATOR_REGISTRY) & {'mt_grpo', 'mt_grpo_fix', 'turn_grpo'}),"
        " 'per_rollout_mean' in core_algos.POLICY_LOSS_REGISTRY)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "['mt_grpo', 'mt_grpo_fix', 'turn_grpo'] True", out.stdout


# One group, three trajectories (turn rewards; the last is the outcome):
#   A: r0 = 0.5, then R = 1      B: R = 0 at once      C: r0 = 1.0, then R = 0
HAND = [[0.5, 1.0], [0.0], [1.0, 0.0]]


def test_mt_grpo_by_hand():
    # Intermediate rewards at turn index 0 (A, C go on): 0.5, 1.0, mean 0.75 -> A -0.25, C +0.25.
    # Outcomes 1, 0, 0: mean 1/3 -> A +2/3, B -1/3, C -1/3.
    # A_t = Σ_{k>=t} Â_k + Â_O: A = [-0.25 + 2/3, 2/3]; B = [-1/3]; C = [0.25 - 1/3, -1/3]
    result = per_turn(verl_rows(HAND, widths=[[2, 3], [1], [1, 2]]), "mt_grpo", norm=False)
    close(result[0], [-0.25 + 2 / 3, 2 / 3])
    close(result[1], [-1 / 3])
    close(result[2], [0.25 - 1 / 3, -1 / 3])
    # With the std: intermediate std (n-1) of 0.5, 1.0 = sqrt(2 · 0.25²) = 0.35355 -> ∓0.70711; outcome std of 1, 0, 0
    # = sqrt((4/9 + 1/9 + 1/9) / 2) = sqrt(1/3) = 0.57735 -> A +1.15470, B and C -0.57735
    result = per_turn(verl_rows(HAND), "mt_grpo", norm=True)
    close(result[0], [-0.70711 + 1.15470, 1.15470])
    close(result[1], [-0.57735])
    close(result[2], [0.70711 - 0.57735, -0.57735])


def test_mt_grpo_fix_by_hand():
    # Returns to go: turn 0: A 1.5, B 0, C 1.0 (all three reached it), mean 2.5/3 -> A +2/3, B -5/6, C +1/6;
    # turn 1: A 1, C 0 (B stopped), mean 0.5 -> A +0.5, C -0.5. B's stop is not subtracted a future it never had.
    result = per_turn(verl_rows(HAND), "mt_grpo_fix", norm=False)
    close(result[0], [2 / 3, 0.5])
    close(result[1], [-5 / 6])
    close(result[2], [1 / 6, -0.5])


def test_turn_grpo_by_hand():
    # Each turn's own reward among those who played it: turn 0 = 0.5, 0 (B's outcome), 1.0, mean 0.5 -> 0, -0.5, +0.5;
    # turn 1 = A 1, C 0, mean 0.5 -> +0.5, -0.5. (mean_only: norm off.)
    result = per_turn(verl_rows(HAND), "turn_grpo", norm=False)
    close(result[0], [0.0, 0.5])
    close(result[1], [-0.5])
    close(result[2], [0.5, -0.5])


def test_a_turn_index_one_trajectory_reached_has_no_baseline():
    # Group: X stops at once (R = 1), Y goes on twice (0.2, 0.2, then R = 0). Turn 1 and 2: Y alone.
    rows = verl_rows([[1.0], [0.2, 0.2, 0.0]])
    # mt_grpo: index 0's intermediate cell holds Y alone -> 0; outcomes 1, 0 -> ±0.5; so Y = [-0.5] * 3
    assert per_turn(rows, "mt_grpo", norm=False) == [[pytest.approx(0.5)], [pytest.approx(-0.5)] * 3]
    # mt_grpo_fix: turn 0 returns 1 and 0.4 -> ±0.3; turns 1 and 2: Y alone -> 0
    close(per_turn(rows, "mt_grpo_fix", norm=False)[1], [-0.3, 0.0, 0.0])
    # turn_grpo: turn 0: 1 and 0.2 -> ±0.4; turns 1, 2: Y alone -> its trajectory advantage, totals 1 vs 0.4 -> -0.3
    close(per_turn(rows, "turn_grpo", norm=False)[1], [-0.4, -0.3, -0.3])


def test_mt_grpo_is_the_papers_two_turn_formula_on_verls_grpo():
    # MT-GRPO (arXiv:2505.11821), two turns, λ = 1: A_1 = Â^T + Â^O and A_2 = Â^O, each Â verl's GRPO of that reward.
    rng = np.random.default_rng(0)
    groups = np.repeat(["a", "b", "c"], 4)
    turn, outcome = rng.normal(size=12).round(2), rng.integers(0, 2, 12).astype(float)
    trajectories = [[t, o] for t, o in zip(turn.tolist(), outcome.tolist(), strict=True)]
    result = per_turn(verl_rows(trajectories, groups=list(groups)), "mt_grpo", norm=True)
    ones = torch.ones(12, 1)

    def grpo(values):
        scores = torch.tensor(values, dtype=torch.float32).unsqueeze(-1)
        return core_algos.compute_grpo_outcome_advantage(scores, ones, groups)[0][:, 0].tolist()

    for i, (a_t, a_o) in enumerate(zip(grpo(turn), grpo(outcome), strict=True)):
        close(result[i], [a_t + a_o, a_o])


# AgileRL's published numbers (tests/test_algorithms/test_llms/test_grpo_turn_mask.py, PR #522): per-turn rewards
# (batch, turns) of one group of 4, each trajectory's played turns given by its length.
@pytest.mark.parametrize(
    ("rewards", "lengths", "norm", "expected"),
    [
        # test_a_genuinely_low_reward_keeps_its_negative_advantage: [0, 1] -1.5, [1, 1] 0.5 (abs 1e-3)
        ([[0.05, -0.1], [0.05, 0.05], [0.05, 0.05], [0.05, 0.05]], [2, 2, 2, 2], True, {(0, 1): -1.5, (1, 1): 0.5}),
        # test_mean_only_centers_over_the_valid_members: [0, 0] -0.075, [1, 0] 0.025
        ([[0.0, 0.0], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1]], [1, 2, 2, 2], False, {(0, 0): -0.075, (1, 0): 0.025}),
        # test_mean_std_uses_an_unbiased_denominator: turn 1 over 0.1, 0.1, 0.3: (v - 1/6) / std(n - 1) = ∓0.57735
        ([[0.0, 0.0], [0.0, 0.1], [0.0, 0.1], [0.0, 0.3]], [1, 2, 2, 2], True,
         {(1, 1): -0.57735, (2, 1): -0.57735, (3, 1): 1.15470}),
        # test_a_lone_survivor_gets_the_trajectory_advantage: [3, 1:] 1.5 (its trajectory advantage), [3, 0] -1.5,
        # [0, 0] 0.5
        ([[0.2] + [0.0] * 19] * 3 + [[0.0] + [0.05] * 19], [1, 1, 1, 20], True,
         {(3, 1): 1.5, (3, 19): 1.5, (3, 0): -1.5, (0, 0): 0.5}),
        # test_the_fallback_is_negative_for_a_worse_total_return: [3, 1:] -1.5
        ([[1.0, 0, 0, 0, 0]] * 3 + [[1.0, -0.1, -0.1, -0.1, -0.1]], [1, 1, 1, 5], True, {(3, 1): -1.5, (3, 4): -1.5}),
    ],
)  # fmt: skip
def test_turn_grpo_gives_agilerls_published_numbers(rewards, lengths, norm, expected):
    trajectories = [row[:length] for row, length in zip(rewards, lengths, strict=True)]
    result = per_turn(verl_rows(trajectories), "turn_grpo", norm=norm)
    for (i, k), value in expected.items():
        assert result[i][k] == pytest.approx(value, abs=1e-3), (i, k)


def test_bf16_rewards_give_float32_advantages():
    out = compute_advantage(verl_rows(HAND, dtype=torch.bfloat16), adv_estimator="mt_grpo_fix", config=ALGO[False])
    assert out.batch["advantages"].dtype == torch.float32
    assert out.batch["advantages"][0, 0].item() == pytest.approx(2 / 3, abs=1e-6)


def loop_reference(trajectories, groups, method, norm):
    """Each estimator's definition, one trajectory and one turn at a time (the module docstring's table)."""
    eps = 1e-8 if method == "turn_grpo" else 1e-6

    def normalize(cells):  # {(group, key): {member: value}} -> {(group, key, member): advantage}
        out = {}
        for (g, key), members in cells.items():
            values = list(members.values())
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
            for m, v in members.items():
                out[(g, key, m)] = 0.0 if len(values) < 2 else (v - mean) / (std + eps) if norm else v - mean
        return out

    cells, totals, outcomes = defaultdict(dict), defaultdict(dict), defaultdict(dict)
    for i, (turns, g) in enumerate(zip(trajectories, groups, strict=True)):
        outcomes[(g, "O")][i] = turns[-1]
        totals[(g, "T")][i] = sum(turns)
        for t in range(len(turns)):
            if method == "mt_grpo" and t < len(turns) - 1:
                cells[(g, t)][i] = turns[t]
            elif method == "mt_grpo_fix":
                cells[(g, t)][i] = sum(turns[t:])
            elif method == "turn_grpo":
                cells[(g, t)][i] = turns[t]
    per_cell, outcome, total = normalize(cells), normalize(outcomes), normalize(totals)
    result = []
    for i, (turns, g) in enumerate(zip(trajectories, groups, strict=True)):
        row = []
        for t in range(len(turns)):
            if method == "mt_grpo":
                row.append(sum(per_cell[(g, k, i)] for k in range(t, len(turns) - 1)) + outcome[(g, "O", i)])
            elif method == "turn_grpo" and len(cells[(g, t)]) < 2:
                row.append(total[(g, "T", i)])
            else:
                row.append(per_cell[(g, t, i)])
        result.append(row)
    return result


@st.composite
def random_trajectories(draw):
    n = draw(st.integers(1, 10))
    turns = [draw(st.integers(1, 5)) for _ in range(n)]
    value = st.sampled_from([-1.0, -0.25, 0.0, 0.125, 0.5, 1.0, 2.0])
    trajectories = [[draw(value) for _ in range(t)] for t in turns]
    widths = [[draw(st.integers(1, 3)) for _ in range(t)] for t in turns]
    groups = [draw(st.sampled_from(["a", "b", "c"])) for _ in range(n)]
    return trajectories, widths, groups


@settings(max_examples=150, deadline=None)
@given(case=random_trajectories(), method=st.sampled_from(sorted(TURN_ESTIMATORS)), norm=st.booleans(),
       observation=st.integers(1, 2))  # fmt: skip
def test_every_estimator_equals_its_plain_loop_definition(case, method, norm, observation):
    trajectories, widths, groups = case
    rows = verl_rows(trajectories, groups=groups, widths=widths, observation=observation)
    result = per_turn(rows, method, norm=norm)
    expected = loop_reference(trajectories, groups, method, norm)
    for got, want in zip(result, expected, strict=True):
        close(got, want, tol=1e-4)
