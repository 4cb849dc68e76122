"""Every mask dtype real batches carry (int64, bool, float32, bf16) gives the same numbers, and no entry point changes
the batch it is given.

A float32 ``response_mask`` once came back from rollout-level advantage holding advantages (``.to(dtype)`` returns
the tensor itself when the dtype already matches, and it was then scaled in place), so every analysis after it read
advantages as token counts; a bf16 mask could not be turned into numpy. Each test runs an entry point on the same
rows with each mask dtype, checks the rows afterwards, and requires the int64 mask's result.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from agl_oracle import MASK_DTYPES, assert_unchanged, make_rows, snapshot

from agl_lab import (
    EmptyBatchWarning,
    apply_update_cap,
    compute_rollout_level_advantage,
    prepare_batch,
    rows_frame,
    weighting_diagnostics,
)
from agl_lab.config.compose import compose_from
from agl_lab.core.row_sums import trainable_tokens
from agl_lab.core.row_weights import row_loss_weights, weight_advantages
from agl_lab.files.batch_io import load_batch, sample_batch_path
from agl_lab.lab.loss_scale import loss_scale
from agl_lab.lab.weighting import analyze_weighting

MODES = ["token-mean", "per_rollout_mean:rows", "partition_preserving"]
DTYPE_IDS = [str(d).removeprefix("torch.") for d in MASK_DTYPES]


def three_rollouts(mask_dtype: torch.dtype):
    """Rollout A (solved) in 1 row, B and C (failed) in 3 and 2 rows, one prompt: the issue's 3-rollout batch."""
    return make_rows(
        lengths=[3, 2, 4, 1, 2, 3],
        width=4,
        rollout_ids=np.array(["A", "B", "B", "B", "C", "C"]),
        data_ids=np.array(["q"] * 6),
        rewards=[1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        mask_dtype=mask_dtype,
    )


def sample_with(mask_dtype: torch.dtype):
    batch = load_batch(sample_batch_path())
    batch.batch["response_mask"] = batch.batch["response_mask"].to(mask_dtype)
    return batch


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=DTYPE_IDS)
def test_trainable_tokens_are_exact_for_every_dtype(mask_dtype):
    # 300 trainable tokens: bf16 arithmetic would give 300 -> 300 but 301 -> 300 (spacing 2 above 256)
    mask = torch.zeros(2, 400)
    mask[0, :301], mask[1, :7] = 1, 1
    given = mask.to(mask_dtype)
    before = given.clone()
    assert trainable_tokens(given).tolist() == [301.0, 7.0]
    assert torch.equal(given, before)


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=DTYPE_IDS)
def test_rollout_level_advantage_leaves_the_mask_a_mask(mask_dtype):
    batch = three_rollouts(mask_dtype)
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    before = snapshot(batch)
    out, _ = compute_rollout_level_advantage(batch, adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=1)
    assert_unchanged(out, before, added=("advantages", "returns", "uid"))
    reference = three_rollouts(torch.long)
    reference.batch["token_level_rewards"] = reference.batch["token_level_scores"]
    expected, _ = compute_rollout_level_advantage(reference, adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=1)
    assert torch.equal(out.batch["advantages"], expected.batch["advantages"])


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=DTYPE_IDS)
def test_the_diagnostics_table_is_the_same_for_every_mask_dtype(mask_dtype):
    # the case: partition_preserving's solve_by_row read 1.000 instead of 1/6 with a float32 mask
    batch = three_rollouts(mask_dtype)
    before = snapshot(batch)
    table = weighting_diagnostics(batch)
    assert_unchanged(batch, before)
    expected = weighting_diagnostics(three_rollouts(torch.long))
    pd.testing.assert_frame_equal(table, expected)
    # rows of A: 1 of 6; partition_preserving's weight of a row is T_j / mean T of its rollout, so each rollout's
    # rows weigh k in all: A 1, B 3, C 2, and the solved share is 1/6
    solve = table.set_index("mode").loc["partition_preserving", "solve_by_row"]
    assert solve == pytest.approx(1 / 6)


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=DTYPE_IDS)
def test_the_sample_batchs_analyses_do_not_move_with_the_mask_dtype(mask_dtype):
    cfg = compose_from("short-run")  # mini-batches the sample batch fills (the default one holds 256 rows)
    batch = sample_with(mask_dtype)
    before = snapshot(batch)
    table = weighting_diagnostics(batch)
    weighting = analyze_weighting(batch, cfg, modes=MODES)[0]
    frame = rows_frame(batch)
    assert_unchanged(batch, before)
    reference = sample_with(torch.long)
    pd.testing.assert_frame_equal(table, weighting_diagnostics(reference))
    expected = analyze_weighting(reference, cfg, modes=MODES)[0]
    pd.testing.assert_frame_equal(weighting.rollouts, expected.rollouts)
    pd.testing.assert_frame_equal(frame, rows_frame(reference))


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=DTYPE_IDS)
def test_the_pipeline_and_the_loss_scale_leave_the_rows_as_they_were(mask_dtype):
    cfg = compose_from(
        "short-run", dotlist=["agentlightning.max_ppo_update_times=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]
    )
    rows = sample_with(mask_dtype)
    before = snapshot(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyBatchWarning)
        batch, metrics = prepare_batch(rows, cfg)
        capped, cap_metrics = apply_update_cap(rows, mini_batch_size=8, max_ppo_update_times=1, seed=0)
    assert_unchanged(rows, before)
    reference, expected = prepare_batch(sample_with(torch.long), cfg)
    # verl's compute_data_metrics averages bf16 advantages under the mask in the promoted dtype: float32 with a
    # float32 mask, bf16 with an integer one; the same numbers to bf16's precision
    assert metrics == pytest.approx(expected, rel=4e-3) and cap_metrics["training/n_sample_trained"] == 8
    # verl's estimators multiply by the mask, so a float32 mask gives float32 advantages where an integer one keeps
    # the scores' bf16 (Agent Lightning's too: the differential tests draw every mask dtype); the values agree
    advantages, expected_advantages = batch.batch["advantages"], reference.batch["advantages"]
    torch.testing.assert_close(advantages.float(), expected_advantages.float(), rtol=8e-3, atol=1e-7)
    assert loss_scale(batch, cfg) == loss_scale(reference, cfg)


@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=DTYPE_IDS)
def test_row_weights_read_the_mask_without_writing_it(mask_dtype):
    batch = three_rollouts(mask_dtype)
    mask = batch.batch["response_mask"]
    before = mask.clone()
    ids = batch.non_tensor_batch["rollout_id_list"]
    advantages = torch.ones(mask.shape)
    for mode in ("session_equal", "partition_preserving"):
        weights = row_loss_weights(mask, ids, mode=mode)
        expected = row_loss_weights(mask.long(), ids, mode=mode)
        assert torch.equal(weights, expected)
        assert torch.equal(
            weight_advantages(advantages, mask, ids, mode=mode),
            weight_advantages(advantages, mask.long(), ids, mode=mode),
        )
    assert torch.equal(mask, before) and mask.dtype == mask_dtype
