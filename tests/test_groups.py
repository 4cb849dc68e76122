"""Grouping rows by rollout or uid: ids of any sequence type, dict-key semantics, one-value-per-group tests."""

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_lab.core.groups import as_ids, group_key, group_rows, non_tensor_ids, uniform_groups
from conftest import make_rows


def test_group_rows_orders_groups_by_first_appearance_like_a_dict():
    ids = np.array(["b", "a", "b", "c", "a", 1, 1.0], dtype=object)
    groups = group_rows(ids, field="rollout_id_list")
    expected = {}
    for i, x in enumerate(ids):
        expected.setdefault(x, []).append(i)
    assert groups.ids.tolist() == list(expected)  # 1 and 1.0 are one key, as in a dict
    assert groups.first_rows.tolist() == [v[0] for v in expected.values()]
    assert groups.sizes.tolist() == [len(v) for v in expected.values()]
    assert groups.codes.tolist() == [0, 1, 0, 2, 1, 3, 3]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-3, 40), st.sampled_from(["p0/r0", "p0/r1", "p1/r0", ""])), max_size=60))
def test_group_rows_first_rows_are_where_each_id_first_occurs(values):
    ids = np.empty(len(values), dtype=object)
    ids[:] = values
    groups = group_rows(ids, field="rollout_id_list")
    first: dict = {}
    for i, x in enumerate(values):
        first.setdefault(x, i)
    assert groups.first_rows.dtype == np.int64
    assert groups.first_rows.tolist() == list(first.values())
    assert groups.first_rows.tolist() == np.unique(groups.codes, return_index=True)[1].tolist()
    assert groups.ids.tolist() == list(first)


def test_group_rows_refuses_missing_and_unhashable_ids():
    with pytest.raises(ValueError, match=r"rollout_id_list has missing values \(None/NaN\) at rows \[1\]"):
        group_rows(np.array(["a", None], dtype=object), field="rollout_id_list")
    ragged = np.empty(2, dtype=object)
    ragged[:] = [["a"], ["b", "c"]]
    with pytest.raises(ValueError, match="rollout_id_list must hold hashable ids"):
        group_rows(ragged, field="rollout_id_list")


@pytest.mark.parametrize("kind", [list, tuple, np.array, pd.Series])
def test_group_rows_takes_ids_of_any_sequence_type(kind):
    # Agent Lightning's own unit tests pass rollout ids as a Python list
    groups = group_rows(kind(["A", "A", "B"]), field="rollout_id_list")
    assert groups.codes.tolist() == [0, 0, 1]
    assert groups.ids.tolist() == ["A", "B"]


def test_tuple_ids_stay_one_id_each():
    ids = as_ids([("p", 0), ("p", 1), ("p", 0)], field="rollout_id_list")
    assert ids.shape == (3,) and ids[0] == ("p", 0)
    assert group_rows(ids, field="rollout_id_list").codes.tolist() == [0, 1, 0]


def test_as_ids_refuses_scalars_and_2d_arrays():
    with pytest.raises(ValueError, match="one hashable id per row"):
        as_ids("abc", field="rollout_id_list")
    with pytest.raises(ValueError, match=r"of shape \(2, 2\)"):
        as_ids(np.zeros((2, 2)), field="rollout_id_list")


def test_uniform_groups_compares_each_row_with_its_groups_first_row():
    groups = group_rows(np.array(["a", "b", "a", "b", "c"], dtype=object), field="uid")
    # a: 1, 1 (uniform) · b: 0, 1 (not) · c: one row (uniform)
    values = torch.tensor([1.0, 0.0, 1.0, 1.0, 5.0])
    assert uniform_groups(groups, values).tolist() == [True, False, True]
    # isclose, not exact: a float32 rounding difference is still one reward; NaN never is
    values = torch.tensor([1.0, 0.0, 1.0 + 1e-7, 0.0, float("nan")])
    assert uniform_groups(groups, values).tolist() == [True, True, False]


def test_group_key_prefers_uid_over_data_id_list():
    rows = make_rows([("q", "A", 1.0, [1])])
    assert group_key(rows) == "data_id_list"
    rows.non_tensor_batch["uid"] = np.array(["u"], dtype=object)
    assert group_key(rows) == "uid"
    del rows.non_tensor_batch["uid"], rows.non_tensor_batch["data_id_list"]
    assert group_key(rows) is None


def test_non_tensor_ids_names_a_missing_field_or_raises_the_given_text():
    rows = make_rows([("q", "A", 1.0, [1])])
    with pytest.raises(ValueError, match=r"batch lacks non_tensor_batch\['uid'\]"):
        non_tensor_ids(rows, "uid")
    with pytest.raises(RuntimeError, match="^custom text$"):
        non_tensor_ids(rows, "uid", error="custom text")
