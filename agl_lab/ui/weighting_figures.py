"""The weighting panel's live figures (:class:`agl_lab.ui.live_figure.LiveFigure`s), each moved by one message.

* :class:`WeightBars` — how much a rollout weighs relative to a fair share, by loss mode and rows per rollout (mean
  bars, 10–90% whiskers, the batch's loss scale Σ at the top of each mode, the shown mode shaded); below it, rows per
  rollout by reward and the rows the drops and the cap keep. All SVG bars, one widget.
* :class:`agl_lab.ui.rollout_scatter.RolloutScatter` — every rollout's signed mass against the rows it kept.

Titles that change live in the panel's HTML, not in the figures. What made a redraw slow in JupyterLab, measured
(``benchmarks/bench_browser.py``):

* plotly's full redraw after each update (axes, legend, margins). Updates are animation frames without it (see
  :mod:`agl_lab.ui.live_figure`), so every axis is given its range and every mark that moves with the data is a
  trace. The shown mode's shading is a shape: a frame with no trace in it draws the shapes alone, so a loss-mode
  change redraws one rectangle, not every bar (a frame that names a trace draws every trace).
* plotly measuring every tick label to hide those past the page's edge, each measurement a layout of the whole
  notebook: off with ``ticklabeloverflow="allow"``.
* The legend pushing the margins: ``autoexpand=False``.
* An axis range that moves: a frame draws the axes it names, then plotly relays the whole figure out. The value
  axes are rounded out to their ticks (:func:`tick_range`) and keep their range while it holds the data
  (:func:`sticky_range`), and ``LiveFigure`` leaves out layout keys at their current value. In an empty page a bars
  update with its axes moving took 26.6 ms of the page's main thread, one without 18.0 ms; the scatter's 15.8 and
  11.4 ms.
* Layout that is not a range (tick text) is not drawn by a frame at all: what changes is a trace.
* 7,200 WebGL points read back from a software GPU: the scatter now draws a few hundred SVG markers.
* plotly ``FigureWidget``'s two-way protocol: see :mod:`agl_lab.ui.live_figure`.

The statistics come from :mod:`agl_lab.lab.class_stats`; static PNG/SVG figures stay matplotlib
(:mod:`agl_lab.lab.weight_figures`, :mod:`agl_lab.lab.batch_figures`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go
from matplotlib.ticker import MaxNLocator
from plotly.subplots import make_subplots

from agl_lab.core.pipeline import FATES
from agl_lab.lab.batch_figures import FATE_STYLE
from agl_lab.lab.class_stats import MAX_CLASS, ClassWeights
from agl_lab.ui.live_figure import LiveFigure

__all__ = ["GROUP_COLOURS", "STICKY_FILL", "WeightBars", "column_range", "sticky_range", "tick_range"]

_CLASS_COLOURS = ("#414487", "#2a788e", "#22a884", "#7ad151", "#bddf26", "#fde725")  # viridis, 1..6+ rows
GROUP_COLOURS = ("#2ca02c", "#d62728", "#9e9e9e")  # higher reward, lower reward, no row kept
_FATE_COLOURS = {"kept": "#1f77b4", "dropped/same_reward": "#ff7f0e", "dropped/random": "#d62728",
                 "dropped/marked": "#7f7f7f"}  # fmt: skip
_SHADE = 0.45  # half the width of the shown mode's shading, in mode ticks
_SHADING = {"type": "rect", "xref": "x", "yref": "y domain", "y0": 0, "y1": 1, "layer": "below", "line": {"width": 0},
            "fillcolor": "rgba(255, 215, 0, 0.22)"}  # fmt: skip


def tick_range(low: float, high: float) -> list[float]:
    """``[low, high]`` widened to the ticks around it (matplotlib's ``MaxNLocator``, up to 5 intervals; an end a
    rounding error beyond its tick stays where it is)."""
    ticks = MaxNLocator(nbins=5).tick_values(low, high)
    return [min(float(ticks[0]), low), max(float(ticks[-1]), high)]


def column_range(low: float, high: float) -> list[float]:
    """A range of whole columns: the data's own (half a column beyond the first and last)."""
    return [low, high]


