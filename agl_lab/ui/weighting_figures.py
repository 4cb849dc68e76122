"""The weighting panel's live figures: two plotly ``FigureWidget``s, each moved to new data by one message.

* :class:`WeightBars` — how much a rollout weighs relative to a fair share, by loss mode and rows per rollout (mean
  bars, 10–90% whiskers, the batch's loss scale Σ above each mode, the shown mode shaded); below it, rows per
  rollout by reward and the rows the drops and the cap keep. All SVG bars, one widget.
* :class:`RolloutScatter` — every rollout's signed mass (Σ weight × advantage) against the rows it kept, one point
  per rollout (WebGL), with its id, uid, rows, tokens, reward, advantage, weight and fate on hover; a click calls
  back with the rollout's index.

plotly.js comes with each ``FigureWidget`` (about 5 MB), so the panel keeps to these two. Every update is one
``plotly_update`` with contiguous arrays (ipykernel refuses strided buffers) and hover texts as object arrays;
titles that change live in the panel's HTML, not in the figure (a relayout of a title redraws the figure).
The statistics come from :mod:`agl_lab.lab.class_stats`; static PNG/SVG figures stay matplotlib
(:mod:`agl_lab.lab.weight_figures`, :mod:`agl_lab.lab.batch_figures`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from agl_lab.core.pipeline import FATES
from agl_lab.lab.batch_figures import FATE_STYLE
from agl_lab.lab.class_stats import MAX_CLASS, ClassWeights
from agl_lab.lab.weighting_result import RolloutView

__all__ = ["RolloutScatter", "WeightBars", "hover_texts"]

_CLASS_COLOURS = ("#414487", "#2a788e", "#22a884", "#7ad151", "#bddf26", "#fde725")  # viridis, 1..6+ rows
_GROUP_COLOURS = ("#2ca02c", "#d62728", "#9e9e9e")  # higher reward, lower reward, no row kept
# The mode's numbers come as numbers (binary arrays): only the batch's and selection's part is text, made once.
_HOVER = "%{hovertext}<br>weight %{customdata:.3g}<br>mass %{y:.3g}<extra></extra>"
_FATE_COLOURS = {"kept": "#1f77b4", "dropped/same_reward": "#ff7f0e", "dropped/random": "#d62728",
                 "dropped/marked": "#7f7f7f"}  # fmt: skip


def _c(values) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)


class WeightBars:
    """Weights by mode and rows-per-rollout class (top), rows per rollout and the cap's fates (bottom)."""

    def __init__(self, modes: Sequence[str]) -> None:
        self.modes = list(modes)
        fig = make_subplots(
            rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]], row_heights=[0.62, 0.38],
            vertical_spacing=0.2, horizontal_spacing=0.08,
            subplot_titles=("rollout weight ÷ fair share, by loss mode and rows per rollout (kept)",
                            "rows per rollout after trace aggregation", "rows kept for the update"),
        )  # fmt: skip
        for j in range(MAX_CLASS):
            name = f"{j + 1}{'+' if j + 1 == MAX_CLASS else ''} row{'s' if j else ''}"
            fig.add_trace(go.Bar(name=name, marker_color=_CLASS_COLOURS[j],
                                 hovertemplate=f"{name}<br>mean %{{y:.3g}}× a fair share<extra>%{{x}}</extra>"),
                          row=1, col=1)  # fmt: skip
        for g, name in enumerate(("higher reward", "lower reward")):
            fig.add_trace(go.Bar(name=name, marker_color=_GROUP_COLOURS[g], offsetgroup="hist", showlegend=False,
                                 hovertemplate=f"{name}: %{{y}} rollouts of %{{x}} rows<extra></extra>"),
                          row=2, col=1)  # fmt: skip
        for fate in FATES:
            fig.add_trace(go.Bar(name=FATE_STYLE[fate][0], marker_color=_FATE_COLOURS[fate], offsetgroup="cap",
                                 showlegend=False, hovertemplate=f"{FATE_STYLE[fate][0]}: %{{y}} rows<extra></extra>"),
                          row=2, col=2)  # fmt: skip
        fig.add_shape(type="rect", x0=-0.45, x1=0.45, y0=0, y1=1, yref="y domain", fillcolor="gold", opacity=0.2,
                      line_width=0, layer="below", row=1, col=1)  # fmt: skip
        fig.add_hline(y=1.0, line_dash="dash", line_width=1, row=1, col=1)
        self.ticks = list(self.modes)  # catalogue names: short enough to sit under each group, angled
        fig.update_xaxes(tickvals=list(range(len(self.modes))), ticktext=self.ticks, tickfont_size=10, tickangle=-30,
                         title_text="loss mode (Σ: the batch's loss scale)", title_font_size=11,
                         row=1, col=1)  # fmt: skip
        fig.update_xaxes(title_text="rows per rollout", dtick=1, row=2, col=1)
        fig.update_xaxes(title_text="rows per rollout (as aggregated)", row=2, col=2)
        fig.update_yaxes(title_text="weight ÷ fair share", rangemode="tozero", row=1, col=1)
        fig.update_yaxes(title_text="rollouts", row=2, col=1)
        fig.update_yaxes(title_text="rows", row=2, col=2)
        legend = dict(title_text="rows per rollout (kept):", font_size=10, orientation="h", yanchor="bottom", y=1.05,
                      xanchor="left", x=0)  # fmt: skip
        fig.update_layout(barmode="group", width=940, height=680, margin=dict(l=110, r=10, t=70, b=40), bargap=0.15,
                          legend=legend, uirevision="keep")  # fmt: skip
        self.widget = go.FigureWidget(fig)

    def update(self, stats: ClassWeights, *, highlight: str, histogram: np.ndarray, fates: np.ndarray) -> None:
        """``stats``: per class and mode; ``histogram``: (2, classes) rollouts per row count (higher, lower reward);
        ``fates``: (4, classes) rows per fate (``FATES`` order) and aggregated row count. One message."""
        x, y, base, error = [], [], [], []
        n_modes = len(self.modes)
        for j in range(MAX_CLASS):
            if j < len(stats.classes):
                mean, low, high = stats.mean[j], stats.low[j], stats.high[j]
            else:
                mean = low = high = np.full(n_modes, np.nan)
            x.append(_c(np.arange(n_modes)))
            y.append(_c(mean))
            base.append(None)
            up, down = _c(np.nan_to_num(high - mean)), _c(np.nan_to_num(mean - low))
            error.append(dict(type="data", symmetric=False, array=up, arrayminus=down, thickness=1, width=0,
                              color="#555"))  # fmt: skip
        classes = _c(np.arange(1, histogram.shape[1] + 1))
        bottom = np.zeros(histogram.shape[1])
        for counts in histogram:
            x.append(classes), y.append(_c(counts)), base.append(_c(bottom)), error.append(None)
            bottom = bottom + counts
        fate_x, bottom = _c(np.arange(1, fates.shape[1] + 1)), np.zeros(fates.shape[1])
        for counts in fates:
            x.append(fate_x), y.append(_c(counts)), base.append(_c(bottom)), error.append(None)
            bottom = bottom + counts
        top = float(np.nanmax(np.concatenate([stats.high.ravel(), stats.mean.ravel(), [1.0]])))
        # the batch's loss scale under each mode's tick (a tick text is one key; an annotation per mode is 2 each)
        ticks = [f"{tick} <b>Σ={total:.3g}</b>" for tick, total in zip(self.ticks, stats.totals, strict=True)]
        relayout = {"xaxis.ticktext": ticks, "yaxis.range": [0, top * 1.08], **self.highlight(highlight)}
        self.widget.plotly_update(
            restyle_data={"x": x, "y": y, "base": base, "error_y": error},
            relayout_data=relayout,
            trace_indexes=list(range(len(x))),
        )

    def highlight(self, mode: str) -> dict[str, float]:
        """The relayout that shades ``mode``'s bars (send it alone with ``widget.plotly_relayout``)."""
        index = self.modes.index(mode) if mode in self.modes else -10
        return {"shapes[0].x0": index - 0.45, "shapes[0].x1": index + 0.45}


