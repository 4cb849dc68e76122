"""The weighting diagnostics (verl PR #7580's table, every catalogue mode) against a count by hand from the sample
batch's rollouts, the influence by class, the step metrics, the fields it needs, and the proposals figure."""

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

import agl_lab
from agl_lab import LOSS_MODES, short_run_config
from agl_lab.files.batch_io import load_batch, sample_batch_path
from agl_lab.lab.diagnostics import COLUMNS, batch_diagnostics, influence_by_class, step_diagnostics
from agl_lab.lab.diagnostics_figures import PROPOSALS, plot_proposals


def rollouts_by_hand():
    """data/sample_batch's rollouts counted with plain loops: id -> [prompt, reward, rows], and rollout-level GRPO
    advantages per rollout ((reward − prompt mean) / (unbiased std + 1e-6), as verl's estimator on one row each,
    in the scores' bf16 as it computes them: Agent Lightning's dtype)."""
    rows = load_batch(sample_batch_path())
    reward = rows.batch["token_level_scores"].float().sum(-1).tolist()
    table = {}
    for i, (rid, prompt) in enumerate(
        zip(rows.non_tensor_batch["rollout_id_list"], rows.non_tensor_batch["data_id_list"], strict=True)
    ):
        table.setdefault(rid, [prompt, reward[i], 0])[2] += 1
    by_prompt = defaultdict(list)
    for prompt, r, _ in table.values():
        by_prompt[prompt].append(r)
    advantage = {}
    for rid, (prompt, r, _) in table.items():
        scores = torch.tensor(by_prompt[prompt], dtype=torch.bfloat16)
        advantage[rid] = float((torch.tensor(r, dtype=torch.bfloat16) - scores.mean()) / (scores.std() + 1e-6))
    return table, advantage


def hand_table():
    """The table's numbers for seq-mean-token-mean (every row alike) and session_equal (1/k per row), by hand."""
    table, advantage = rollouts_by_hand()
    k = {rid: n for rid, (_, _, n) in table.items()}
    solved = {rid: r > 0 for rid, (_, r, _) in table.items()}
    rows = sum(k.values())
    by_trajectory = sum(solved.values()) / len(table)
    unweighted_by_row = sum(k[r] for r in table if solved[r]) / rows
    ess = len(table) ** 2 / sum(k[r] * (1 / k[r]) ** 2 for r in table) / rows  # Σw = R, Σw² = Σ_r k·(1/k)²
    a_u_a_w = sum(k[r] * advantage[r] * advantage[r] / k[r] for r in table)
    norm_u = math.sqrt(sum(k[r] * advantage[r] ** 2 for r in table))
    norm_w = math.sqrt(sum(k[r] * (advantage[r] / k[r]) ** 2 for r in table))
    return {
        "trajectories": len(table),
        "rows": rows,
        "solve_by_trajectory": by_trajectory,
        "mean_rows_solved": sum(k[r] for r in table if solved[r]) / sum(solved.values()),
        "mean_rows_failed": sum(k[r] for r in table if not solved[r]) / (len(table) - sum(solved.values())),
        "seq-mean-token-mean": {"solve_by_row": unweighted_by_row, "gap": by_trajectory - unweighted_by_row,
                                "adv_cosine": 1.0, "ess_fraction": 1.0},
        "session_equal": {"solve_by_row": by_trajectory, "gap": 0.0, "adv_cosine": a_u_a_w / (norm_u * norm_w),
                          "ess_fraction": ess},
    }  # fmt: skip


