"""agl_lab's normalization and per-rollout losses against the released Agent Lightning 1.0.2, on random batches.

Differential: the same inputs go to Agent Lightning's ``normalize_advantages_by_rollout``,
``compute_policy_loss_per_rollout_mean`` and ``compute_policy_loss_cispo_per_rollout_mean`` (called directly; the
registry is restored, see tests/agl_oracle.py) and to agl_lab's. Where Agent Lightning returns, the results are
bit-equal (values, dtype, gradient, metrics); where it raises, agl_lab raises the same type with the same text.
The differences agl_lab keeps on purpose (docs/differences.md) are pinned by the ``test_difference_*`` tests.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import numpy as np
import pandas as pd
import pytest
import torch
from agl_oracle import N_EXAMPLES, ORACLE_SETTINGS, agl, assert_same_error, assert_same_tensor, count, examples, outcome
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError
from verl.trainer.ppo import core_algos
from verl.utils.config import omega_conf_to_dataclass

from agl_lab import (
    compose_config,
    compute_policy_loss_cispo_per_rollout_mean,
    compute_policy_loss_per_rollout_mean,
    normalize_advantages_by_rollout,
)

ADV_DTYPES = (torch.float32, torch.bfloat16, torch.float64, torch.float16)
MASK_DTYPES = (torch.long, torch.bool, torch.int32, torch.float32, torch.bfloat16)
ID_KINDS = ("list", "tuple", "str_array", "object_array", "int_array", "series", "int_series", "tuple_ids")


def test_the_oracle_is_imported_and_the_registry_is_agl_labs_again():
    oracle = agl()
    assert oracle.loss.CISPO_PER_ROLLOUT_MEAN_LOSS_MODE == "cispo_per_rollout_mean"
    # Agent Lightning's import registered its own functions; agl() put agl_lab's back for every other test
    assert core_algos.POLICY_LOSS_REGISTRY["per_rollout_mean"] is compute_policy_loss_per_rollout_mean
    assert core_algos.POLICY_LOSS_REGISTRY["cispo_per_rollout_mean"] is compute_policy_loss_cispo_per_rollout_mean


def ids_as(kind: str, codes: np.ndarray):
    """One rollout id per row, in the container ``kind`` (every one Agent Lightning's loop accepts)."""
    names = [f"r{c}" for c in codes]
    return {
        "list": lambda: names,
        "tuple": lambda: tuple(names),
        "str_array": lambda: np.array(names),
        "object_array": lambda: np.array(names, dtype=object),
        "int_array": lambda: codes.astype(np.int64),
        "series": lambda: pd.Series(names, index=np.arange(len(names))[::-1] + 7),  # an index that is not 0..n-1
        "int_series": lambda: pd.Series(codes.astype(np.int64)),
        "tuple_ids": lambda: [("item", int(c)) for c in codes],
    }[kind]()


@st.composite
def normalization_inputs(draw):
    rows = draw(st.integers(0, 12))
    # wide rows now and then: bf16 rounds token counts above 256 (AGL casts each row's count before summing)
    width = draw(st.one_of(st.integers(1, 8), st.integers(250, 1100)))
    dtype = draw(st.sampled_from(ADV_DTYPES))
    mask_dtype = draw(st.sampled_from(MASK_DTYPES))
    kind = draw(st.sampled_from(ID_KINDS))
    n_rollouts = draw(st.integers(1, 5))
    num_trained_rows = draw(st.one_of(st.integers(1, 64), st.integers(1, 20_000), st.integers(-2, 0)))
    ids_length = rows if draw(st.integers(0, 19)) else draw(st.integers(0, 13))  # 1 in 20: a wrong length
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mask = torch.from_numpy(rng.random((rows, width)) < rng.random()).to(mask_dtype)  # (rows, R)
    advantages = torch.from_numpy(rng.normal(size=(rows, width)) * rng.choice([1.0, 1e-3, 1e3])).to(dtype)
    if draw(st.booleans()):
        advantages = advantages * mask.to(dtype)  # masked, as the trainer's are
    ids = ids_as(kind, rng.integers(0, n_rollouts, ids_length))
    return advantages, mask, ids, num_trained_rows


@ORACLE_SETTINGS
@given(inputs=normalization_inputs())
def _normalization_cases(inputs):
    advantages, mask, ids, num_trained_rows = inputs
    theirs, their_error = outcome(
        lambda: agl().loss.normalize_advantages_by_rollout(advantages, mask, ids, num_trained_rows=num_trained_rows)
    )
    given = (advantages.clone(), mask.clone(), ids.copy() if hasattr(ids, "copy") else ids)
    ours, our_error = outcome(
        lambda: normalize_advantages_by_rollout(advantages, mask, ids, num_trained_rows=num_trained_rows)
    )
    assert_inputs_unchanged((advantages, mask, ids), given)
    if their_error is not None:
        assert_same_error(their_error, our_error)
    else:
        assert our_error is None, our_error
        assert_same_tensor(ours, theirs, "normalized advantages")
    count()


def test_normalization_equals_agent_lightnings_on_random_batches():
    examples(_normalization_cases, N_EXAMPLES)


@functools.cache
def _verl_actor_config():
    """verl's own ActorConfig dataclass, as verl's workers build it from agl_lab's composed config (a tenth of a
    second: built once)."""
    dotlist = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"]
    return omega_conf_to_dataclass(compose_config(dotlist=dotlist).actor_rollout_ref.actor)


@functools.lru_cache
def _actor_config(clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c):
    """That ActorConfig with these clip ratios, through the dataclass's own constructor (its checks run again): equal
    field for field to composing them in and converting, for every value drawn below."""
    return dataclasses.replace(
        _verl_actor_config(),
        clip_ratio=clip_ratio,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_c=clip_ratio_c,
    )


@pytest.mark.parametrize(
    "ratios", [(0.2, None, None, 3.0), (0.1, 0.3, 0.5, 1.0), (0.28, 0.1, None, 0.5), (0.2, None, 0.28, 10.0)]
)
def test_the_drawn_actor_configs_equal_verls_built_from_a_composed_config(ratios):
    clip_ratio, low, high, clip_c = ratios
    dotlist = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"]
    dotlist += [f"actor_rollout_ref.actor.clip_ratio={clip_ratio}"]
    dotlist += [f"actor_rollout_ref.actor.clip_ratio_low={'null' if low is None else low}"]
    dotlist += [f"actor_rollout_ref.actor.clip_ratio_high={'null' if high is None else high}"]
    dotlist += [f"actor_rollout_ref.actor.clip_ratio_c={clip_c}"]
    built = omega_conf_to_dataclass(compose_config(dotlist=dotlist).actor_rollout_ref.actor)
    drawn = _actor_config(*ratios)
    assert type(drawn) is type(built) and drawn == built and repr(drawn) == repr(built)


@st.composite
def actor_configs(draw):
    """verl's ActorConfig, or a DictConfig with only the keys Agent Lightning requires (clip_ratio_c optional)."""
    clip = draw(st.sampled_from([0.2, 0.1, 0.28]))
    low = draw(st.sampled_from([None, 0.1, 0.2, 0.3]))
    high = draw(st.sampled_from([None, 0.2, 0.28, 0.5]))
    clip_c = draw(st.sampled_from([3.0, 1.5, 10.0, 1.0, 0.5]))  # <= 1: Agent Lightning's assertion
    batch_info = draw(st.sampled_from([{}, {"dp_size": 1}, {"dp_size": 2}, {"dp_size": 4}, {"dp_size": 0}, None]))
    if draw(st.booleans()):
        config = copy.deepcopy(_actor_config(clip, low, high, clip_c))
        config.global_batch_info.clear()
        config.global_batch_info.update(batch_info or {})
        return config
    plain = {"clip_ratio": clip, "clip_ratio_low": low, "clip_ratio_high": high, "global_batch_info": batch_info}
    if draw(st.booleans()):
        plain["clip_ratio_c"] = clip_c  # else absent: both read the default 3.0
    return OmegaConf.create(plain)


@st.composite
def loss_inputs(draw):
    rows, width = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    log_prob_dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.bfloat16]))
    adv_dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))  # bf16: Agent Lightning's default path
    old = torch.from_numpy(-np.abs(rng.normal(size=(rows, width))) * 3).to(log_prob_dtype)
    # log-ratios from none to past the ±20 clamp, so clip, dual clip and the clamp all occur
    scale = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0, 3.0, 30.0]))
    new = (old.double() + torch.from_numpy(rng.normal(size=(rows, width)) * scale)).to(log_prob_dtype)
    advantages = torch.from_numpy(rng.normal(size=(rows, width))).to(adv_dtype)
    if draw(st.booleans()):
        advantages = advantages.masked_fill(torch.from_numpy(rng.random((rows, width)) < 0.3), 0.0)
    mask = torch.from_numpy(rng.random((rows, width)) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])))
    mask = mask.to(draw(st.sampled_from(MASK_DTYPES)))
    weights = torch.from_numpy(rng.random((rows, width)) * 2).float() if draw(st.booleans()) else None
    return (
        old,
        new,
        advantages,
        mask,
        weights,
        draw(actor_configs()),
        draw(st.sampled_from(["token-mean", "seq-mean-token-sum"])),
    )


