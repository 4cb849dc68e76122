"""A plotly figure in a notebook that moves to new data with one message and sends nothing back: :class:`LiveFigure`.

plotly's own ``FigureWidget`` keeps Python and the browser in step both ways. Each update is validated value by value
in Python and sent as four messages (two edit counters, the update, its reset); once drawn, the browser diffs the
whole drawn figure against its data and sends the difference back, for Python to merge and acknowledge. That is two
more kernel wake-ups per figure, and at the weighting panel's sizes it was 40% of the kernel's time for a change
(``benchmarks/bench_browser.py``, ``bench_weighting.py``). A panel that only draws what Python computed needs none of
it.

A ``LiveFigure`` is an anywidget around plotly.js itself:

* Python keeps the figure as plotly JSON.
* :meth:`LiveFigure.update` sends the trace values and layout keys that changed as one message (values at their
  current value are left out: plotly redraws each axis an update names).
* The browser draws each update as a zero-length ``Plotly.animate`` frame without the closing redraw, naming every
  trace (a frame drops the traces it does not name from their subplots): the traces, the axes' ranges and the
  shapes move, while the legend and the rest of the layout stay as drawn (a tick text sent in a frame is not drawn:
  make what changes a trace). An update of the layout alone is a ``Plotly.relayout``, which draws no trace unless an
  axis it names moves (notebook 01's shading: 1.5 ms of the page, against 14.7 ms as a frame;
  ``benchmarks/bench_figure_drawing.py``).
  Give every axis its range, since nothing autoranges. Curves whose axes follow their data ask for a full redraw
  instead (``frame=False``: plotly's own diff, ``Plotly.react``), and other traces are drawn with
  :meth:`LiveFigure.replace`.
* Only clicks come back, to :meth:`LiveFigure.on_click`.
* plotly.js is the ``plotly`` package's own bundle. It comes with each figure's state, as ``FigureWidget``'s does,
  and the page evaluates it once.
* A view drawn after updates (a second display, a reloaded page) asks for the current figure.
* A view out of sight (scrolled away, a hidden tab or output) takes updates into its data without drawing, and draws
  once when it comes into view (an ``IntersectionObserver``): in a laptop's window notebook 01's figures sit below its
  controls, and a training panel's curves may be scrolled away while a run redraws them every step.

:attr:`LiveFigure.figure` builds a validated ``go.Figure`` of the current state, for reading.
Used by :mod:`agl_lab.ui.weighting_figures` and :mod:`agl_lab.ui.rollout_scatter` (notebook 01, frames) and
:mod:`agl_lab.ui.curve_view` (notebooks 03 and 04, full redraws).
"""

from __future__ import annotations

import base64
import functools
import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any

import anywidget
import numpy as np
import plotly.graph_objects as go
import traitlets
from plotly.io.json import to_json_plotly

__all__ = ["LiveFigure"]

