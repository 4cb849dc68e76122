"""agl_lab's rollout-level advantage against the released Agent Lightning 1.0.2, with every estimator verl 0.9.1 has.

The same random batch (rows of rollouts of prompts; bf16 or float32 rewards; empty rows; rollouts whose rows
disagree on uid or reward; ids as numpy str, object or int arrays) goes to Agent Lightning's
``compute_rollout_level_advantage`` and to agl_lab's, with one of verl's estimators. Where Agent Lightning returns,
the batches are equal field by field (advantages, returns, uid: values, dtype) and so are the metrics; where it
raises, agl_lab raises the same type with the same text. verl's outcome estimators all run; the token-level ones
(GAE, the optimal-token baselines) are refused by both. Intended differences are the ``test_difference_*`` tests.
"""

from __future__ import annotations

import collections
import functools
import re

import numpy as np
import pytest
import torch
from agl_oracle import (
    MASK_DTYPES,
    N_EXAMPLES,
    ORACLE_SETTINGS,
    OUTCOME_ESTIMATORS,
    TOKEN_LEVEL_ESTIMATORS,
    agl,
    assert_same_batch,
    assert_same_error,
    assert_unchanged,
    count,
    examples,
    make_rows,
    outcome,
    snapshot,
)
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from agl_lab import compose_config, compute_rollout_level_advantage

GDPO_KEYS = ("fmt", "acc")
RESULTS: collections.Counter = collections.Counter()  # (estimator, "ok" or the error's first words) -> examples


@functools.cache
def algorithm_config():
    """The composed config's algorithm section (verl's AlgoConfig keys), plus GDPO's reward components."""
    algorithm = compose_config().algorithm
    return OmegaConf.merge(algorithm, {"gdpo_reward_keys": list(GDPO_KEYS)})


@st.composite
def rollout_batches(draw):
    """A random rollout batch, the estimator and its arguments; the batch is built fresh for each side."""
    estimator = draw(st.sampled_from(OUTCOME_ESTIMATORS + TOKEN_LEVEL_ESTIMATORS))
    rng_seed = draw(st.integers(0, 2**32 - 1))
    n_prompts, width = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    rows_per_rollout = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 7)))]
    spec = {
        "seed": rng_seed,
        "n_prompts": n_prompts,
        "width": width,
        "rows_per_rollout": rows_per_rollout,
        "score_dtype": draw(st.sampled_from([torch.bfloat16, torch.bfloat16, torch.float32, torch.float64])),
        "mask_dtype": draw(st.sampled_from(MASK_DTYPES)),
        "id_kind": draw(st.sampled_from(["str", "object", "int"])),
        "uid_from": draw(st.sampled_from(["data_id_list", "data_id_list", "uid", "both", "neither"])),
        "broken": draw(st.sampled_from([None] * 8 + ["uid", "reward", "tiny_reward", "empty_first", "no_rollout_ids"])),
        "extras": estimator in TOKEN_LEVEL_ESTIMATORS or draw(st.booleans()),  # values, baselines, sum_pi_squared
    }
    kwargs = {
        "adv_estimator": estimator,
        "gamma": draw(st.sampled_from([1.0, 1.0, 0.9])),
        "lam": draw(st.sampled_from([1.0, 0.95])),
        "num_repeat": draw(st.integers(1, 4)),
        "norm_adv_by_std_in_grpo": draw(st.booleans()),
        "config": algorithm_config(),
    }
    return spec, kwargs


