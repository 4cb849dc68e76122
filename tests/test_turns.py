"""Turns inside rows, by hand: runs of trainable tokens, each turn's reward, the last turn's, broadcasting back."""

import pytest
import torch

from agl_lab.core.turns import broadcast_turns, last_turn_values, turn_ids, turn_values

# row 0: two turns [1 1] [1] with an observation between and a pad after; row 1: a leading untrainable token, one
# turn; row 2: nothing trainable. Masks of every dtype a batch may hold.
MASK = [[1, 1, 0, 1, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
REWARDS = [[0.0, -0.25, 0.0, 0.5, 0.25], [0.125, 0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 3.0]]


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float32, torch.bfloat16])
def test_turns_are_runs_of_trainable_tokens(dtype):
    mask = torch.tensor(MASK).to(dtype)
    ids, counts = turn_ids(mask)
    assert ids.tolist() == [[0, 0, 0, 1, 1], [-1, 0, 0, 0, 0], [-1, -1, -1, -1, -1]]
    assert counts.tolist() == [2, 1, 0]
    per_turn, counts = turn_values(torch.tensor(REWARDS), mask)
    # row 0: turn 0 = 0 - 0.25 + 0 (its observation); turn 1 = 0.5 + 0.25 (the token after it, a reward truncation put
    # there); row 1: the leading token's 0.125 counts for the first turn: 0.125 + 1; row 2: no turn, nothing
    assert per_turn.tolist() == [[-0.25, 0.75], [1.125, 0.0], [0.0, 0.0]]
    assert last_turn_values(torch.tensor(REWARDS), mask).tolist() == [0.75, 1.125, 0.0]
    back = broadcast_turns(torch.tensor([[1.0, 2.0], [3.0, 0.0], [5.0, 6.0]]), mask, dtype=torch.float32)
    assert back.tolist() == [[1, 1, 0, 2, 0], [0, 3, 3, 3, 0], [0, 0, 0, 0, 0]]
    assert torch.equal(mask, torch.tensor(MASK).to(dtype))  # read, never written


def test_shapes_must_agree():
    with pytest.raises(ValueError, match=r"values have shape \(3, 4\) but response_mask has \(3, 5\)"):
        turn_values(torch.zeros(3, 4), torch.tensor(MASK))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_last_turn_values_equal_turn_values_last_turn_bit_for_bit(dtype):
    # last_turn_values skips turn_values' (rows, K) scatter; the result must be the same float64 bits: sparse values
    # over 20 binary orders of magnitude (sums that round), NaN, -0.0, rows without a trainable token, width 0
    generator = torch.Generator().manual_seed(0)
    for case in range(400):
        rows, width = (
            int(torch.randint(1, 6, (1,), generator=generator)),
            int(torch.randint(0, 9, (1,), generator=generator)),
        )
        mask = torch.rand(rows, width, generator=generator) < 0.5
        sparse = torch.rand(rows, width, generator=generator) < 0.4
        values = (torch.randn(rows, width, generator=generator) * 2.0 ** torch.randint(-10, 10, (rows, width))).to(
            dtype
        )
        values = values * sparse
        if values.numel() and case % 7 == 0:
            values.view(-1)[case % values.numel()] = [float("nan"), -0.0][case % 2]
        for mask_dtype in (torch.bool, torch.long, torch.float32, torch.bfloat16):
            per_turn, counts = turn_values(values, mask.to(mask_dtype))
            expected = per_turn.gather(1, (counts - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1) * (counts > 0)
            got = last_turn_values(values, mask.to(mask_dtype))
            assert got.dtype == expected.dtype == torch.float64 and got.shape == expected.shape
            assert torch.equal(got.isnan(), expected.isnan()), (values, mask)
            finite = ~got.isnan()
            assert torch.equal(got[finite], expected[finite]), (values, mask)
            assert torch.equal(got[finite].signbit(), expected[finite].signbit()), (values, mask)
