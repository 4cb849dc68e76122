import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl import DataProto

from agl_lab.core.groups import group_rows
from agl_lab.core.row_sums import row_blocks, trainable_tokens
from agl_lab.core.rows import build_rows, require_fields, rows_frame, take_rows
from agl_lab.lab.examples import example_rows
from conftest import make_rows


def test_build_rows_layout_left_pads_prompts_right_pads_responses():
    rows = build_rows(
        prompts=[[11, 12, 13], [21]],
        responses=[[31], [41, 42, 43]],
        rewards=[1.0, 0.5],
        rollout_ids=["a", "b"],
        data_ids=["q", "q"],
        response_masks=[[1], [1, 0, 1]],
        pad_token_id=0,
    )
    b = rows.batch
    # prompts are left-padded to width 3, responses right-padded to width 3
    assert b["prompts"].tolist() == [[11, 12, 13], [0, 0, 21]]
    assert b["responses"].tolist() == [[31, 0, 0], [41, 42, 43]]
    assert b["input_ids"].tolist() == [[11, 12, 13, 31, 0, 0], [0, 0, 21, 41, 42, 43]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    # position ids count attended tokens from 0, pads before the first one stay 0
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 3, 3], [0, 0, 0, 1, 2, 3]]
    assert b["response_mask"].tolist() == [[1, 0, 0], [1, 0, 1]]
    # the reward sits on the last response token (row 0: index 0; row 1: index 2)
    assert b["token_level_scores"].tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.5]]
    assert b["is_drop_mask"].tolist() == [False, False]
    assert rows.non_tensor_batch["rollout_id_list"].tolist() == ["a", "b"]
    assert rows.non_tensor_batch["data_id_list"].tolist() == ["q", "q"]


def test_build_rows_fixed_widths_and_log_probs():
    rows = build_rows(
        prompts=[[1]],
        responses=[[2, 3]],
        rewards=[1.0],
        rollout_ids=[0],
        data_ids=[0],
        rollout_log_probs=[[-0.5, -0.25]],
        prompt_width=2,
        response_width=4,
    )
    assert rows.batch["input_ids"].shape == (1, 6)
    assert rows.batch["rollout_log_probs"].tolist() == [[-0.5, -0.25, 0.0, 0.0]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"responses": [[]]}, "responses are empty in rows [0]"),
        ({"rewards": [1.0, 2.0]}, "rewards has 2 entries but prompts has 1"),
        ({"response_width": 1}, "response_width=1 is shorter than the longest row (2 tokens)"),
        ({"response_masks": [[1]]}, "response_masks rows [0] differ in length"),
    ],
)
def test_build_rows_refuses_bad_input(kwargs, message):
    args = dict(prompts=[[1]], responses=[[2, 3]], rewards=[1.0], rollout_ids=["a"], data_ids=["q"])
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        build_rows(**args)


def test_example_rows_have_rollouts_of_one_to_three_rows():
    rows = example_rows()
    sizes = group_rows(rows.non_tensor_batch["rollout_id_list"], field="r").sizes
    assert sorted(set(sizes.tolist())) == [1, 2, 3]
    assert set(rows.non_tensor_batch["data_id_list"]) == {"q0", "q1"}


def test_rows_frame_reports_rollout_sizes_and_masses():
    rows = make_rows([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3])])
    rows.batch["advantages"] = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    frame = rows_frame(rows)
    assert frame["rows_in_rollout"].tolist() == [2, 2, 1]
    assert frame["trainable_tokens"].tolist() == [2, 1, 3]
    assert frame["reward"].tolist() == [1.0, 1.0, 0.0]
    # row masses: 0.5+0.5, 0.5, -3; rollout A adds its two rows: 1.5
    assert frame["advantage_mass"].tolist() == [1.0, 0.5, -3.0]
    assert frame["rollout_mass"].tolist() == [1.5, 1.5, -3.0]
    assert frame["turn"].tolist() == [0, 1, 0]


