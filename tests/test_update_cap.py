import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_lab import EmptyBatchWarning, apply_update_cap, drop_marked_rows
from agl_lab.core.update_cap import same_reward_rows
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
            "agentlightning.max_ppo_update_times must be null (no cap)",
        ),
        ({"mini_batch_size": 2, "max_ppo_update_times": 1.5}, "or an integer >= 1, got 1.5"),
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