def assert_inputs_unchanged(inputs, copies):
    """Each tensor (and id container) a function got is as it was before the call: values and dtype."""
    for value, before in zip(inputs, copies, strict=True):
        if isinstance(value, torch.Tensor):
            assert_same_tensor(value, before, "an input tensor (after the call)")
        elif value is not None:
            assert list(value) == list(before), "the rollout ids were changed"


def _loss_and_gradient(loss_fn, old, new, advantages, mask, weights, config, agg):
    log_prob = new.clone().requires_grad_(True)
    loss, metrics = loss_fn(old, log_prob, advantages, mask, agg, config, rollout_is_weights=weights)
    loss.backward()
    return loss.detach(), metrics, log_prob.grad


def _loss_case(agl_fn, lab_fn, inputs):
    theirs, their_error = outcome(lambda: _loss_and_gradient(agl_fn, *inputs))
    given = [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]
    ours, our_error = outcome(lambda: _loss_and_gradient(lab_fn, *inputs))
    assert_inputs_unchanged(inputs[:5], given[:5])
    if their_error is not None:
        assert_same_error(their_error, our_error)
        return
    assert our_error is None, our_error
    assert_same_tensor(ours[0], theirs[0], "loss")
    assert ours[1] == theirs[1] and all(type(v) is float for v in ours[1].values()), (ours[1], theirs[1])
    assert_same_tensor(ours[2], theirs[2], "d loss / d log_prob")


