import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_lab import EmptyBatchWarning, apply_update_cap, drop_marked_rows
from agl_lab.core.update_cap import partially_dropped, same_reward_rows
from conftest import make_rows, plans


def tagged(plan):
    """Rows with their original index in non_tensor_batch['row'], so drops can be traced."""
    rows = make_rows(plan)
    rows.non_tensor_batch["row"] = np.arange(len(rows))
    rows.non_tensor_batch["uid"] = rows.non_tensor_batch["data_id_list"]
    return rows


# q0: three rollouts all rewarded 1 (one reward throughout: no GRPO signal) -> rows 0, 1, 2, 3
# q1: rewards 1 and 0 (signal) -> rows 4, 5, 6
PLAN = [
    ("q0", "a", 1.0, [1, 1]),
    ("q0", "b", 1.0, [1]),
    ("q0", "c", 1.0, [1]),
    ("q1", "d", 1.0, [1, 1]),
    ("q1", "e", 0.0, [2]),
]


def test_alignment_drops_the_remainder_from_same_reward_groups_first():
    batch, metrics = apply_update_cap(tagged(PLAN), mini_batch_size=3, seed=0)
    # 7 rows, mini-batches of 3 -> keep 6, drop 1, and it comes from q0 (rows 0-3)
    assert metrics == {
        "training/n_sample_dropped/same_reward": 1,
        "training/n_sample_dropped/random": 0,
        "training/n_sample_trained": 6,
    }
    kept = batch.non_tensor_batch["row"].tolist()
    assert kept == sorted(kept)  # original order kept
    assert {4, 5, 6} <= set(kept)


def test_cap_drops_all_same_reward_rows_then_random_ones():
    batch, metrics = apply_update_cap(tagged(PLAN), mini_batch_size=1, max_ppo_update_times=2, seed=0)
    # keep min(7, 1 × 2) = 2 -> drop 5: the 4 rows of q0, then 1 of q1 at random
    assert metrics["training/n_sample_dropped/same_reward"] == 4
    assert metrics["training/n_sample_dropped/random"] == 1
    assert len(batch) == 2 and set(batch.non_tensor_batch["row"]) < {4, 5, 6}


def test_same_reward_rows_counts_single_row_groups():
    # A group with one row has one reward throughout, exactly as Agent Lightning's allclose test sees it.
    rows = tagged([("q0", "a", 1.0, [1]), ("q1", "b", 0.0, [1]), ("q1", "c", 1.0, [1])])
    assert same_reward_rows(rows).tolist() == [0]


def test_without_group_ids_every_drop_is_random():
    rows = tagged(PLAN)
    del rows.non_tensor_batch["uid"], rows.non_tensor_batch["data_id_list"]
    _, metrics = apply_update_cap(rows, mini_batch_size=2, seed=0)
    assert metrics["training/n_sample_dropped/random"] == 1 and metrics["training/n_sample_dropped/same_reward"] == 0


def test_data_id_list_groups_rows_when_uid_is_missing():
    rows = tagged(PLAN)
    del rows.non_tensor_batch["uid"]
    assert same_reward_rows(rows).tolist() == [0, 1, 2, 3]


def test_seed_makes_the_choice_reproducible():
    plan = [(f"q{i}", f"r{i}", 1.0, [1]) for i in range(40)]
    kept = lambda seed: apply_update_cap(tagged(plan), mini_batch_size=7, seed=seed)[0].non_tensor_batch["row"].tolist()  # noqa: E731
    assert kept(3) == kept(3)
    assert len({tuple(kept(s)) for s in range(6)}) > 1


def test_nothing_left_returns_empty_batch_with_a_warning():
    with pytest.warns(
        EmptyBatchWarning, match=re.escape("no trainable batch after drop+floor (7 rows < one mini-batch")
    ):
        batch, metrics = apply_update_cap(tagged(PLAN), mini_batch_size=8, seed=0)
    assert len(batch) == 0 and metrics["training/n_sample_trained"] == 0
    assert metrics["training/n_sample_dropped/same_reward"] + metrics["training/n_sample_dropped/random"] == 7


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"mini_batch_size": 0}, "mini_batch_size must be a positive number of rows (ppo_mini_batch_size × rollout.n)"),
        ({"mini_batch_size": 2.5}, "mini_batch_size must be a positive number of rows"),
        (
            {"mini_batch_size": 2, "max_ppo_update_times": 0},
            "agentlightning.max_ppo_update_times must be null (no cap) or a positive integer, got 0: a cap below 1",
        ),
        ({"mini_batch_size": 2, "max_ppo_update_times": 1.5}, "or a positive integer, got 1.5"),
    ],
)
def test_bad_sizes(kwargs, text):
    with pytest.raises(ValueError, match=re.escape(text)):
        apply_update_cap(tagged(PLAN), **kwargs)