class RolloutScatter:
    """Each rollout's mass against the rows it kept; hover shows its details, a click calls ``on_pick(index)``."""

    GROUPS = ("higher reward", "lower reward", "no row kept")

    def __init__(self, on_pick: Callable[[int], None] | None = None, *, seed: int = 0) -> None:
        self.on_pick = on_pick
        self.seed = seed
        self.members: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * 3  # rollout indices of each trace
        fig = go.Figure()
        for g, name in enumerate(self.GROUPS):
            fig.add_trace(go.Scattergl(name=name, mode="markers", marker=dict(size=6, color=_GROUP_COLOURS[g],
                                       opacity=0.65), hovertemplate=_HOVER))  # fmt: skip
        fig.add_trace(go.Scattergl(name="column mean", mode="lines", line=dict(color="black", width=2),
                                   hoverinfo="skip"))  # fmt: skip
        fig.add_hline(y=0, line_color="#888", line_width=1)
        fig.update_layout(width=560, height=450, margin=dict(l=60, r=10, t=56, b=40), hovermode="closest",
                          title=dict(text="each rollout's signed mass vs the rows it kept", font_size=13, y=0.98),
                          uirevision="keep", hoverlabel=dict(align="left"),
                          xaxis=dict(title_text="rows per rollout (kept)", dtick=1),
                          yaxis=dict(title_text="mass = Σ weight × advantage"),
                          legend=dict(font_size=10, orientation="h", yanchor="bottom", y=1.01, x=0))  # fmt: skip
        self.widget = go.FigureWidget(fig)
        for trace in self.widget.data[:3]:
            trace.on_click(self._clicked)

    def update(self, view: RolloutView, texts: np.ndarray | None) -> None:
        """Move every point to ``view``'s masses and weights; ``texts``: one hover text per rollout
        (:func:`hover_texts`), or None when the rollouts' texts have not changed since the last update."""
        n = len(view.rollout_id)
        jitter = np.random.default_rng(self.seed).uniform(-0.18, 0.18, n)
        kept = view.rows_kept > 0
        higher = view.reward >= (view.reward.min() + view.reward.max()) / 2 if n else np.zeros(0, bool)
        self.members = [np.flatnonzero(kept & higher), np.flatnonzero(kept & ~higher), np.flatnonzero(~kept)]
        x = view.rows_kept + jitter
        y = np.where(kept, view.mass, 0.0)
        xs, ys, weights, hover = [], [], [], []
        for idx in self.members:
            xs.append(_c(x[idx])), ys.append(_c(y[idx])), weights.append(_c(view.weight[idx]))
            hover.append(texts[idx] if texts is not None else None)
        means_x, means_y = _mean_segments(view.rows_kept[kept], view.mass[kept])
        xs.append(_c(means_x)), ys.append(_c(means_y)), weights.append(None), hover.append(None)
        restyle = {"x": xs, "y": ys, "customdata": weights}
        if texts is not None:
            restyle["hovertext"] = hover
        self.widget.plotly_update(restyle_data=restyle, trace_indexes=[0, 1, 2, 3])

    def _clicked(self, trace, points, _state) -> None:
        if not points.point_inds or self.on_pick is None:  # plotly calls every trace's handler; one has the point
            return
        group = self.GROUPS.index(trace.name)
        self.on_pick(int(self.members[group][points.point_inds[0]]))


