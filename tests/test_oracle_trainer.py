"""agl_lab's trainer steps 1–5 (``select_rows`` + ``compute_advantages``) against Agent Lightning 1.0.2's own
``_train_step``, run on a bare trainer object (tests/agl_oracle.py), on random batches and configs.

Per random batch: marked rows, mini-batch alignment and the cap, the same-reward and random drops, the rewards,
rollout correction (rows with rollout log-probs), rollout-level or verl advantage with one of verl's outcome
estimators, the metrics and the per-rollout normalization of both per-rollout loss modes (or none). The drop
counters must agree always. Which surplus rows go is a draw (Agent Lightning's from the global ``random``, agl_lab's
seeded: an intended difference), so the kept rows must agree where the draw is forced (nothing to drop, exactly the
same-reward rows, or everything), and otherwise agl_lab's steps 3–5 run on the rows Agent Lightning kept: the batch
the actor gets and every metric must then be equal. Where Agent Lightning raises, agl_lab raises the same.
"""

from __future__ import annotations

import collections
import functools
import pickle
import random
import re
import warnings

import numpy as np
import pytest
import torch
from agl_oracle import (
    MASK_DTYPES,
    N_EXAMPLES,
    ORACLE_SETTINGS,
    agl,
    agl_train_step,
    assert_same_batch,
    assert_same_error,
    assert_same_metrics,
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

from agl_lab import EmptyBatchWarning, compose_config, prepare_batch
from agl_lab.core.pipeline import compute_advantages, plan_selection, select_rows
from agl_lab.core.update_cap import same_reward_rows

ESTIMATORS = ("grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "reinforce_plus_plus")
ESTIMATORS += ("reinforce_plus_plus_baseline", "opo", "gpg")
LOSS_MODES = ("per_rollout_mean", "cispo_per_rollout_mean", "vanilla")
PATHS: collections.Counter = collections.Counter()


@functools.cache
def _base_config() -> bytes:
    """The sections both trainers read, from agl_lab's composed config, pickled: each config below unpickles it (a few
    ms) instead of building it from dicts (~0.1 s each: OmegaConf checks every node), and composing is done once."""
    cfg = compose_config()
    base = {
        "algorithm": OmegaConf.to_container(cfg.algorithm),
        "actor_rollout_ref": {
            "actor": {"ppo_mini_batch_size": 1, "policy_loss": {"loss_mode": "vanilla"}},
            "rollout": OmegaConf.to_container(cfg.actor_rollout_ref.rollout),
        },
        "agentlightning": {"max_ppo_update_times": None},
        "trainer": OmegaConf.to_container(cfg.trainer) | {"balance_batch": False},
        "lab": OmegaConf.to_container(cfg.lab),
    }
    return pickle.dumps(OmegaConf.create(base))


@functools.lru_cache(maxsize=4096)
def config(estimator, rollout_level, loss_mode, mini, n, cap, norm_by_std, rollout_is):
    """A config with every key Agent Lightning's trainer and agl_lab's steps read (balance_batch off: no workers)."""
    cfg = pickle.loads(_base_config())
    algorithm, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    algorithm.adv_estimator = estimator
    algorithm.enable_rollout_level_advantage = rollout_level
    algorithm.norm_adv_by_std_in_grpo = norm_by_std
    algorithm.rollout_correction.rollout_is = rollout_is
    actor.ppo_mini_batch_size = mini
    actor.policy_loss.loss_mode = loss_mode
    cfg.actor_rollout_ref.rollout.n = n
    cfg.agentlightning.max_ppo_update_times = cap
    return cfg


@st.composite
def train_steps(draw):
    rows_per_rollout = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 8)))]
    spec = {
        "seed": draw(st.integers(0, 2**32 - 1)),
        "n_prompts": draw(st.integers(1, 3)),
        "width": draw(st.integers(1, 5)),
        "rows_per_rollout": rows_per_rollout,
        "score_dtype": draw(st.sampled_from([torch.bfloat16, torch.bfloat16, torch.float32])),
        "mask_dtype": draw(st.sampled_from(MASK_DTYPES)),
        "marked": draw(st.sampled_from([None, 0.0, 0.15, 0.5])),  # None: no is_drop_mask at all
        "data_ids": draw(st.integers(0, 9)) > 0,  # 1 in 10 without data_id_list: a random uid per row
        "rollout_log_probs": draw(st.booleans()),
    }
    cfg_key = (
        draw(st.sampled_from(ESTIMATORS)),
        draw(st.booleans()),
        draw(st.sampled_from(LOSS_MODES)),
        draw(st.sampled_from([1, 1, 2, 3, 4])),  # ppo_mini_batch_size
        draw(st.sampled_from([1, 1, 2, 3])),  # rollout.n
        draw(st.sampled_from([None, None, 1, 2, 3])),
        draw(st.booleans()),
        draw(st.sampled_from([None, None, "token", "sequence"])),
    )
    return spec, cfg_key, draw(st.integers(0, 2**31))