@ORACLE_SETTINGS
@given(inputs=loss_inputs())
def _per_rollout_mean_cases(inputs):
    _loss_case(agl().loss.compute_policy_loss_per_rollout_mean, compute_policy_loss_per_rollout_mean, inputs)
    count()


@ORACLE_SETTINGS
@given(inputs=loss_inputs())
def _cispo_cases(inputs):
    _loss_case(
        agl().loss.compute_policy_loss_cispo_per_rollout_mean, compute_policy_loss_cispo_per_rollout_mean, inputs
    )
    count()


def test_per_rollout_mean_loss_equals_agent_lightnings_on_random_batches():
    examples(_per_rollout_mean_cases, N_EXAMPLES)


def test_cispo_per_rollout_mean_loss_equals_agent_lightnings_on_random_batches():
    examples(_cispo_cases, N_EXAMPLES)


def test_without_a_config_both_losses_raise_agent_lightnings_assertion():
    args = (torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1))
    for agl_fn, lab_fn in (
        (agl().loss.compute_policy_loss_per_rollout_mean, compute_policy_loss_per_rollout_mean),
        (agl().loss.compute_policy_loss_cispo_per_rollout_mean, compute_policy_loss_cispo_per_rollout_mean),
    ):
        _, theirs = outcome(lambda fn=agl_fn: fn(*args))
        _, ours = outcome(lambda fn=lab_fn: fn(*args))
        assert isinstance(theirs, AssertionError)
        assert_same_error(theirs, ours)


# --- intended differences (docs/differences.md), each shown on both sides -------------------------------------------