def test_the_sample_batch_against_a_count_by_hand():
    expected = hand_table()
    # the batch's own numbers (data/sample_batch/README.md): 48 rollouts, 81 rows, 23 solved with 1.30 rows each
    assert (expected["trajectories"], expected["rows"]) == (48, 81)
    assert expected["solve_by_trajectory"] == 23 / 48 and expected["mean_rows_failed"] == 2.04
    table = agl_lab.weighting_diagnostics(sample_batch_path()).set_index("mode")
    assert list(table.reset_index().columns) == [*COLUMNS, "missing"] and list(table.index) == list(LOSS_MODES)
    for mode in ("seq-mean-token-mean", "session_equal"):
        line = table.loc[mode]
        for key in ("trajectories", "rows", "solve_by_trajectory", "mean_rows_solved", "mean_rows_failed"):
            assert line[key] == pytest.approx(expected[key], rel=1e-12), (mode, key)
        for key, value in expected[mode].items():
            assert line[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (mode, key)


def test_influence_by_class_against_a_count_by_hand():
    table, _ = rollouts_by_hand()
    sizes = [n for _, _, n in table.values()]
    failed = [r <= 0 for _, r, _ in table.values()]
    influence = agl_lab.weighting_diagnostics(sample_batch_path(), modes=["seq-mean-token-mean", "session_equal"])
    influence = influence.attrs["influence"].set_index(["mode", "rows_per_rollout"])
    for k in sorted(set(sizes)):
        members = [i for i, n in enumerate(sizes) if n == k]
        for mode, share in (("seq-mean-token-mean", k * len(members) / sum(sizes)), ("session_equal", None)):
            line = influence.loc[(mode, str(k))]
            assert line["rollouts"] == len(members) and line["rollout_share"] == pytest.approx(len(members) / 48)
            # unweighted: a k-row rollout carries k rows' mass; session_equal: each rollout one share
            assert line["gradient_share"] == pytest.approx(share or len(members) / 48, rel=1e-6)
            assert line["failure_fraction"] == pytest.approx(sum(failed[i] for i in members) / len(members))


def test_fields_the_diagnostics_need_and_unknown_modes_are_named():
    rows = load_batch(sample_batch_path())
    del rows.non_tensor_batch["rollout_id_list"]
    cfg = short_run_config()
    with pytest.raises(ValueError, match=r"the weighting diagnostics \(session_equal\) needs fields this batch lacks: "
                                         r"rollout_id_list"):  # fmt: skip
        batch_diagnostics(rows, cfg, modes=["session_equal"])
    with pytest.raises(ValueError, match=r"unknown loss modes \['session-equal'\]: choose from \['per_rollout_mean"):
        batch_diagnostics(load_batch(sample_batch_path()), cfg, modes=["session-equal"])


def test_step_metrics_hold_every_mode_and_the_runs_own_unprefixed():
    batch = load_batch(sample_batch_path())
    cfg = short_run_config(dotlist=["actor_rollout_ref.actor.policy_loss.loss_mode=session_equal"])
    table = batch_diagnostics(batch, cfg)  # the rows as given, as a step that trained all of them
    from agl_lab.core.pipeline import compute_advantages, select_rows

    work, _ = select_rows(batch, short_run_config(dotlist=["actor_rollout_ref.actor.ppo_mini_batch_size=1",
                                                           "actor_rollout_ref.rollout.n=1"]))  # fmt: skip
    work, _ = compute_advantages(work, cfg, normalize=False)
    metrics = step_diagnostics(work, cfg)
    assert metrics["lab/diagnostics/trajectories"] == 48 and metrics["lab/diagnostics/rows"] == 81
    for mode in LOSS_MODES:
        assert f"lab/diagnostics/{mode}/ess_fraction" in metrics
    assert metrics["lab/diagnostics/gap"] == metrics["lab/diagnostics/session_equal/gap"] == pytest.approx(0, abs=1e-9)
    line = table.set_index("mode").loc["session_equal"]
    assert metrics["lab/diagnostics/ess_fraction"] == pytest.approx(line["ess_fraction"])
    assert metrics["lab/diagnostics/class_4/rollout_share"] == pytest.approx(2 / 48)  # the two 4-row rollouts
    influence = influence_by_class(work, cfg, modes=["session_equal"]).to_dict("records")  # the same, as a table
    assert len(influence) > 1 and {key for key in metrics if "/class_" in key} == {
        f"lab/diagnostics/class_{line['rows_per_rollout']}/{key}"
        for line in influence
        for key in ("rollout_share", "gradient_share", "failure_fraction")
    }
    for line in influence:
        for key in ("rollout_share", "gradient_share", "failure_fraction"):
            assert metrics[f"lab/diagnostics/class_{line['rows_per_rollout']}/{key}"] == line[key]
    # a step where no rollout is solved and every advantage is 0: rows per solved rollout and the cosine are undefined
    # there, and left out rather than logged as NaN
    work.batch["token_level_scores"].zero_()
    work.batch["advantages"].zero_()
    failed = step_diagnostics(work, cfg)
    assert "lab/diagnostics/mean_rows_solved" not in failed and "lab/diagnostics/adv_cosine" not in failed
    assert failed["lab/diagnostics/mean_rows_failed"] == pytest.approx(81 / 48)
    assert all(math.isfinite(value) for value in failed.values())


def test_the_proposals_figure_draws_each_class_gap_and_ess():
    table = agl_lab.weighting_diagnostics(sample_batch_path(), modes=PROPOSALS)
    fig = plot_proposals(table)
    left, middle, right = fig.get_axes()
    assert len(left.patches) == 4 * len(PROPOSALS)  # 4 classes (1-4 rows) × modes
    assert [t.get_text() for t in middle.get_yticklabels()] == list(PROPOSALS)
    assert np.allclose([p.get_width() for p in middle.patches], table["gap"])
    with pytest.raises(ValueError, match=r"the table has no rows for \['token-mean'\]"):
        plot_proposals(table, modes=["token-mean"])


def test_per_turn_rewards_a_rollout_is_solved_by_its_outcome_not_its_first_turns_cost():
    from agl_lab.core.aggregation import LLMCall, Rollout, aggregate

    calls = [LLMCall([1], [5]), LLMCall([1, 5, 9], [6]), LLMCall([2], [7])]  # 2 trajectory rows: the 3rd rewrites
    rollouts = [
        Rollout("a", "q", calls, reward=1.0, turn_rewards=(-0.5, -0.5)),  # solved after 2 costly tries
        Rollout("b", "q", calls[:1], reward=0.0),
        Rollout("c", "q", calls[:2], 0.0, turn_rewards=(-0.5,)),
    ]
    rows, _ = aggregate(rollouts, level="trajectory", max_prompt_length=8, max_response_length=8)  # fmt: skip
    cfg = short_run_config(dotlist=["algorithm.adv_estimator=mt_grpo_fix", "lab.turn_cost=0.5",
                                    "algorithm.enable_rollout_level_advantage=false"])  # fmt: skip
    table = batch_diagnostics(rows, cfg, modes=["seq-mean-token-mean"])
    # a's first row holds -0.5 - 0.5 (its first two turns), its last row the outcome 1: solved; b and c failed
    assert table.loc[0, "solve_by_trajectory"] == pytest.approx(1 / 3)
    assert table.loc[0, "mean_rows_solved"] == 2 and table.loc[0, "mean_rows_failed"] == 1
