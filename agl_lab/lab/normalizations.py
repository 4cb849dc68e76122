"""The field's normalizations side by side, measured on their weight functions rather than read off a table.

For every catalogue mode (:data:`agl_lab.LOSS_MODES`) two experiments on hand-made layouts of one step's rows:

* **Splitting** (:func:`split_factors`): one rollout X split into k rows of 5 tokens, beside Y (one row of the
  same 5k tokens) and Z (one row of 5 tokens), all of one prompt, in one mini-batch of 8 rows cut into
  micro-batches of 2. ``X/Y`` isolates the row count (k for the modes that weigh a k-row rollout k times), ``X/Z``
  adds the token count.
* **Dependence** (:func:`dependences`): X (two rows) stays as it is while the rest changes — the other rows'
  tokens, their rollouts and prompt groups, one more mini-batch of them (batch composition); the micro-batch size;
  the data-parallel ranks — and each mode's weight of X is compared.

:func:`normalization_table` puts both beside the catalogue's own claims (``split``, ``depends_on``); the tests
hold them equal. TRL's and SkyRL's normalizations are evaluated on verl's split of rows into ranks, mini- and
micro-batches, so what differs between modes is the normalization, not a data loader. Notebook:
``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from agl_lab.config.modes import DEPENDENCIES, LOSS_MODES
from agl_lab.core.weights import token_layout

__all__ = ["dependences", "normalization_table", "split_class", "split_factors"]

_LENGTH = 5  # tokens of one row of X, and of Z
_ROWS = 8  # rows per mini-batch in the experiments
_OTHERS = np.array([3, 7, 4, 6, 2, 8, 5, 9, 3, 6, 4, 7, 5, 2], dtype=float)  # the other rows' tokens


def split_factors(modes: Sequence[str] = tuple(LOSS_MODES), ks: Sequence[int] = (2, 4)) -> pd.DataFrame:
    """Per mode, X/Y and X/Z for each k: how a rollout split into k rows weighs against itself as one row."""
    out = {}
    for k in ks:
        fillers = _ROWS - k - 2
        tokens = [_LENGTH] * k + [_LENGTH * k, _LENGTH] + [_LENGTH] * fillers  # X's rows, Y, Z, one-row fillers
        rollout = [0] * k + [1, 2] + list(range(3, 3 + fillers))
        layout = token_layout(tokens, rollout, group=np.zeros(_ROWS, int), mini_batch_rows=_ROWS,
                              micro_batch_rows=2, horizon=64)  # fmt: skip
        for mode in modes:
            weight = np.bincount(layout.rollout, weights=LOSS_MODES[mode].weight(layout) * layout.row_tokens)
            out.setdefault(mode, {})[f"X/Y, k={k}"] = weight[0] / weight[1]
            out[mode][f"X/Z, k={k}"] = weight[0] / weight[2]
    return pd.DataFrame.from_dict(out, orient="index")


def split_class(factors: pd.Series) -> str:
    """One of :data:`agl_lab.config.modes.SPLITS` from a mode's :func:`split_factors` line."""
    ks = [int(c.split("=")[1]) for c in factors.index if c.startswith("X/Y")]
    xy = np.array([factors[f"X/Y, k={k}"] for k in ks])
    xz = np.array([factors[f"X/Z, k={k}"] for k in ks])
    if np.allclose(xy, ks, rtol=1e-6):
        return "k times"
    if np.allclose(xy, 1, rtol=1e-6):
        return "equal" if np.allclose(xz, 1, rtol=1e-6) else "by tokens"
    return "by micro-batch tokens"


def dependences(modes: Sequence[str] = tuple(LOSS_MODES)) -> pd.DataFrame:
    """Per mode and :data:`agl_lab.config.modes.DEPENDENCIES`: whether the weight of a fixed rollout X moves."""
    base = _step()
    probes = {
        "batch composition": [
            _step(tokens=_OTHERS * 3),  # the other rows longer
            _step(rollouts="pairs"),  # the other rows in two-row rollouts
            _step(groups="one"),  # every other row in X's prompt group
            _step(mini_batches=3),  # one more mini-batch of other rows
        ],
        "micro-batch size": [_step(micro=1), _step(micro=None)],
        "dp size": [_step(dp=2)],
    }
    table = {}
    for mode in modes:
        x = _weight_of_x(base, mode)
        table[mode] = {
            dependence: any(not np.isclose(_weight_of_x(layout, mode), x, rtol=1e-9, atol=0) for layout in layouts)
            for dependence, layouts in probes.items()
        }
    return pd.DataFrame.from_dict(table, orient="index")[list(DEPENDENCIES)]


def normalization_table(modes: Sequence[str] = tuple(LOSS_MODES)) -> pd.DataFrame:
    """One line per mode: who defines it, its weight and loss scale, the measured k-row factors, what a split does
    and what else moves its weights (measured), whether that is what the catalogue says, and if it is trainable."""
    factors = split_factors(modes)
    depends = dependences(modes)
    lines = []
    for mode in modes:
        entry = LOSS_MODES[mode]
        measured = tuple(d for d in DEPENDENCIES if depends.loc[mode, d])
        split = split_class(factors.loc[mode])
        lines.append({
            "mode": mode, "family": entry.family, "weight": entry.formula, "loss scale": entry.scale,
            "k=2 rows weigh": factors.loc[mode, "X/Y, k=2"], "k=4 rows weigh": factors.loc[mode, "X/Y, k=4"],
            "split": split, "depends on": ", ".join(measured) or "—",
            "as catalogued": split == entry.split and measured == tuple(entry.depends_on),
            "trainable": entry.trainable,
        })  # fmt: skip
    return pd.DataFrame(lines).set_index("mode")


def _step(*, tokens=_OTHERS, rollouts="single", groups="alternate", mini_batches=2, micro=2, dp=1):
    """X's two rows (positions 0 and 2, sharing micro-batches with others) among 8 × ``mini_batches`` - 2 others."""
    n_others = _ROWS * mini_batches - 2
    others = np.resize(np.asarray(tokens, dtype=float), n_others)
    row_tokens = np.concatenate([[_LENGTH], others[:1], [_LENGTH], others[1:]])
    other_rollout = 1 + (np.arange(n_others) // 2 if rollouts == "pairs" else np.arange(n_others))
    rollout = np.concatenate([[0], other_rollout[:1], [0], other_rollout[1:]])
    other_group = np.zeros(n_others, int) if groups == "one" else np.arange(n_others) % 2
    group = np.concatenate([[0], other_group[:1], [0], other_group[1:]])
    return token_layout(row_tokens, rollout, group=group, mini_batch_rows=_ROWS, micro_batch_rows=micro,
                        dp_size=dp, horizon=64)  # fmt: skip


def _weight_of_x(layout, mode: str) -> float:
    weight = LOSS_MODES[mode].weight(layout) * layout.row_tokens
    return float(weight[layout.rollout == 0].sum())