def test_difference_a_config_lacking_clip_ratio_low_high_or_batch_info_falls_back():
    # Agent Lightning reads clip_ratio_low/high and global_batch_info as required attributes: a hand-written config
    # without them fails inside OmegaConf. agl_lab reads them as optional (clip_ratio, dp_size 1).
    bare = OmegaConf.create({"clip_ratio": 0.2})
    full = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "global_batch_info": {}}
    )
    args = (torch.zeros(2, 3), torch.full((2, 3), 0.4), torch.randn(2, 3), torch.ones(2, 3))
    with pytest.raises(ConfigAttributeError, match="clip_ratio_low"):
        agl().loss.compute_policy_loss_per_rollout_mean(*args, config=bare)
    ours, _ = compute_policy_loss_per_rollout_mean(*args, config=bare)
    theirs, _ = agl().loss.compute_policy_loss_per_rollout_mean(*args, config=full)
    assert_same_tensor(ours, theirs, "loss")


def test_difference_rollout_ids_none_gets_the_trainers_text():
    # Agent Lightning's function fails in len(None); agl_lab raises the text its trainer raises for the missing field
    with pytest.raises(TypeError, match="has no len"):
        agl().loss.normalize_advantages_by_rollout(torch.ones(1, 1), torch.ones(1, 1), None, num_trained_rows=1)
    with pytest.raises(RuntimeError, match="^per_rollout_mean loss requires rollout_id_list$"):
        normalize_advantages_by_rollout(torch.ones(1, 1), torch.ones(1, 1), None, num_trained_rows=1)


def test_difference_mask_shape_and_tensor_ids_are_refused_by_name():
    advantages, ids = torch.ones(2, 3), ["a", "b"]
    # a (2, 2) mask: Agent Lightning divides anyway (its mask is only summed per row); agl_lab refuses
    agl().loss.normalize_advantages_by_rollout(advantages, torch.ones(2, 2), ids, num_trained_rows=2)
    with pytest.raises(ValueError, match=r"response_mask shape \(2, 2\) must match advantages shape \(2, 3\)"):
        normalize_advantages_by_rollout(advantages, torch.ones(2, 2), ids, num_trained_rows=2)
    # torch ids: Agent Lightning's dict fails with a KeyError on a 0-d tensor; agl_lab names the field
    with pytest.raises(KeyError):
        agl().loss.normalize_advantages_by_rollout(
            advantages, torch.ones(2, 3), torch.tensor([0, 1]), num_trained_rows=2
        )
    with pytest.raises(ValueError, match="rollout_id_list must hold one hashable id per row"):
        normalize_advantages_by_rollout(advantages, torch.ones(2, 3), torch.tensor([0, 1]), num_trained_rows=2)


def test_difference_missing_ids_are_refused():
    # None is a dict key like any other for Agent Lightning; agl_lab refuses a row that belongs to no rollout
    out = agl().loss.normalize_advantages_by_rollout(
        torch.ones(2, 1), torch.ones(2, 1), [None, None], num_trained_rows=2
    )
    assert out.flatten().tolist() == [0.25, 0.25]  # one rollout of 2 tokens × 2 rows
    with pytest.raises(ValueError, match=r"rollout_id_list has missing values \(None/NaN\) at rows \[0, 1\]"):
        normalize_advantages_by_rollout(torch.ones(2, 1), torch.ones(2, 1), [None, None], num_trained_rows=2)


def test_difference_the_eq16_divisor_is_agl_labs_own_option():
    # divisor="rows" (the default) is Agent Lightning's; "rollouts" (Eq. 16) has no counterpart there
    advantages, mask, ids = torch.ones(3, 2), torch.tensor([[1, 1], [1, 0], [1, 1]]), ["A", "A", "B"]
    theirs = agl().loss.normalize_advantages_by_rollout(advantages, mask, ids, num_trained_rows=3)
    assert_same_tensor(normalize_advantages_by_rollout(advantages, mask, ids, num_trained_rows=3), theirs, "rows")
    eq16 = normalize_advantages_by_rollout(advantages, mask, ids, num_trained_rows=3, divisor="rollouts")
    # A: 3 tokens × 2 rollouts = 6, B: 2 × 2 = 4 (Agent Lightning: × 3 rows = 9 and 6)
    assert eq16[:, 0].tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 4])
    assert theirs[:, 0].tolist() == pytest.approx([1 / 9, 1 / 9, 1 / 6])