def build(spec, *, keep=None):
    """The rows of ``spec`` (fresh each call: Agent Lightning mutates its batch), each tagged with its index."""
    rng = np.random.default_rng(spec["seed"])
    sizes = spec["rows_per_rollout"]
    rollout_of_row = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))  # (rows,)
    n, width = len(rollout_of_row), spec["width"]
    prompt_of_rollout = rng.integers(0, spec["n_prompts"], len(sizes))
    reward_of_rollout = rng.choice([0.0, 1.0, 1.0, 0.5, float(rng.normal())], size=len(sizes))
    lengths = rng.integers(1, width + 1, n)
    if rng.random() < 0.1:
        lengths[rng.integers(0, n)] = 0
    extra = {}
    if spec["marked"] is not None:
        extra["is_drop_mask"] = torch.from_numpy(rng.random(n) < spec["marked"])
    if spec["rollout_log_probs"]:
        extra["rollout_log_probs"] = torch.from_numpy(-rng.random((n, width)) * 0.1).float()
    rows = make_rows(
        lengths=lengths.tolist(),
        width=width,
        rollout_ids=np.array([f"r{r}" for r in rollout_of_row]),
        data_ids=np.array([f"q{prompt_of_rollout[r]}" for r in rollout_of_row]) if spec["data_ids"] else None,
        rewards=reward_of_rollout[rollout_of_row].tolist(),
        score_dtype=spec["score_dtype"],
        extra=extra,
        non_tensor={"row": np.arange(n)},
        mask_dtype=spec.get("mask_dtype", torch.long),
    )
    return rows if keep is None else rows[torch.from_numpy(np.asarray(keep, dtype=np.int64))]


def with_old_log_probs(batch):
    """What the trainer does between steps 2 and 3 (the oracle's stub gives zeros too)."""
    batch.batch["old_log_probs"] = torch.zeros(batch.batch["responses"].shape)
    return batch


def lab_steps_3_to_5(batch, cfg):
    return compute_advantages(with_old_log_probs(batch), cfg)