def build(spec):
    """The batch of ``spec``: rows shuffled, each rollout's reward on every one of its rows (unless broken)."""
    rng = np.random.default_rng(spec["seed"])
    sizes = spec["rows_per_rollout"]
    rollout_of_row = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))  # (rows,): rows of a rollout apart
    n, width = len(rollout_of_row), spec["width"]
    prompt_of_rollout = rng.integers(0, spec["n_prompts"], len(sizes))
    reward_of_rollout = rng.choice([0.0, 1.0, 0.5, -1.0, float(rng.normal()), 1 / 3], size=len(sizes))
    rewards = reward_of_rollout[rollout_of_row].astype(float)
    lengths = rng.integers(1, width + 1, n)
    if rng.random() < 0.15:
        lengths[rng.integers(0, n)] = 0  # a row without trainable tokens
    first_row = {r: int(np.flatnonzero(rollout_of_row == r)[0]) for r in range(len(sizes))}
    uids = prompt_of_rollout[rollout_of_row].astype(object)
    broken, multi = spec["broken"], [r for r, k in enumerate(sizes) if k > 1]
    if broken in ("uid", "reward", "tiny_reward") and multi:
        row = int(np.flatnonzero(rollout_of_row == multi[0])[-1])  # the last row of a multi-row rollout
        if broken == "uid":
            uids[row] = spec["n_prompts"] + 5
        else:  # a different reward, or one within torch.allclose's tolerance of the first row's
            rewards[row] += 1e-7 if broken == "tiny_reward" else 0.75
    if broken == "empty_first":
        lengths[first_row[0]] = 0
    ids = {
        "str": lambda v: np.array([f"r{x}" for x in v]),
        "object": lambda v: np.array([f"r{x}" for x in v], dtype=object),
    }
    ids["int"] = lambda v: np.asarray(v, dtype=np.int64)
    as_ids = ids[spec["id_kind"]]
    data_ids = (
        np.array([f"q{u}" for u in uids], dtype=object)
        if spec["id_kind"] == "object"
        else np.array([f"q{u}" for u in uids])
    )
    extra = {}
    if spec["extras"]:  # what verl's other estimators read
        extra = {
            "values": torch.from_numpy(rng.normal(size=(n, width))).float(),
            "reward_baselines": torch.from_numpy(rng.normal(size=n)).float(),
            "sum_pi_squared": torch.from_numpy(rng.random((n, width))).float(),
            "old_log_probs": torch.from_numpy(-rng.random((n, width))).float(),
        }
    non_tensor = {key: rng.choice([0.0, 1.0], size=n).astype(np.float32) for key in GDPO_KEYS}
    uid_from = spec["uid_from"]
    if uid_from in ("uid", "both"):
        non_tensor["uid"] = data_ids
    batch = make_rows(
        lengths=lengths.tolist(),
        width=width,
        rollout_ids=as_ids(rollout_of_row),
        data_ids=data_ids if uid_from in ("data_id_list", "both") else None,
        rewards=rewards.tolist(),
        score_dtype=spec["score_dtype"],
        extra=extra,
        non_tensor=non_tensor,
        mask_dtype=spec["mask_dtype"],
    )
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    if broken == "no_rollout_ids":
        del batch.non_tensor_batch["rollout_id_list"]
    return batch


@ORACLE_SETTINGS
@given(case=rollout_batches())
def _rollout_level_cases(case):
    spec, kwargs = case
    theirs, their_error = outcome(lambda: agl().advantage.compute_rollout_level_advantage(build(spec), **kwargs))
    given_batch = build(spec)
    before = snapshot(given_batch)
    ours, our_error = outcome(lambda: compute_rollout_level_advantage(given_batch, **kwargs))
    # the batch's own fields are never changed (a float32 mask once came back holding advantages); on success it
    # gains what the function writes
    assert_unchanged(given_batch, before, added=("advantages", "returns", "uid") if our_error is None else ())
    estimator = kwargs["adv_estimator"]
    if their_error is not None:
        assert_same_error(their_error, our_error)
        RESULTS[estimator, str(their_error).split(";")[0][:60]] += 1
    else:
        assert our_error is None, our_error
        (our_batch, our_metrics), (their_batch, their_metrics) = ours, theirs
        assert_same_batch(our_batch, their_batch)
        assert our_metrics == their_metrics and all(type(v) is int for v in our_metrics.values())
        if "returns" in our_batch.batch.keys():  # broadcast separately: never the advantages' storage
            assert our_batch.batch["returns"].data_ptr() != our_batch.batch["advantages"].data_ptr()
        RESULTS[estimator, "ok"] += 1
    count()


def test_rollout_level_advantage_equals_agent_lightnings_for_every_estimator():
    RESULTS.clear()
    examples(_rollout_level_cases, N_EXAMPLES)
    for estimator in OUTCOME_ESTIMATORS:  # each outcome estimator ran and agreed, not only raised
        assert RESULTS[estimator, "ok"] > 0, (estimator, RESULTS)


@pytest.mark.parametrize("estimator", TOKEN_LEVEL_ESTIMATORS)
def test_token_level_estimators_are_refused_by_both(estimator):
    # float32 rewards (verl's optimal-token baselines cannot write bf16 ones), 3-token rows, what each estimator reads
    def batch():
        rng = np.random.default_rng(0)
        rows = make_rows(
            lengths=[3, 2, 3],
            width=3,
            rollout_ids=np.array(["A", "A", "B"]),
            data_ids=np.array(["q", "q", "q"]),
            rewards=[1.0, 1.0, 0.0],
            score_dtype=torch.float32,
            extra={
                "values": torch.from_numpy(rng.normal(size=(3, 3))).float(),
                "sum_pi_squared": torch.from_numpy(rng.random((3, 3))).float(),
                "old_log_probs": torch.from_numpy(-rng.random((3, 3))).float(),
            },
        )
        rows.batch["token_level_rewards"] = rows.batch["token_level_scores"]
        return rows

    kwargs = {"adv_estimator": estimator, "gamma": 0.9, "lam": 0.95, "num_repeat": 1, "config": algorithm_config()}
    _, theirs = outcome(lambda: agl().advantage.compute_rollout_level_advantage(batch(), **kwargs))
    _, ours = outcome(lambda: compute_rollout_level_advantage(batch(), **kwargs))
    assert str(theirs).startswith("rollout-level advantage requires scalar outcome-style advantages"), theirs
    assert_same_error(theirs, ours)