def test_require_fields_lists_every_missing_field_and_the_alternatives():
    rows = example_rows()
    require_fields(rows, ["rollout_id_list", ("response_mask", "responses+attention_mask")], purpose="x")
    rows.batch.pop("response_mask")
    require_fields(rows, [("response_mask", "responses+attention_mask")], purpose="x")  # derivable
    rows.batch.pop("attention_mask")
    with pytest.raises(ValueError) as error:
        require_fields(rows, ["rollout_id_list", ("response_mask", "responses+attention_mask"), "uid"], purpose="Z")
    message = str(error.value)
    assert message.startswith("Z needs fields this batch lacks: response_mask (")
    assert "or responses+attention_mask (" in message and "; uid." in message
    assert "rollout_id_list" not in message.split("The batch has")[0]


@pytest.mark.parametrize("threads", [1, 2])
def test_trainable_tokens_by_blocks_equal_one_float64_sum_bit_for_bit(threads):
    # Float masks are counted in float64 block by block (row_blocks); non-0/1 values over wide exponents make sums
    # that round, so any change of order would show. Widths from 1 to past torch's 32,768-element grain.
    generator = torch.Generator().manual_seed(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows, width in [(1, 7), (2, 40_000), (3, 5), (2_051, 512), (41, 33_000), (5_000, 3)]:
            mask = torch.rand(rows, width, generator=generator) * 2.0 ** torch.randint(-20, 20, (rows, width))
            blocks = row_blocks(mask)
            assert [i for b in blocks for i in range(b.start, b.stop)] == list(range(rows))
            assert all(b.stop - b.start >= 2 for b in blocks) or rows == 1
            for dtype in (torch.float32, torch.bfloat16):
                assert torch.equal(trainable_tokens(mask.to(dtype)), mask.to(dtype).double().sum(dim=-1))
            assert torch.equal(trainable_tokens(mask > 0.5), (mask > 0.5).double().sum(dim=-1))
    finally:
        torch.set_num_threads(before)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 30),
    picks=st.lists(st.integers(0, 10**6), max_size=40),
    mask_dtype=st.sampled_from([torch.bool, torch.float32, torch.int64]),
    only=st.sampled_from([None, ("response_mask",), ("token_level_scores", "response_mask")]),
)
def test_take_rows_gives_what_verls_indexing_gives(n, picks, mask_dtype, only):
    # any order, repeats and no rows at all; every dtype a real step holds (bf16 scores, bool/float/int masks)
    generator = torch.Generator().manual_seed(n)
    tensors = {
        "input_ids": torch.randint(0, 50, (n, 7), generator=generator),
        "response_mask": (torch.rand(n, 4, generator=generator) > 0.5).to(mask_dtype),
        "token_level_scores": torch.randn(n, 4, generator=generator).to(torch.bfloat16),
        "is_drop_mask": torch.rand(n, generator=generator) > 0.9,
    }
    non_tensors = {"rollout_id_list": np.array([f"r{i // 3}" for i in range(n)], dtype=object),
                   "step": np.arange(n)}  # fmt: skip
    rows = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"temperature": 1.0})
    index = np.array([p % n for p in picks], dtype=np.int64)
    taken = take_rows(rows, index, keys=only)
    expected = rows[torch.from_numpy(index)]
    assert len(taken) == len(index) and taken.meta_info is rows.meta_info
    assert sorted(taken.batch.keys()) == sorted(only or tensors)
    for key in taken.batch.keys():
        assert taken.batch[key].dtype == expected.batch[key].dtype
        assert torch.equal(taken.batch[key], expected.batch[key]), key
    for key, values in expected.non_tensor_batch.items():
        assert taken.non_tensor_batch[key].tolist() == values.tolist()
    listed = DataProto(batch=rows.batch)
    listed.non_tensor_batch["rollout_id_list"] = list(non_tensors["rollout_id_list"])  # set after the DataProto's check
    assert take_rows(listed, index).non_tensor_batch["rollout_id_list"].tolist() == [f"r{i // 3}" for i in index]