# plotly.min.js is a UMD bundle: given no `module` (and no AMD `define`), it sets window.Plotly.
_ESM = """
const FRAME = {transition: {duration: 0}, frame: {duration: 0, redraw: false}, mode: "immediate"};
const CONFIG = {displaylogo: false, responsive: false};

function setPath(node, path, value) {
  const parts = path.split(".");
  const last = parts.pop();
  for (const part of parts) node = node[part] = node[part] || {};
  node[last] = value;
}

function plotly(model) {
  if (!globalThis.Plotly) new Function("module", "define", "exports", model.get("_plotly_js"))();
  return globalThis.Plotly;
}

export default {
  async render({ model, el }) {
    const Plotly = plotly(model);
    const gd = document.createElement("div");
    el.appendChild(gd);
    const draw = (text) => { const f = JSON.parse(text); return Plotly.react(gd, f.data, f.layout, CONFIG); };
    await draw(model.get("_figure"));
    gd.on("plotly_click", (event) => {
      const p = event.points[0];
      model.send({type: "click", trace: p.curveNumber, point: p.pointNumber});
    });
    // the changes into the drawn figure's own data and layout, then plotly's diff of the whole figure
    const apply = (u) => {
      u.traces.forEach((t, k) => Object.entries(u.data[k]).forEach(([path, v]) => setPath(gd.data[t], path, v)));
      Object.entries(u.layout).forEach(([path, v]) => setPath(gd.layout, path, v));
    };
    const redraw = () => {
      gd.layout.datarevision = (gd.layout.datarevision || 0) + 1;
      return Plotly.react(gd, gd.data, gd.layout, CONFIG);
    };
    // Out of view (scrolled away, a hidden tab or output) a figure only takes the changes into its data; it is
    // drawn once, when it comes into view.
    let inView = true, stale = false;
    const observer = new IntersectionObserver((entries) => {
      inView = entries[entries.length - 1].isIntersecting;
      if (inView && stale) { stale = false; redraw(); }
    });
    observer.observe(gd);
    const onFigure = () => draw(model.get("_figure"));
    const onMessage = (msg) => {
      if (msg.type === "update") {
        const u = JSON.parse(msg.json);
        if (!inView) { apply(u); stale = true; return; }
        // the layout alone (a shape, a range): relayout draws what it names, a tenth of a frame's time for a shape
        if (u.frame && !u.traces.length) { Plotly.relayout(gd, u.layout); return; }
        if (u.frame) {
          // a frame draws the traces it names and drops the others from their subplots (bars and lines alike): it
          // names every trace, those that did not change with nothing to change
          const data = gd.data.map(() => ({}));
          u.traces.forEach((t, k) => { data[t] = u.data[k]; });
          Plotly.animate(gd, {data, traces: data.map((_, i) => i), layout: u.layout}, FRAME);
          return;
        }
        apply(u);
        redraw();  // a full redraw, axes autoranged
      } else if (msg.type === "figure") {
        if (!inView) { const f = JSON.parse(msg.json); gd.data = f.data; gd.layout = f.layout; stale = true; return; }
        draw(msg.json);
      }
    };
    model.on("change:_figure", onFigure);
    model.on("msg:custom", onMessage);
    model.send({type: "shown"});
    return () => {
      observer.disconnect();
      model.off("change:_figure", onFigure);
      model.off("msg:custom", onMessage);
      Plotly.purge(gd);
    };
  },
};
"""


class LiveFigure(anywidget.AnyWidget):
    """A plotly figure drawn by plotly.js in the notebook, updated by :meth:`update` (see the module)."""

    _esm = traitlets.Unicode(_ESM).tag(sync=True)
    _plotly_js = traitlets.Unicode().tag(sync=True)
    _figure = traitlets.Unicode().tag(sync=True)  # the figure as drawn first (then updates go as messages)

    def __init__(self, figure: go.Figure) -> None:
        state = _arrays(figure.to_plotly_json())
        self._state: dict[str, Any] = {"data": state["data"], "layout": state["layout"]}
        self._shown = False  # whether a view has drawn: from then on updates go as messages
        self._click_callbacks: list[Callable[[int, int], None]] = []
        self._lock = threading.Lock()  # a training panel updates from its run's thread while a view asks
        super().__init__(_plotly_js=_plotly_source(), _figure=to_json_plotly(self._state))
        self.on_msg(self._received)

    @property
    def figure(self) -> go.Figure:
        """The current figure, validated (built on each call: for reading, not for drawing)."""
        with self._lock:
            return go.Figure(self._state)

    def update(
        self,
        traces: Mapping[int, Mapping[str, Any]] | None = None,
        layout: Mapping[str, Any] | None = None,
        *,
        frame: bool = True,
    ) -> None:
        """Set ``traces`` (trace index → {property: value}, dotted paths like ``error_y.array`` allowed) and
        ``layout`` (dotted paths like ``yaxis2.range``; keys at their current value are left out): one message, none
        when nothing changed. ``frame``: drawn as one animation frame, where nothing autoranges (give every axis its
        range); False: redrawn in full with autoranged axes (slower; for curves whose axes follow the data)."""
        traces = dict(traces or {})
        with self._lock:
            # a layout key sent redraws what it names (an axis: its ticks, grid and labels) even at its old value:
            # only what changed goes (trace values too: smaller messages)
            layout = {path: value for path, value in (layout or {}).items()
                      if not _same_value(_get_path(self._state["layout"], path), value)}  # fmt: skip
            data = self._state["data"]
            traces = {index: changed for index, style in traces.items()
                      if (changed := {path: value for path, value in style.items()
                                      if not _same_data(_get_path(data[index], path), value)})}  # fmt: skip
            for index, style in traces.items():
                for path, value in style.items():  # a copy: the next update is compared with what was sent
                    _set_path(data[index], path, value.copy() if hasattr(value, "copy") else value)
            for path, value in layout.items():
                _set_path(self._state["layout"], path, value)
            if not self._shown:  # no view yet: the figure it will draw first
                self._figure = to_json_plotly(self._state)
                return
            if not traces and not layout:
                return
            message = {"traces": list(traces), "data": [dict(style) for style in traces.values()], "layout": layout,
                       "frame": frame}  # fmt: skip
            self.send({"type": "update", "json": to_json_plotly(message)})

    def layout_value(self, path: str) -> Any:
        """The current value of layout key ``path`` (dotted, like ``yaxis.range``), None where it is not set."""
        with self._lock:
            value = _get_path(self._state["layout"], path)
        return None if value is _MISSING else value

    def replace(self, figure: go.Figure) -> None:
        """Draw ``figure`` instead (other traces, another layout): one message with the whole figure; zoom and hidden
        legend entries survive where its ``uirevision`` says so."""
        state = _arrays(figure.to_plotly_json())
        with self._lock:
            self._state = {"data": state["data"], "layout": state["layout"]}
            if not self._shown:
                self._figure = to_json_plotly(self._state)
                return
            self.send({"type": "figure", "json": to_json_plotly(self._state)})

    def on_click(self, callback: Callable[[int, int], None]) -> None:
        """Call ``callback(trace index, point index)`` when a point is clicked in the notebook."""
        self._click_callbacks.append(callback)

    def click(self, trace: int, point: int) -> None:
        """What a click on point ``point`` of trace ``trace`` runs."""
        for callback in self._click_callbacks:
            callback(trace, point)

    def _received(self, _widget: Any, content: Mapping[str, Any], _buffers: Any) -> None:
        if content.get("type") == "click":
            self.click(int(content["trace"]), int(content["point"]))
        elif content.get("type") == "shown":
            with self._lock:
                if self._shown:  # another view, drawn from the first state: every view gets the current one
                    self.send({"type": "figure", "json": to_json_plotly(self._state)})
                self._shown = True


