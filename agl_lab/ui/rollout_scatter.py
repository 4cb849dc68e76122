"""The weighting panel's rollout figure: every rollout's signed mass against the rows it kept, as the plot can show it.

One point per rollout stops working at the sizes the panel is for: 10,000 rows are 7,200 rollouts, most of them
drawn on top of each other in a few columns, and sending, drawing and hit-testing them all took most of a control
change (``benchmarks/bench_browser.py``). So rollouts of one reward group and kept-row count whose masses lie within
1/:attr:`RolloutScatter.Y_BINS` of the plot's height of each other share one marker: drawn at the mass of its middle
rollout, its area growing with how many it holds. Hover shows that rollout's id, uid, rows, tokens, reward,
advantage, weight and fate and how many more the marker holds; a click lists its rows. A few hundred SVG markers at
10k rows (per_rollout_mean: ~120; the token modes: ~250). Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go

from agl_lab.lab.weighting_result import RolloutView
from agl_lab.ui.live_figure import LiveFigure
from agl_lab.ui.weighting_figures import GROUP_COLOURS, column_range, sticky_range

__all__ = ["RolloutScatter", "hover_texts"]

# The weight comes as a number (a binary array) and the mass is the marker's y: only the rollout's details are text.
_HOVER = "%{hovertext}<br>weight %{customdata:.3g}<br>mass %{y:.3g}<extra></extra>"
_OFFSET = (-0.12, 0.12, 0.0)  # the two reward groups side by side in each column; nothing kept sits at 0


class RolloutScatter:
    """Each rollout's mass against the rows it kept, by reward group (see the module); a click on a marker calls
    ``on_pick(index)`` with the index of the rollout it shows. ``members[g]``/``counts[g]``: per marker of group
    ``g``'s trace, that rollout and how many rollouts the marker holds."""

    GROUPS = ("higher reward", "lower reward", "no row kept")
    Y_BINS = 120  # about 3 px of the plot each: closer masses would overlap anyway

    def __init__(self, on_pick: Callable[[int], None] | None = None) -> None:
        self.on_pick = on_pick
        self.members: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * 3
        self.counts: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * 3
        fig = go.Figure()
        for g, name in enumerate(self.GROUPS):
            fig.add_trace(go.Scatter(name=name, mode="markers", marker=dict(color=GROUP_COLOURS[g], opacity=0.7,
                                     line_width=0), hovertemplate=_HOVER))  # fmt: skip
        fig.add_trace(go.Scatter(name="column mean", mode="lines", line=dict(color="black", width=2),
                                 hoverinfo="skip"))  # fmt: skip
        fig.add_trace(go.Scatter(mode="lines", line=dict(color="#888", width=1), hoverinfo="skip", showlegend=False))
        fig.update_layout(width=560, height=450, margin=dict(l=60, r=10, t=56, b=40, autoexpand=False),
                          title=dict(text="each rollout's signed mass vs the rows it kept", font_size=13, y=0.98),
                          hovermode="closest", uirevision="keep", hoverlabel=dict(align="left"),
                          xaxis=dict(title_text="rows per rollout (kept)", dtick=1, ticklabeloverflow="allow"),
                          yaxis=dict(title_text="mass = Σ weight × advantage", ticklabeloverflow="allow"),
                          legend=dict(font_size=10, orientation="h", yanchor="bottom", y=1.01, x=0))  # fmt: skip
        self.widget = LiveFigure(fig)
        self.widget.on_click(self._clicked)

    def update(self, view: RolloutView) -> None:
        """Move the markers to ``view``'s masses (one message)."""
        n = len(view.rollout_id)
        kept = view.rows_kept > 0
        higher = view.reward >= (view.reward.min() + view.reward.max()) / 2 if n else np.zeros(0, bool)
        group = np.where(kept, np.where(higher, 0, 1), 2)
        y = np.where(kept, view.mass, 0.0)
        markers, counts = _markers(group, view.rows_kept, y, bins=self.Y_BINS)
        traces: dict[int, dict] = {}
        self.members, self.counts = [], []
        for g in range(3):
            chosen = group[markers] == g
            idx, count = markers[chosen], counts[chosen]
            self.members.append(idx), self.counts.append(count)
            traces[g] = {"x": view.rows_kept[idx] + _OFFSET[g], "y": y[idx], "customdata": view.weight[idx],
                         "hovertext": hover_texts(view, idx, count).tolist(),
                         "marker.size": np.minimum(4 + 2.2 * np.sqrt(count), 22)}  # fmt: skip
        means_x, means_y = _mean_segments(view.rows_kept[kept], view.mass[kept])
        right = float(view.rows_kept.max(initial=0)) + 0.5
        traces[3], traces[4] = {"x": means_x, "y": means_y}, {"x": [-0.5, right], "y": [0.0, 0.0]}
        low, high = min(float(y.min(initial=0)), 0.0), max(float(y.max(initial=0)), 0.0)
        pad = (high - low) * 0.06 or 1.0
        low, high = low - pad, high + pad
        x_range = sticky_range(self.widget.layout_value("xaxis.range"), -0.5, right, fit=column_range)
        y_range = sticky_range(self.widget.layout_value("yaxis.range"), low, high)
        self.widget.update(traces, {"xaxis.range": x_range, "yaxis.range": y_range})

    def _clicked(self, trace: int, point: int) -> None:
        if trace < len(self.GROUPS) and self.on_pick is not None:  # a marker, not a line
            self.on_pick(int(self.members[trace][point]))


