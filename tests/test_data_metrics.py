"""agl_lab's data metrics against verl's own ``compute_data_metrics`` on the same rows: the same dict, bit for bit.

:func:`agl_lab.core.data_metrics.data_metrics` gathers the response tokens of ``advantages`` and ``returns`` once
instead of verl's two ``masked_select``; every other number comes from verl's function on a stand-in. Random rows vary
what real steps vary: every mask dtype (int64, bool, float32, bf16), bf16 and float32 advantages, aborted rows (no
response token), all-False masks, left-padded prompts, precomputed ``prompt_length``/``response_length``,
``__num_turns__`` and ``tool_call_counts``, non-contiguous advantages; then a step of 2,400 rows built by
:func:`bench_batch_math.make_step` and the shipped sample batch through the trainer's own steps.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import numpy as np
import torch
from agl_oracle import MASK_DTYPES, assert_unchanged, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics

from agl_lab import compose_config
from agl_lab.config.compose import compose_from
from agl_lab.core.data_metrics import data_metrics
from agl_lab.core.pipeline import compute_advantages, select_rows
from agl_lab.files.batch_io import load_batch, sample_batch_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_batch_math import make_step  # noqa: E402  (the benchmark's 10k-row step, smaller)


def assert_same(ours: dict, theirs: dict) -> None:
    """The same keys, and per key the same type and value (NaN where verl has NaN)."""
    assert set(ours) == set(theirs), sorted(set(ours) ^ set(theirs))
    for key, value in theirs.items():
        mine = ours[key]
        assert type(mine) is type(value), f"{key}: {type(mine)} vs {type(value)}"
        both_nan = isinstance(value, float) and math.isnan(value) and math.isnan(mine)
        assert both_nan or mine == value, f"{key}: {mine!r} vs verl's {value!r}"


def rows_from(spec: dict) -> DataProto:
    """Rows in verl's layout: left-padded prompts, right-padded responses, advantages and returns on the mask."""
    rng = np.random.default_rng(spec["seed"])
    n, prompt, width = spec["rows"], spec["prompt"], spec["width"]
    lengths = rng.integers(0 if spec["aborted"] else 1, width + 1, n)  # 0: an aborted row
    if spec["all_false"]:
        lengths[:] = 0
    mask = torch.from_numpy(np.arange(width)[None, :] < lengths[:, None])  # (rows, R)
    prompt_lengths = rng.integers(1, prompt + 1, n)
    prompt_mask = torch.from_numpy(np.arange(prompt)[None, :] >= prompt - prompt_lengths[:, None])  # (rows, P)
    adv_dtype = spec["adv_dtype"]
    advantages = (torch.from_numpy(rng.standard_normal((n, width))) * mask).to(adv_dtype)  # (rows, R)
    returns = (torch.from_numpy(rng.standard_normal((n, width))) * mask).to(adv_dtype)  # (rows, R)
    if spec["transposed"]:  # the same values in a non-contiguous layout
        advantages = advantages.t().contiguous().t()
    scores = torch.zeros(n, width, dtype=spec["score_dtype"])
    scores[torch.arange(n), torch.from_numpy(np.maximum(lengths - 1, 0))] = torch.from_numpy(
        rng.integers(0, 2, n).astype(np.float32)
    ).to(spec["score_dtype"])
    tensors = {
        "prompts": torch.ones(n, prompt, dtype=torch.long),
        "responses": torch.ones(n, width, dtype=torch.long),
        "attention_mask": torch.cat([prompt_mask, mask], dim=-1).long(),
        "response_mask": mask.to(spec["mask_dtype"]),
        "advantages": advantages,
        "returns": returns,
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
    }
    if spec["lengths_given"]:  # verl reads these instead of the attention mask when both are there
        tensors["prompt_length"] = torch.from_numpy(prompt_lengths).float()
        tensors["response_length"] = torch.from_numpy(lengths).float()
    non_tensors = {}
    if spec["turns"]:
        non_tensors["__num_turns__"] = rng.integers(1, 12, n)
        non_tensors["tool_call_counts"] = rng.integers(0, 5, n)
    return DataProto(batch=TensorDict(tensors, batch_size=n), non_tensor_batch=non_tensors)