def sticky_range(
    current: Sequence[float] | None,
    low: float,
    high: float,
    fit: Callable[[float, float], list[float]] = tick_range,
) -> list[float]:
    """An axis range for data in ``[low, high]``, which moves as little as it can.

    The ``current`` range while it holds the data and they span at least :data:`STICKY_FILL` of it; else, when the
    data leave it, the range ``fit`` (default :func:`tick_range`) gives to the data and the current range together,
    if the data still span that much of it; else the data's own range. Toggling a setting back and forth then leaves
    the axes still after the first round, so the two states compare by eye; and a range that moves costs the browser
    a redraw of the whole figure (plotly draws the axes a frame names, then relays the figure out).
    """
    if current is not None:
        if current[0] <= low and high <= current[1] and high - low >= STICKY_FILL * (current[1] - current[0]):
            return [float(current[0]), float(current[1])]
        both = fit(min(low, current[0]), max(high, current[1]))
        if high - low >= STICKY_FILL * (both[1] - both[0]):
            return [float(both[0]), float(both[1])]
    return [float(value) for value in fit(low, high)]


STICKY_FILL = 1 / 3  # an axis keeps its range while the data span at least a third of it


class WeightBars:
    """Weights by mode and rows-per-rollout class (top), rows per rollout and the cap's fates (bottom)."""

    def __init__(self, modes: Sequence[str]) -> None:
        self.modes = list(modes)
        self.top = 1.0  # the top of the weights' y axis, where the loss scales sit
        fig = make_subplots(
            rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]], row_heights=[0.62, 0.38],
            vertical_spacing=0.2, horizontal_spacing=0.08,
            subplot_titles=("rollout weight ÷ fair share, by loss mode and rows per rollout (kept)",
                            "rows per rollout after trace aggregation", "rows kept for the update"),
        )  # fmt: skip
        for j in range(MAX_CLASS):
            name = f"{j + 1}{'+' if j + 1 == MAX_CLASS else ''} row{'s' if j else ''}"
            fig.add_trace(go.Bar(name=name, marker_color=_CLASS_COLOURS[j], x=np.arange(len(self.modes)),
                                 error_y=dict(type="data", symmetric=False, thickness=1, width=0, color="#555"),
                                 hovertemplate=f"{name}<br>mean %{{y:.3g}}× a fair share<extra>%{{x}}</extra>"),
                          row=1, col=1)  # fmt: skip
        for g, name in enumerate(("higher reward", "lower reward")):
            fig.add_trace(go.Bar(name=name, marker_color=GROUP_COLOURS[g], offsetgroup="hist", showlegend=False,
                                 hovertemplate=f"{name}: %{{y}} rollouts of %{{x}} rows<extra></extra>"),
                          row=2, col=1)  # fmt: skip
        for fate in FATES:
            fig.add_trace(go.Bar(name=FATE_STYLE[fate][0], marker_color=_FATE_COLOURS[fate], offsetgroup="cap",
                                 showlegend=False, hovertemplate=f"{FATE_STYLE[fate][0]}: %{{y}} rows<extra></extra>"),
                          row=2, col=2)  # fmt: skip
        ends = [-0.5, len(self.modes) - 0.5]
        fig.add_trace(go.Scatter(x=ends, y=[1.0, 1.0], mode="lines", line=dict(color="#444", width=1, dash="dash"),
                                 hoverinfo="skip", showlegend=False), row=1, col=1)  # fmt: skip
        # the batch's loss scale Σ at the top of each mode's bars: a trace, so that a frame moves it (a frame leaves
        # tick labels as drawn: Σ in the tick text stayed at its first values)
        self.totals = len(fig.data)
        fig.add_trace(go.Scatter(x=np.arange(len(self.modes)), mode="text", textposition="bottom center",
                                 textfont=dict(size=10, color="#333"), hoverinfo="skip",
                                 showlegend=False), row=1, col=1)  # fmt: skip
        self.ticks = list(self.modes)  # catalogue names: short enough to sit under each group, angled
        fig.update_xaxes(tickvals=list(range(len(self.modes))), ticktext=self.ticks, tickfont_size=10, tickangle=-30,
                         range=ends, title_text="loss mode (Σ: the batch's loss scale)", title_font_size=11,
                         row=1, col=1)  # fmt: skip
        fig.update_xaxes(title_text="rows per rollout", dtick=1, row=2, col=1)
        fig.update_xaxes(title_text="rows per rollout (as aggregated)", dtick=1, row=2, col=2)
        fig.update_yaxes(title_text="weight ÷ fair share", row=1, col=1)
        fig.update_yaxes(title_text="rollouts", row=2, col=1)
        fig.update_yaxes(title_text="rows", row=2, col=2)
        fig.update_xaxes(ticklabeloverflow="allow")  # see the module's notes: measuring them is most of a redraw
        fig.update_yaxes(ticklabeloverflow="allow")
        legend = dict(title_text="rows per rollout (kept):", font_size=10, orientation="h", yanchor="bottom", y=1.05,
                      xanchor="left", x=0)  # fmt: skip
        fig.update_layout(barmode="group", width=940, height=680, margin=dict(l=110, r=10, t=70, b=40,
                          autoexpand=False), bargap=0.15, legend=legend, uirevision="keep")  # fmt: skip
        self.widget = LiveFigure(fig)

    def update(self, stats: ClassWeights, *, highlight: str, histogram: np.ndarray, fates: np.ndarray) -> None:
        """``stats``: per class and mode; ``histogram``: (2, classes) rollouts per row count (higher, lower reward);
        ``fates``: (4, classes) rows per fate (``FATES`` order) and aggregated row count. One message."""
        traces: dict[int, dict] = {}
        n_modes = len(self.modes)
        for j in range(MAX_CLASS):
            if j < len(stats.classes):
                mean, low, high = stats.mean[j], stats.low[j], stats.high[j]
            else:
                mean = low = high = np.full(n_modes, np.nan)
            traces[j] = {"y": mean, "error_y.array": np.nan_to_num(high - mean),
                         "error_y.arrayminus": np.nan_to_num(mean - low)}  # fmt: skip
        layout = {}
        for counts, axis in ((histogram, 2), (fates, 3)):
            columns, bottom = np.arange(1, counts.shape[1] + 1), np.zeros(counts.shape[1])
            for stack in counts:
                traces[len(traces)] = {"x": columns, "y": stack, "base": bottom}
                bottom = bottom + stack
            layout[f"xaxis{axis}.range"] = self._range(f"xaxis{axis}", 0.5, counts.shape[1] + 0.5, fit=column_range)
            layout[f"yaxis{axis}.range"] = self._range(
                f"yaxis{axis}", 0.0, max(float(bottom.max(initial=0)), 1.0) * 1.08
            )
        high = float(np.nanmax(np.concatenate([stats.high.ravel(), stats.mean.ravel(), [1.0]]))) * 1.08
        self.top = self._range("yaxis", 0.0, high)[1]
        traces[self.totals] = {"y": np.full(n_modes, self.top), "text": [f"Σ={total:.3g}" for total in stats.totals]}
        self.widget.update(traces, {"yaxis.range": [0, self.top], **layout, **self.highlight(highlight)})

    def _range(self, axis: str, low: float, high: float, fit=tick_range) -> list[float]:
        return sticky_range(self.widget.layout_value(f"{axis}.range"), low, high, fit)

    def highlight(self, mode: str) -> dict[str, list[dict]]:
        """The shading of ``mode``'s bars as the layout's shapes (send it alone with
        ``widget.update(layout=bars.highlight(mode))``: the page redraws that shape and nothing else)."""
        index = self.modes.index(mode) if mode in self.modes else -10
        return {"shapes": [{**_SHADING, "x0": index - _SHADE, "x1": index + _SHADE}]}
