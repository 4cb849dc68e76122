""":func:`agl_lab.files.run_rows.tidy`, which every reader builds its step's table with: each row's place in its
trajectory, counted with numpy, against a plain loop over the rows; scalars broadcast to every row."""

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from agl_lab.files.run_rows import RUN_COLUMNS, tidy

# ids as sources write them: strings, integers, 1.0 beside 1 (one id, as a dict keys it), and None (no trajectory)
IDS = st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "p3/r1"]), st.integers(0, 3), st.just(1.0)), max_size=40)


def places(ids):
    """Each row's place among the earlier rows of its trajectory, as a loop over the rows counts it (None: no id)."""
    seen, out = {}, []
    for value in ids:
        out.append(None if value is None else seen.get(value, 0))
        if value is not None:
            seen[value] = seen.get(value, 0) + 1
    return out


@settings(max_examples=300, deadline=None)
@given(IDS)
def test_each_rows_place_in_its_trajectory_is_what_a_loop_over_the_rows_counts(ids):
    n = len(ids)
    table = tidy(step=4, group=None, trajectory=ids, response_tokens=np.ones(n), reward=np.zeros(n),
                 advantage=np.zeros(n), kept=True)  # fmt: skip
    assert [None if pd.isna(v) else int(v) for v in table["row"]] == places(ids)
    assert list(table.columns) == RUN_COLUMNS and str(table["row"].dtype) == "Int64"


def test_scalars_broadcast_and_arrays_keep_their_missing_values():
    table = tidy(step=7, group=["g"] * 3, trajectory=["t", "t", "u"], response_tokens=1.0, reward=[0.0, 1.0, 1.0],
                 advantage=np.nan, kept=True)  # fmt: skip
    assert table["step"].tolist() == [7, 7, 7] and table["kept"].tolist() == [True] * 3
    assert table["row"].tolist() == [0, 1, 0] and table["advantage"].isna().all()
    table = tidy(step=[3, None, 3.0], group=None, trajectory=None, response_tokens=[1, 2, 3], reward=[0, 1, 1],
                 advantage=[0, 0, 0], kept=[True, None, False])  # fmt: skip
    assert table["step"].tolist() == [3, pd.NA, 3] and table["kept"].tolist() == [True, pd.NA, False]
    assert table["row"].isna().all() and table["group"].isna().all()
    assert [str(table[c].dtype) for c in ("step", "row", "kept")] == ["Int64", "Int64", "boolean"]