def _arrays(node: Any) -> Any:
    """``node`` with plotly's typed-array specs (``{"dtype", "bdata"[, "shape"]}``, what ``to_plotly_json`` makes of
    numpy arrays) back as numpy arrays, so the Python side reads what it was given."""
    if isinstance(node, dict):
        if {"dtype", "bdata"} <= node.keys() and node.keys() <= {"dtype", "bdata", "shape"}:
            values = np.frombuffer(base64.b64decode(node["bdata"]), dtype=node["dtype"]).copy()
            shape = node.get("shape")
            return values.reshape([int(n) for n in str(shape).split(",")]) if shape else values
        return {key: _arrays(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_arrays(value) for value in node]
    return node


_MISSING = object()


def _get_path(node: dict[str, Any], path: str) -> Any:
    try:
        return functools.reduce(operator.getitem, path.split("."), node)
    except (KeyError, TypeError, IndexError):  # not set yet (or a value where the path goes on)
        return _MISSING


def _same_value(old: Any, new: Any) -> bool:
    """Whether a layout value is unchanged (arrays and lists element by element; NaN never counts as unchanged)."""
    if old is _MISSING:
        return False
    if isinstance(old, list | tuple | np.ndarray) or isinstance(new, list | tuple | np.ndarray):
        try:
            return bool(np.array_equal(np.asarray(old), np.asarray(new)))
        except (TypeError, ValueError):  # ragged or mixed values: send them
            return False
    try:
        return bool(old == new)
    except (TypeError, ValueError):
        return False


def _same_data(old: Any, new: Any) -> bool:
    """Whether a trace's value is unchanged: as :func:`_same_value`, but NaN where NaN was counts as unchanged (an
    empty class's bar is not drawn either way)."""
    if old is _MISSING:
        return False
    if isinstance(old, np.ndarray) and isinstance(new, np.ndarray) and old.dtype.kind == new.dtype.kind == "f":
        return old.shape == new.shape and bool(np.array_equal(old, new, equal_nan=True))
    return _same_value(old, new)


def _set_path(node: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


@functools.lru_cache(maxsize=1)
def _plotly_source() -> str:
    """The plotly.js bundle of the installed ``plotly`` package (read once)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()