@st.composite
def specs(draw):
    return {
        "seed": draw(st.integers(0, 2**32 - 1)),
        "rows": draw(st.integers(1, 40)),
        "prompt": draw(st.integers(1, 8)),
        "width": draw(st.integers(1, 12)),
        "mask_dtype": draw(st.sampled_from(MASK_DTYPES)),
        "adv_dtype": draw(st.sampled_from([torch.float32, torch.float32, torch.bfloat16])),
        "score_dtype": draw(st.sampled_from([torch.bfloat16, torch.float32])),
        "aborted": draw(st.booleans()),
        "all_false": draw(st.sampled_from([False] * 7 + [True])),
        "lengths_given": draw(st.booleans()),
        "turns": draw(st.booleans()),
        "transposed": draw(st.booleans()),
    }


@settings(max_examples=200, deadline=None)
@given(specs())
def test_the_same_metrics_as_verls_function(spec):
    rows = rows_from(spec)
    before = snapshot(rows)
    ours = data_metrics(rows)
    assert_unchanged(rows, before)
    assert_same(ours, compute_data_metrics(batch=rows, use_critic=False))


def test_an_all_false_mask_gives_verls_nan_and_warning(caplog):
    spec = {"seed": 0, "rows": 3, "prompt": 2, "width": 4, "mask_dtype": torch.bool, "adv_dtype": torch.float32,
            "score_dtype": torch.float32, "aborted": False, "all_false": True, "lengths_given": False,
            "turns": False, "transposed": False}  # fmt: skip
    rows = rows_from(spec)
    with caplog.at_level(logging.WARNING):
        ours = data_metrics(rows)
    assert math.isnan(ours["critic/advantages/mean"]) and math.isnan(ours["critic/returns/min"])
    assert "Response mask is all False" in caplog.text  # verl's own warning, from verl's function
    assert_same(ours, compute_data_metrics(batch=rows, use_critic=False))


def test_advantages_that_broadcast_over_the_mask_go_to_verls_own_selection():
    rows = make_step(16, width=6, prompt=3, mask_dtype=torch.float32)
    rows.batch["advantages"] = torch.randn(16, 1)  # (rows, 1): masked_select broadcasts it
    rows.batch["returns"] = torch.randn(16, 6)
    rows.batch["token_level_rewards"] = rows.batch["token_level_scores"]
    assert_same(data_metrics(rows), compute_data_metrics(batch=rows, use_critic=False))


def test_a_step_of_2400_rows_through_the_trainers_steps_with_each_mask_dtype(tmp_path):
    cfg = compose_config(dotlist=["algorithm.adv_estimator=grpo_vectorized", "actor_rollout_ref.rollout.n=8",
                                  "actor_rollout_ref.actor.ppo_mini_batch_size=16"])  # fmt: skip
    for mask_dtype in (torch.float32, torch.bool):
        path = tmp_path / f"step-{mask_dtype}.pkl"  # written and read back by verl's own DataProto, as a dump is
        make_step(2400, width=96, prompt=32, mask_dtype=mask_dtype).save_to_disk(path)
        rows = DataProto.load_from_disk(path)
        batch, metrics = compute_advantages(select_rows(rows, cfg, seed=0)[0], cfg, normalize=False)
        theirs = compute_data_metrics(batch=batch, use_critic=False)
        assert_same({key: metrics[key] for key in theirs}, theirs)
        assert len(batch) > 2000 and metrics["critic/advantages/max"] > 0  # a real step: rows kept, signal in it


def test_the_sample_batch_through_the_trainers_steps():
    cfg = compose_from("short-run")  # mini-batches the sample batch fills (the default one holds 256 rows)
    rows = select_rows(load_batch(sample_batch_path()), cfg, seed=0)[0]
    batch, metrics = compute_advantages(rows, cfg, normalize=False)  # the metrics are taken before step 5
    theirs = compute_data_metrics(batch=batch, use_critic=False)
    assert_same({key: metrics[key] for key in theirs}, theirs)