def test_nan_scores_are_refused_by_name():
    rows = tagged(PLAN)
    rows.batch["token_level_scores"][2, 0] = float("nan")
    with pytest.raises(ValueError, match=re.escape("batch['token_level_scores'] has NaN or inf values in rows [2]")):
        apply_update_cap(rows, mini_batch_size=3)


def test_marked_rows_are_removed_and_counted():
    rows = tagged(PLAN)
    rows.batch["is_drop_mask"] = torch.tensor([False, True, False, False, True, False, False])
    batch, metrics = drop_marked_rows(rows)
    assert metrics == {"training/n_sample_collected": 7, "training/n_sample_dropped/marked": 2}
    assert batch.non_tensor_batch["row"].tolist() == [0, 2, 3, 5, 6]
    rows.batch["is_drop_mask"] = torch.zeros(7, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=re.escape("batch['is_drop_mask'] must have shape (7,)")):
        drop_marked_rows(rows)


@settings(max_examples=300, deadline=None)
@given(
    plan=plans(max_prompts=5, max_rollouts=4, max_rows=3),
    mini_batch_size=st.integers(1, 8),
    cap=st.one_of(st.none(), st.integers(1, 4)),
    seed=st.integers(0, 2**16),
)
def test_drop_properties(plan, mini_batch_size, cap, seed):
    rows = tagged(plan)
    n = len(rows)
    same = set(same_reward_rows(rows).tolist())
    expect = (
        pytest.warns(EmptyBatchWarning)
        if n < mini_batch_size
        else warnings.catch_warnings(action="error", category=EmptyBatchWarning)
    )
    with expect:
        batch, metrics = apply_update_cap(rows, mini_batch_size=mini_batch_size, max_ppo_update_times=cap, seed=seed)
    kept = batch.non_tensor_batch["row"].tolist()
    dropped = sorted(set(range(n)) - set(kept))
    n_same, n_random = metrics["training/n_sample_dropped/same_reward"], metrics["training/n_sample_dropped/random"]
    assert len(kept) == len(set(kept)) == metrics["training/n_sample_trained"]  # nothing duplicated
    assert len(kept) + n_same + n_random == n  # kept + dropped = collected
    assert len(dropped) == n_same + n_random  # nothing lost
    assert len(kept) % mini_batch_size == 0
    assert cap is None or len(kept) <= cap * mini_batch_size
    assert len(kept) == min(n // mini_batch_size * mini_batch_size, n if cap is None else cap * mini_batch_size)
    if n_random:  # a row with signal is dropped only once every same-reward row is gone
        assert same <= set(dropped)
    else:
        assert set(dropped) <= same
    assert n_same == len(set(dropped) & same)


# --- lab.cap_drop_unit=rollout: whole rollouts only (lab-only) ------------------------------------------------------


def test_rollout_unit_drops_same_reward_rollouts_first_whatever_their_size():
    # q0: rollout a, 3 rows, alone in its group (one reward: no GRPO signal); q1: b (1 row, reward 1) and c (1 row,
    # reward 0) carry the signal. 5 rows, mini-batches of 4: Agent Lightning keeps 4, dropping 1 row of a. Whole
    # rollouts: a goes first (same-reward), all 3 rows; b and c are trained, in one short mini-batch of 2.
    plan = [("q0", "a", 1.0, [1, 1, 1]), ("q1", "b", 1.0, [1]), ("q1", "c", 0.0, [2])]
    for seed in range(5):
        batch, metrics = apply_update_cap(tagged(plan), mini_batch_size=4, seed=seed, drop_unit="rollout")
        assert batch.non_tensor_batch["row"].tolist() == [3, 4]
        assert metrics == {
            "training/n_sample_dropped/same_reward": 3,
            "training/n_sample_dropped/random": 0,
            "training/n_sample_trained": 2,
        }


def test_rollout_unit_trains_a_step_agent_lightning_trains():
    # three rollouts of 3 rows, mini-batches of 4: Agent Lightning trains 8 rows; whole rollouts cannot make 8, so one
    # rollout goes (the surplus is 1 row) and 6 rows are trained in two updates (4 + 2), never a skipped step
    plan = [("q0", "a", 1.0, [1, 1, 1]), ("q0", "b", 0.0, [1, 1, 1]), ("q0", "c", 0.5, [1, 1, 1])]
    with warnings.catch_warnings(action="error"):
        batch, metrics = apply_update_cap(tagged(plan), mini_batch_size=4, seed=0, drop_unit="rollout")
    assert metrics["training/n_sample_trained"] == 6 and metrics["training/n_sample_dropped/random"] == 3
    assert partially_dropped(tagged(plan), batch) == {"lab/partially_dropped_rollouts": 0}


def test_rollout_unit_trains_part_of_a_rollout_larger_than_the_step_rather_than_nothing():
    # one rollout of 5 rows, mini-batches of 2, cap 1: Agent Lightning trains 2 rows of it; the walk would drop it
    # whole and leave nothing, so 2 of its rows are trained, with a warning that says so
    plan = [("q0", "a", 1.0, [1, 1, 1, 1, 1])]
    text = "rollout 'a' has 5 rows, more than the 2 this step may train; 2 of its rows are trained"
    with pytest.warns(UserWarning, match=re.escape(text)):
        batch, metrics = apply_update_cap(
            tagged(plan), mini_batch_size=2, max_ppo_update_times=1, seed=0, drop_unit="rollout"
        )
    assert metrics["training/n_sample_trained"] == 2 and metrics["training/n_sample_dropped/same_reward"] == 3
    assert partially_dropped(tagged(plan), batch) == {"lab/partially_dropped_rollouts": 1}


@settings(max_examples=200, deadline=None)
@given(
    plan=plans(max_prompts=4, max_rollouts=4, max_rows=4),
    mini_batch_size=st.integers(1, 6),
    more=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_whether_a_rollout_is_dropped_does_not_depend_on_its_own_row_count(plan, mini_batch_size, more, seed):
    # the same batch but the first rollout `more` mini-batches of rows longer: the surplus (rows beyond whole
    # mini-batches) is the same, and the same seed walks the rollouts in the same order, so whether the first rollout
    # is dropped (in whole or in part) cannot change with its size; the old rule dropped short rollouts far more often
    grown = plan[0][3] + [plan[0][3][0]] * (more * mini_batch_size)
    touched = []
    for rows in (tagged(plan), tagged([(*plan[0][:3], grown), *plan[1:]])):
        n_first = int((rows.non_tensor_batch["rollout_id_list"] == plan[0][1]).sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch, _ = apply_update_cap(rows, mini_batch_size=mini_batch_size, seed=seed, drop_unit="rollout")
        kept = batch.non_tensor_batch["rollout_id_list"].tolist()
        touched.append(kept.count(plan[0][1]) < n_first)
    assert touched[0] == touched[1]


@settings(max_examples=200, deadline=None)
@given(
    plan=plans(max_prompts=5, max_rollouts=4, max_rows=3),
    mini_batch_size=st.integers(1, 8),
    cap=st.one_of(st.none(), st.integers(1, 4)),
    seed=st.integers(0, 2**16),
)
def test_rollout_unit_properties(plan, mini_batch_size, cap, seed):
    rows = tagged(plan)
    n = len(rows)
    n_agl = min(n // mini_batch_size * mini_batch_size, n if cap is None else cap * mini_batch_size)  # AGL's rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch, metrics = apply_update_cap(
            rows, mini_batch_size=mini_batch_size, max_ppo_update_times=cap, seed=seed, drop_unit="rollout"
        )
    kept = batch.non_tensor_batch["row"].tolist()
    ids = rows.non_tensor_batch["rollout_id_list"]
    sizes = {r: int((ids == r).sum()) for r in set(ids)}
    assert len(kept) <= n_agl  # never more rows, nor more PPO updates, than Agent Lightning
    assert (len(kept) > 0) == (n_agl > 0)  # never a step skipped that Agent Lightning trains
    assert len(kept) > n_agl - max(sizes.values())  # the walk stops at the first rollout that covers the surplus
    n_same, n_random = metrics["training/n_sample_dropped/same_reward"], metrics["training/n_sample_dropped/random"]
    assert len(kept) + n_same + n_random == n
    part = partially_dropped(rows, batch)["lab/partially_dropped_rollouts"]
    assert part == 0 or (part == 1 and len(kept) == n_agl and max(sizes.values()) > n_agl)  # only to avoid a skip
    same = set(same_reward_rows(rows).tolist())
    assert n_same == len(same - set(kept))  # same-reward rows dropped are counted as such, the others as random
    if n_random:  # Agent Lightning's order: a rollout with signal goes only once every same-reward one is gone
        assert same <= set(range(n)) - set(kept)


def test_partially_dropped_counts_rollouts_trained_in_part():
    rows = tagged(PLAN)
    kept = rows[torch.tensor([1, 2, 3, 4, 5])]  # a loses row 0, e loses its only row (whole), d is whole
    assert partially_dropped(rows, kept) == {"lab/partially_dropped_rollouts": 1}
    del rows.non_tensor_batch["rollout_id_list"]
    assert partially_dropped(rows, kept) == {}
