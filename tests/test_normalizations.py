"""The catalogue's claims about each normalization (what a split does, what else moves its weights) are what its
weight function does, measured on hand-made layouts."""

import pytest

from agl_lab import LOSS_MODES
from agl_lab.lab.normalizations import dependences, normalization_table, split_class, split_factors


@pytest.mark.parametrize("mode", list(LOSS_MODES))
def test_each_modes_claims_are_measured(mode):
    line = normalization_table([mode]).loc[mode]
    assert line["split"] == LOSS_MODES[mode].split
    assert line["depends on"] == (", ".join(LOSS_MODES[mode].depends_on) or "—")
    assert bool(line["as catalogued"])


def test_split_factors_hand_worked():
    factors = split_factors(["seq-mean-token-mean", "token-mean", "per_rollout_mean:rows", "trl:bnpo"], ks=(2,))
    # seq-mean-token-mean: each row 1/G whatever its length: X (2 rows) 2/8, Y (1 row) 1/8
    assert factors.loc["seq-mean-token-mean", "X/Y, k=2"] == pytest.approx(2.0)
    # token-mean: by tokens, X and Y both 10 tokens, Z 5
    assert factors.loc["token-mean", ["X/Y, k=2", "X/Z, k=2"]].tolist() == pytest.approx([1.0, 2.0])
    assert factors.loc["per_rollout_mean:rows", ["X/Y, k=2", "X/Z, k=2"]].tolist() == pytest.approx([1.0, 1.0])
    # bnpo, micro-batches of 2 rows: X's rows fill micro-batch 0 (10 tokens): 10/(10·M) with M = 4; Y (10 tokens)
    # shares micro-batch 1 with Z (5): 10/(15·4). X/Y = (1/4)/(1/6) = 1.5
    assert factors.loc["trl:bnpo", "X/Y, k=2"] == pytest.approx(1.5)
    assert split_class(factors.loc["trl:bnpo"]) == "by micro-batch tokens"


def test_only_geo_mean_and_bnpo_move_with_the_micro_batch_size():
    moved = dependences()["micro-batch size"]
    assert sorted(moved[moved].index) == ["geo_mean", "trl:bnpo"]