def _mean_segments(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A short horizontal line at each column's mean, as one trace with gaps (NaN) between the lines."""
    columns = np.unique(x)
    sums = np.bincount(np.searchsorted(columns, x), weights=y, minlength=len(columns))
    means = sums / np.maximum(np.bincount(np.searchsorted(columns, x), minlength=len(columns)), 1)
    xs = np.stack([columns - 0.3, columns + 0.3, np.full(len(columns), np.nan)], axis=1).ravel()
    ys = np.stack([means, means, np.full(len(columns), np.nan)], axis=1).ravel()
    return xs, ys


def hover_texts(view: RolloutView) -> np.ndarray:
    """Each rollout's hover text but its weight and mass (numbers the figure formats): id, uid, rows kept, fate,
    tokens, reward and advantage. It depends on the batch, the selection and rollout-level advantage, not the mode."""
    fate = np.where(view.rows_kept == view.rows, "kept", np.where(view.rows_kept == 0, "dropped", "partly dropped"))
    lines = [
        f"<b>rollout {r}</b><br>uid {u}<br>rows {k} of {n} kept ({f})<br>tokens {t:.0f}<br>reward {w:.3g}"
        f"<br>advantage {a:.3g}"
        for r, u, k, n, f, t, w, a in zip(view.rollout_id, view.uid, view.rows_kept.tolist(), view.rows.tolist(),
                                          fate, view.tokens_kept.tolist(), view.reward.tolist(),
                                          view.advantage.tolist(), strict=True)
    ]  # fmt: skip
    out = np.empty(len(lines), dtype=object)
    out[:] = lines
    return out