@ORACLE_SETTINGS
@given(case=train_steps())
def _train_step_cases(case):
    spec, cfg_key, seed = case
    cfg = config(*cfg_key)
    random.seed(seed)
    theirs = agl_train_step(cfg, build(spec))
    rows = build(spec)
    before = snapshot(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyBatchWarning)
        selection, error = outcome(lambda: plan_selection(rows, cfg, seed=seed))
    assert_unchanged(rows, before)  # the pipeline works on a copy: the rows given stay as they were
    if error is not None or theirs.kept is None and theirs.error is not None:  # raised in steps 1-2
        assert theirs.kept is None, "Agent Lightning got past the drops"
        assert_same_error(theirs.error, error)
        PATHS["raised in steps 1-2"] += 1
        return count()
    if theirs.kept is None:  # Agent Lightning skipped the step: nothing was left
        assert theirs.metrics is None and theirs.error is None and len(selection.kept) == 0
        PATHS["skipped"] += 1
        return count()

    # steps 1-2: as many rows kept; the same ones where the draw is forced; the same counters
    survivors = build(spec, keep=np.flatnonzero(selection.fate != "dropped/marked"))
    survivors.non_tensor_batch["uid"] = survivors.non_tensor_batch.get(
        "data_id_list", survivors.non_tensor_batch["row"]
    )
    n_candidates = len(agl().trainer._same_reward_uid_indices(survivors))
    n_to_drop = len(survivors) - len(selection.kept)
    is_forced = n_to_drop in (0, n_candidates, len(survivors))  # nothing, exactly the candidates, everything
    assert len(theirs.kept) == len(selection.kept)
    if is_forced:
        assert selection.batch.non_tensor_batch["row"].tolist() == theirs.kept
        batch = selection.batch
    else:  # steps 3-5 on Agent Lightning's rows (no surplus left in them: agl_lab keeps them all)
        batch, again = select_rows(build(spec, keep=theirs.kept), cfg, seed=seed)
        assert again["training/n_sample_trained"] == len(theirs.kept)
    path = "forced draw: whole pipeline" if is_forced else "random draw: steps 3-5 on Agent Lightning's rows"

    with_old_log_probs(batch)
    given = snapshot(batch)
    ours, error = outcome(lambda: compute_advantages(batch, cfg))
    # steps 3-5 write their results into the batch they get and change none of its fields (a float mask stays a mask)
    written = ("token_level_rewards", "advantages", "returns", "rollout_is_weights")
    assert_unchanged(batch, given, added=written)
    if theirs.error is not None:
        if not spec["data_ids"]:  # texts may name a row's random uid: compare them with the uuids blanked
            theirs.error, error = _blank_uuids(theirs.error), _blank_uuids(error)
        assert_same_error(theirs.error, error)
        PATHS[f"raised in steps 3-5 ({path})"] += 1
        return count()
    assert error is None, error
    batch, adv_metrics = ours
    assert_same_metrics({**selection.metrics, **adv_metrics}, theirs.metrics)
    assert_same_batch(batch, theirs.batch, skip=() if spec["data_ids"] else ("uid",))  # no data ids: random uids
    assert batch.meta_info["temperature"] == theirs.meta["temperature"]
    if is_forced:
        assert batch.meta_info["global_token_num"] == theirs.meta["global_token_num"]
    PATHS[path] += 1
    count()


