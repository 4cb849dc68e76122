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


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32, torch.bfloat16])
def test_last_turn_values_at_a_steps_size_equal_turn_values_bit_for_bit(mask_dtype):
    # a step's size, as trace aggregation writes trajectory rows: 2,000 rows of width 1,024, 1-12 turns each (a run of
    # assistant tokens, then observation tokens), per-turn rewards in bf16 on each turn's last token plus stray
    # rewards anywhere; last_turn_values works on the whole (rows, R) at once, with no size-dependent path to miss
    generator = torch.Generator().manual_seed(1)
    rows, width = 2000, 1024
    turns = torch.randint(1, 13, (rows,), generator=generator)  # (rows,)
    mask = torch.zeros(rows, width, dtype=torch.bool)  # (rows, R)
    rewards = torch.zeros(rows, width, dtype=torch.bfloat16)  # (rows, R)
    for row in range(rows):
        column = int(torch.randint(0, 3, (1,), generator=generator))  # some rows start with an untrainable token
        for _ in range(int(turns[row])):
            length, gap = (int(v) for v in torch.randint(1, 40, (2,), generator=generator))
            if column + length > width:
                break
            mask[row, column : column + length] = True
            rewards[row, column + length - 1] = float(torch.randn(1, generator=generator))
            column += length + gap
    stray = torch.rand(rows, width, generator=generator) < 0.002
    rewards[stray] = 0.5
    # column 0: on a one-turn row that starts later, a leading token whose reward counts for that turn
    rewards[torch.rand(rows, generator=generator) < 0.3, 0] = 0.25
    per_turn, counts = turn_values(rewards, mask.to(mask_dtype))
    expected = per_turn.gather(1, (counts - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1) * (counts > 0)
    assert int(counts.max()) >= 10 and int((counts == 0).sum()) == 0
    assert torch.equal(last_turn_values(rewards, mask.to(mask_dtype)), expected)