# --- intended differences (docs/differences.md), each shown on both sides -------------------------------------------


def _two_rollouts(**kwargs):
    return make_rows(
        lengths=[2, 1, 3],
        width=3,
        rollout_ids=np.array(["A", "A", "B"]),
        data_ids=np.array(["q", "q", "q"]),
        rewards=[1.0, 1.0, 0.0],
        **kwargs,
    )


def _grpo(batch, fn):
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    return fn(batch, adv_estimator="grpo", gamma=1.0, lam=1.0, num_repeat=1)


def test_difference_a_failed_call_leaves_the_batch_as_it_was():
    # Agent Lightning writes uid = data_id_list before it checks the rows; agl_lab checks everything first
    theirs, ours = _two_rollouts(), _two_rollouts()
    for batch in (theirs, ours):
        batch.batch["token_level_scores"][1, 0] = 0.5  # rollout A's rows now disagree on the reward
    with pytest.raises(RuntimeError, match="same scalar token_level_rewards sum"):
        _grpo(theirs, agl().advantage.compute_rollout_level_advantage)
    with pytest.raises(RuntimeError, match="same scalar token_level_rewards sum"):
        _grpo(ours, compute_rollout_level_advantage)
    assert "uid" in theirs.non_tensor_batch and "uid" not in ours.non_tensor_batch


def test_difference_nan_or_infinite_rewards_are_refused_by_name():
    theirs, ours = _two_rollouts(), _two_rollouts()
    for batch in (theirs, ours):
        batch.batch["token_level_scores"][2, 2] = float("nan")
    # Agent Lightning: torch.allclose(nan, nan) is False, so it blames the rollout's rows for disagreeing (the id shown
    # by its repr: np.str_('B') on numpy 2, 'B' on numpy 1)
    b = theirs.non_tensor_batch["rollout_id_list"][2]
    blamed = re.escape(f"same scalar token_level_rewards sum; got rollout_id={b!r}")
    with pytest.raises(RuntimeError, match=blamed):
        _grpo(theirs, agl().advantage.compute_rollout_level_advantage)
    with pytest.raises(ValueError, match=r"batch\['token_level_rewards'\] has NaN or inf values in rows \[2\]"):
        _grpo(ours, compute_rollout_level_advantage)


def test_difference_ids_as_a_plain_list_are_accepted():
    # Agent Lightning indexes the id column with a list of rows, which a Python list cannot take
    theirs, ours = _two_rollouts(), _two_rollouts()
    for batch in (theirs, ours):
        batch.non_tensor_batch["rollout_id_list"] = ["A", "A", "B"]
    with pytest.raises(TypeError):
        _grpo(theirs, agl().advantage.compute_rollout_level_advantage)
    batch, metrics = _grpo(ours, compute_rollout_level_advantage)
    assert metrics["training/rollout_level_advantage/n_rollouts"] == 2
    reference, _ = _grpo(_two_rollouts(), agl().advantage.compute_rollout_level_advantage)
    assert torch.equal(batch.batch["advantages"], reference.batch["advantages"])


def test_difference_an_empty_batch_is_refused():
    # Agent Lightning fails inside torch.stack; its trainer never calls it on an empty batch (it skips the step)
    with pytest.raises(RuntimeError, match="stack expects a non-empty TensorList"):
        _grpo(_two_rollouts()[[]], agl().advantage.compute_rollout_level_advantage)
    empty = _two_rollouts()[[]]
    with pytest.raises(ValueError, match=r"got an empty batch \(0 rows\): skip the step instead"):
        _grpo(empty, compute_rollout_level_advantage)


def test_difference_integer_rewards_are_refused_by_name():
    theirs, ours = _two_rollouts(score_dtype=torch.long), _two_rollouts(score_dtype=torch.long)
    _, their_error = outcome(lambda: _grpo(theirs, agl().advantage.compute_rollout_level_advantage))
    assert their_error is not None  # Agent Lightning fails inside verl's estimator, on the integer scores
    with pytest.raises(ValueError, match=r"batch\['token_level_rewards'\] must be a floating-point tensor"):
        _grpo(ours, compute_rollout_level_advantage)