def _blank_uuids(error):
    if error is None:
        return None
    return type(error)(re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", str(error)))


def test_steps_1_to_5_equal_agent_lightnings_train_step():
    PATHS.clear()
    examples(_train_step_cases, N_EXAMPLES)
    assert PATHS["forced draw: whole pipeline"] > 3 * N_EXAMPLES // 20, PATHS  # 300 of 2,000
    assert PATHS["random draw: steps 3-5 on Agent Lightning's rows"] > 3 * N_EXAMPLES // 20, PATHS
    assert PATHS["skipped"] > 0 and sum(v for k, v in PATHS.items() if k.startswith("raised in steps 3-5")) > 0, PATHS


@st.composite
def groups_with_rewards(draw):
    """uid groups whose rewards are equal, nearly equal (within or past allclose, or below bf16's resolution)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 12))
    uids = rng.integers(0, draw(st.integers(1, 4)), n)
    base = rng.choice([0.0, 1.0, 0.5, -2.0, 100.0], size=uids.max() + 1)[uids]
    nudge = rng.choice([0.0, 0.0, 1e-9, 1e-6, 3e-3, 0.25], size=n) * (rng.random(n) < 0.3)
    dtype = draw(st.sampled_from([torch.bfloat16, torch.float32, torch.float64]))
    rows = make_rows(
        lengths=rng.integers(1, 4, n).tolist(),
        width=3,
        rollout_ids=np.array([f"r{i}" for i in range(n)]),
        data_ids=None,
        rewards=(base + nudge).tolist(),
        score_dtype=dtype,
        non_tensor={"uid": rng.choice(np.array(["a", "b", "c", "d"], dtype=object), 4, replace=False)[uids]},
    )
    return rows


@ORACLE_SETTINGS
@given(rows=groups_with_rewards())
def _same_reward_cases(rows):
    theirs = agl().trainer._same_reward_uid_indices(rows)
    ours = same_reward_rows(rows).tolist()
    assert sorted(theirs) == ours and len(set(theirs)) == len(theirs), (theirs, ours)
    count()


def test_same_reward_candidates_equal_agent_lightnings():
    examples(_same_reward_cases, N_EXAMPLES)


def test_remax_and_missing_scores_raise_agent_lightnings_errors():
    spec = {"seed": 0, "n_prompts": 1, "width": 2, "rows_per_rollout": [1, 2], "score_dtype": torch.bfloat16}
    spec |= {"marked": None, "data_ids": True, "rollout_log_probs": False}
    remax = config("remax", True, "per_rollout_mean", 1, 1, None, True, None)
    theirs = agl_train_step(remax, build(spec)).error
    _, ours = outcome(lambda: select_rows(build(spec), remax))
    assert isinstance(theirs, NotImplementedError)
    assert_same_error(theirs, ours)
    cfg = config("grpo", True, "per_rollout_mean", 1, 1, None, True, None)
    no_scores = build(spec)
    del no_scores.batch["token_level_scores"]
    theirs = agl_train_step(cfg, no_scores).error
    _, ours = outcome(lambda: select_rows(no_scores, cfg))
    assert isinstance(theirs, AssertionError)
    assert_same_error(theirs, ours)


@pytest.mark.parametrize("loss_mode", ["per_rollout_mean", "cispo_per_rollout_mean"])
def test_both_per_rollout_modes_need_rollout_ids_with_the_same_text(loss_mode):
    spec = {"seed": 1, "n_prompts": 1, "width": 2, "rows_per_rollout": [1, 1], "score_dtype": torch.bfloat16}
    spec |= {"marked": None, "data_ids": True, "rollout_log_probs": False}
    cfg = config("grpo", False, loss_mode, 1, 1, None, True, None)

    def rows():
        batch = build(spec)
        del batch.non_tensor_batch["rollout_id_list"]
        return batch

    theirs = agl_train_step(cfg, rows()).error
    _, ours = outcome(lambda: lab_steps_3_to_5(select_rows(rows(), cfg)[0], cfg))
    assert str(theirs) == "per_rollout_mean loss requires rollout_id_list"
    assert_same_error(theirs, ours)


# --- intended differences (docs/differences.md), each shown on both sides -------------------------------------------

SPEC = {"seed": 3, "n_prompts": 2, "width": 3, "rows_per_rollout": [1, 2, 1, 2, 1], "score_dtype": torch.bfloat16}
SPEC |= {"marked": None, "data_ids": True, "rollout_log_probs": False}


def test_difference_the_random_drop_is_seeded():
    # 7 rows, mini-batches of 2 and a cap of 1: 5 rows go; Agent Lightning draws from the global random module
    cfg = config("grpo", True, "per_rollout_mean", 2, 1, 1, True, None)
    kept_by_agl = set()
    for seed in range(12):
        random.seed(seed)
        kept_by_agl.add(tuple(agl_train_step(cfg, build(SPEC)).kept))
    assert len(kept_by_agl) > 1  # it depends on whatever drew from random before
    ours = {tuple(select_rows(build(SPEC), cfg, seed=5)[0].non_tensor_batch["row"]) for _ in range(3)}
    assert len(ours) == 1  # agl_lab's is fixed by its seed (lab.seed in a run)


def test_difference_a_cap_below_one_is_refused():
    cfg = config("grpo", True, "per_rollout_mean", 1, 1, 0, True, None)
    random.seed(0)
    step = agl_train_step(cfg, build(SPEC))
    assert step.metrics is None and step.error is None  # Agent Lightning drops every row and skips, every step
    with pytest.raises(ValueError, match=r"max_ppo_update_times must be null \(no cap\) or a positive integer, got 0"):
        select_rows(build(SPEC), cfg)


def test_difference_an_empty_step_is_a_warning_not_a_print(capsys):
    cfg = config("grpo", True, "per_rollout_mean", 4, 3, None, True, None)  # 12-row mini-batches, 7 rows
    step = agl_train_step(cfg, build(SPEC))
    assert step.metrics is None and step.error is None
    with pytest.warns(EmptyBatchWarning, match="no trainable batch after drop\\+floor"):
        batch, _ = select_rows(build(SPEC), cfg)
    assert len(batch) == 0


def test_difference_the_uid_fallback_is_seeded():
    spec = SPEC | {"data_ids": False}
    cfg = config("grpo", False, "vanilla", 1, 1, None, True, None)
    ours = [select_rows(build(spec), cfg, seed=4)[0].non_tensor_batch["uid"].tolist() for _ in range(2)]
    assert ours[0] == ours[1] and len(set(ours[0])) == 7  # one group per row, the same ids for the same seed
    theirs = [agl_train_step(cfg, build(spec)).batch.non_tensor_batch["uid"].tolist() for _ in range(2)]
    assert theirs[0] != theirs[1]  # uuid4 per row, per call


def test_difference_balance_batch_is_not_modelled():
    # verl's balance_batch reorders rows across data-parallel workers (Agent Lightning's default: true); the lab is one
    # process, so its rows keep their order (the differential tests run Agent Lightning with it off)
    cfg = config("grpo", True, "per_rollout_mean", 1, 1, None, True, None)
    balanced = OmegaConf.merge(cfg, {"trainer": {"balance_batch": True}})
    assert agl_train_step(balanced, build(SPEC)).error is not None  # it needs the actor's worker group
    batch, _ = select_rows(build(SPEC), balanced, seed=0)
    assert batch.non_tensor_batch["row"].tolist() == list(range(7))


def test_difference_rollout_correction_bypass_mode_is_not_modelled():
    # bypass mode: Agent Lightning takes the rollout's log-probs as the old ones (and refuses rows without them);
    # the lab trainer computes old log-probs with its policy, and its rollouts carry none
    cfg = OmegaConf.merge(
        config("grpo", True, "per_rollout_mean", 1, 1, None, True, None),
        {"algorithm": {"rollout_correction": {"bypass_mode": True}}},
    )
    error = agl_train_step(cfg, build(SPEC)).error
    assert str(error) == "bypass_mode requires rollout_log_probs in batch"
    batch, metrics = lab_steps_3_to_5(select_rows(build(SPEC), cfg, seed=0)[0], cfg)
    assert not any(key.startswith("rollout_corr/") for key in metrics)
    # without bypass the correction runs where Agent Lightning runs it (the differential test), but it needs old
    # log-probs: prepare_batch on a dump without them (the weighting analysis) leaves it out
    cfg = config("grpo", True, "per_rollout_mean", 1, 1, None, True, "token")
    rows = build(SPEC | {"rollout_log_probs": True})
    assert not any(key.startswith("rollout_corr/") for key in prepare_batch(rows, cfg, seed=0)[1])
    assert any(key.startswith("rollout_corr/") for key in lab_steps_3_to_5(select_rows(rows, cfg, seed=0)[0], cfg)[1])


def test_difference_rows_without_attention_mask_are_selected():
    # a dumped batch may keep only the response mask; Agent Lightning's step reads attention_mask for a metric
    def rows():
        batch = build(SPEC)
        del batch.batch["attention_mask"]
        return batch

    cfg = config("grpo", True, "per_rollout_mean", 1, 1, None, True, None)
    assert isinstance(agl_train_step(cfg, rows()).error, KeyError)
    batch, _ = select_rows(rows(), cfg, seed=0)
    assert len(batch) == 7 and "global_token_num" not in batch.meta_info
