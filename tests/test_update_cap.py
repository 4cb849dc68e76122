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


# --- lab.cap_drop_unit=rollout: whole rollouts only (lab-only) ------------------------------------------------------


def test_rollout_unit_drops_whole_rollouts_same_reward_groups_first():
    # 7 rows, mini-batches of 3: keep 6, drop 1 row. q0's single-row rollouts b and c (rows 2, 3) are same-reward
    # and fit; a (rows 0, 1) is same-reward too but needs 2 drops. The row unit might take row 0 or 1 of a.
    batch, metrics = apply_update_cap(tagged(PLAN), mini_batch_size=3, seed=0, drop_unit="rollout")
    kept = batch.non_tensor_batch["row"].tolist()
    assert len(kept) == 6 and set(range(7)) - set(kept) <= {2, 3}
    assert metrics["training/n_sample_dropped/same_reward"] == 1 and metrics["training/n_sample_dropped/random"] == 0


def test_rollout_unit_keeps_one_mini_batch_fewer_when_no_rollout_fits():
    # one rollout of 4 rows and one of 3 (7 rows), mini-batches of 3: no whole rollout is 1 row, so one mini-batch
    # fewer: 3 kept, i.e. the 4-row rollout dropped, whichever of the two the seeded order puts first
    plan = [("q0", "a", 1.0, [1, 1, 1, 1]), ("q1", "b", 0.0, [1, 1, 1])]
    batch, metrics = apply_update_cap(tagged(plan), mini_batch_size=3, seed=0, drop_unit="rollout")
    assert batch.non_tensor_batch["row"].tolist() == [4, 5, 6]  # all of b; a (same-reward q0) dropped whole
    assert metrics == {
        "training/n_sample_dropped/same_reward": 4,
        "training/n_sample_dropped/random": 0,
        "training/n_sample_trained": 3,
    }


def test_rollout_unit_is_seeded_and_bad_units_or_missing_ids_are_named():
    rows = tagged(PLAN)
    first = apply_update_cap(rows, mini_batch_size=2, max_ppo_update_times=1, seed=5, drop_unit="rollout")[0]
    again = apply_update_cap(rows, mini_batch_size=2, max_ppo_update_times=1, seed=5, drop_unit="rollout")[0]
    assert first.non_tensor_batch["row"].tolist() == again.non_tensor_batch["row"].tolist()
    with pytest.raises(ValueError, match=r"lab.cap_drop_unit must be one of \['row', 'rollout'\], got 'token'"):
        apply_update_cap(rows, mini_batch_size=2, drop_unit="token")
    del rows.non_tensor_batch["rollout_id_list"]
    with pytest.raises(ValueError, match=r"lab.cap_drop_unit=rollout needs non_tensor_batch\['rollout_id_list'\]"):
        apply_update_cap(rows, mini_batch_size=2, drop_unit="rollout")


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyBatchWarning)
        batch, metrics = apply_update_cap(
            rows, mini_batch_size=mini_batch_size, max_ppo_update_times=cap, seed=seed, drop_unit="rollout"
        )
    kept = batch.non_tensor_batch["row"].tolist()
    assert len(kept) % mini_batch_size == 0 and (cap is None or len(kept) <= cap * mini_batch_size)
    assert len(kept) <= n // mini_batch_size * mini_batch_size
    n_same, n_random = metrics["training/n_sample_dropped/same_reward"], metrics["training/n_sample_dropped/random"]
    assert len(kept) + n_same + n_random == n
    assert partially_dropped(rows, batch) == {"lab/partially_dropped_rollouts": 0}  # never a part of a rollout
    ids = rows.non_tensor_batch["rollout_id_list"]
    whole = {r for r in set(ids) if all(i in kept for i in np.flatnonzero(ids == r))}
    assert set(batch.non_tensor_batch["rollout_id_list"]) == whole
    same = set(same_reward_rows(rows).tolist())
    assert n_same == len(same - set(kept))  # same-reward rows dropped are counted as such, the others as random
    # alignment alone (no cap) drops fewer than a mini-batch of rows: with that many single-row rollouts whole ones
    # always add up to it, so as many rows are kept as with the row unit
    if cap is None and (np.bincount(np.unique(ids, return_inverse=True)[1]) == 1).sum() >= mini_batch_size:
        assert len(kept) == n // mini_batch_size * mini_batch_size


def test_partially_dropped_counts_rollouts_trained_in_part():
    rows = tagged(PLAN)
    kept = rows[torch.tensor([1, 2, 3, 4, 5])]  # a loses row 0, e loses its only row (whole), d is whole
    assert partially_dropped(rows, kept) == {"lab/partially_dropped_rollouts": 1}
    del rows.non_tensor_batch["rollout_id_list"]
    assert partially_dropped(rows, kept) == {}