def _markers(group: np.ndarray, column: np.ndarray, y: np.ndarray, *, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """One marker per (group, column, y-bin) that holds rollouts: the index of its middle rollout by ``y`` (where it is
    drawn and what its hover describes) and how many rollouts it holds. ``bins`` split the range of ``y``."""
    if not len(y):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    low, span = y.min(), float(y.max() - y.min()) or 1.0
    level = np.minimum(((y - low) / span * bins).astype(np.int64), bins)
    key = (group.astype(np.int64) * (int(column.max()) + 1) + column) * (bins + 1) + level
    order = np.lexsort((y, key))  # by marker, then by mass within it
    starts = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]])
    counts = np.diff(np.r_[starts, len(order)])
    return order[starts + (counts - 1) // 2], counts


def _mean_segments(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A short horizontal line at each column's mean, as one trace with gaps (NaN) between the lines."""
    columns = np.unique(x)
    sums = np.bincount(np.searchsorted(columns, x), weights=y, minlength=len(columns))
    means = sums / np.maximum(np.bincount(np.searchsorted(columns, x), minlength=len(columns)), 1)
    xs = np.stack([columns - 0.3, columns + 0.3, np.full(len(columns), np.nan)], axis=1).ravel()
    ys = np.stack([means, means, np.full(len(columns), np.nan)], axis=1).ravel()
    return xs, ys


def hover_texts(view: RolloutView, index: np.ndarray, count: np.ndarray | None = None) -> np.ndarray:
    """The hover text of rollouts ``index`` but their weight and mass (numbers the figure formats): id, uid, rows kept,
    fate, tokens, reward and advantage; ``count``: how many rollouts each one's marker holds (said when more than 1)."""
    count = np.ones(len(index), dtype=np.int64) if count is None else count
    kept, rows = view.rows_kept[index].tolist(), view.rows[index].tolist()  # only the shown rollouts' (a few hundred)
    ids, uids = view.rollout_id[index], view.uid[index]
    tokens, reward, advantage = (view.tokens_kept[index].tolist(), view.reward[index].tolist(),
                                 view.advantage[index].tolist())  # fmt: skip
    lines = [
        f"<b>rollout {ids[j]}</b>{f' and {c - 1} more here' if c > 1 else ''}<br>uid {uids[j]}"
        f"<br>rows {kept[j]} of {rows[j]} kept ({_fate(kept[j], rows[j])})<br>tokens {tokens[j]:.0f}"
        f"<br>reward {reward[j]:.3g}<br>advantage {advantage[j]:.3g}"
        for j, c in enumerate(count.tolist())
    ]
    out = np.empty(len(lines), dtype=object)
    out[:] = lines
    return out


def _fate(kept: int, rows: int) -> str:
    return "kept" if kept == rows else "dropped" if kept == 0 else "partly dropped"
