"""Training curves in a notebook as W&B and TensorBoard users expect them: hover, zoom, smoothing, other runs.

One plotly figure (:class:`agl_lab.ui.live_figure.LiveFigure`) with the standard panels
(:mod:`agl_lab.curves.panels`, drawn by :mod:`agl_lab.curves.plotly_curves` in the PNGs' style) and the controls
around it:

* **smoothing** — a slider for the weight of TensorBoard's debiased EMA (0 = the values as logged; the raw values
  stay faint behind the bold smoothed line). Moving it sends new y values to the existing traces, nothing else.
* **overlay runs** — the run picker: finished runs under ``runs/`` and the sweep folders
  (:func:`agl_lab.training.runs.finished_runs`), drawn as thin grey lines; hover names the run and seed.
* **Copy as command** — shows the ``agl-lab train ...`` line for the panel's settings (``command``), ready to select
  and copy into a terminal.
* **Restore settings** — the picked run's ``config.yaml`` back into the panel: the smoothing and overlaid runs
  (``lab.curve_smoothing``, ``lab.curve_overlay``, which every run saves) and, through ``on_restore``, whatever else
  the notebook's panel shows (notebook 03: every setting and knob of the run).

Hover shows step, value (and the value as logged), run and seed; zoom and hidden legend entries survive updates
(``uirevision``). Notebooks: ``03_short_training_runs`` (inside :class:`agl_lab.ui.training_panel.TrainingPanel`,
updated each step) and ``04_reproduce_curves`` (a sweep's settings × seeds).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go
from omegaconf import DictConfig, OmegaConf

from agl_lab.core.keys import CURVE_OVERLAY, CURVE_SMOOTHING
from agl_lab.curves.band_kinds import Band
from agl_lab.curves.history import COLUMNS, read_run_dir
from agl_lab.curves.panels import PANELS
from agl_lab.curves.plotly_curves import empty_panels, panel_traces
from agl_lab.curves.style import DEFAULT_SMOOTHING
from agl_lab.training.runs import finished_runs
from agl_lab.ui.gc_pauses import freeze_loaded
from agl_lab.ui.live_figure import LiveFigure
from agl_lab.ui.run_command import run_config

__all__ = ["RUN_ROOTS", "CurveView"]

RUN_ROOTS = ("runs", "sweeps")  # where the run picker looks, relative to the notebook's folder
_MOVED = ("x", "y", "customdata", "name", "showlegend")  # what a trace's update sends when only the values change


class CurveView:
    """Plotly curves of a long-form table with a smoothing slider, a run picker, copy-as-command and restore.

    ``table``: the lab's own runs (``setting, seed, step, metric, value``; empty until a run logs), replaced with
    :meth:`update`. ``command``: the command line(s) for the panel's settings, given the view's own (:meth:`settings`:
    they go into the line, so a rerun saves them too). ``on_restore``: called with a
    picked run's config after the view took its own settings from it. :meth:`settings` gives the view's config keys.
    """

    def __init__(
        self,
        table: pd.DataFrame | None = None,
        *,
        panels: Sequence[str] = tuple(PANELS),
        band: Band = "std",
        smoothing: float = DEFAULT_SMOOTHING,
        overlay: Sequence[str] = (),
        run_roots: Sequence[str | Path] = RUN_ROOTS,
        command: Callable[[dict[str, Any]], str] | None = None,
        on_restore: Callable[[DictConfig], None] | None = None,
    ) -> None:
        freeze_loaded()  # short GC pauses from here on (agl_lab.ui.gc_pauses)
        self.panels, self.band, self.run_roots = list(panels), band, [Path(r) for r in run_roots]
        self.command, self.on_restore = command, on_restore
        self.table = pd.DataFrame(columns=COLUMNS) if table is None else table
        self.plot = LiveFigure(empty_panels(self.panels, set(self.table.metric)))
        self.smoothing = w.FloatSlider(value=smoothing, min=0.0, max=0.99, step=0.01, description="smoothing",
                                       readout_format=".2f", continuous_update=False,
                                       style={"description_width": "initial"})  # fmt: skip
        self.runs = w.SelectMultiple(description="overlay runs", rows=4, layout=w.Layout(width="460px"),
                                     style={"description_width": "initial"})  # fmt: skip
        self.refresh_button = w.Button(description="Find runs", icon="refresh", tooltip="look for finished runs again")
        self.restore_button = w.Button(description="Restore settings", icon="undo", layout=w.Layout(width="auto"),
                                       tooltip="the picked run's settings (config.yaml) into this panel")  # fmt: skip
        self.copy_button = w.Button(description="Copy as command", icon="terminal", layout=w.Layout(width="auto"),
                                    tooltip="the agl-lab train line for this panel's settings")  # fmt: skip
        self.command_box = w.Textarea(placeholder="Copy as command: the agl-lab line appears here",
                                      layout=w.Layout(width="98%", height="4.2em"))  # fmt: skip
        self.note = w.HTML()
        self._read: dict[str, pd.DataFrame] = {}
        self._keys: list[str] | None = None
        self._quiet = False
        self.find_runs(keep=overlay)
        self.smoothing.observe(lambda _: self.redraw(), names="value")
        self.runs.observe(lambda _: self.redraw(), names="value")
        self.refresh_button.on_click(lambda _: self.find_runs(keep=self.runs.value))
        self.restore_button.on_click(lambda _: self._restore_picked())
        self.copy_button.on_click(lambda _: self.copy_command())
        controls = w.HBox([self.smoothing, self.runs, w.VBox([self.refresh_button, self.restore_button])],
                          layout=w.Layout(gap="16px", align_items="flex-start"))  # fmt: skip
        self.widget = w.VBox([controls, w.HBox([self.copy_button, self.note]), self.command_box, self.plot])
        self.redraw()

    @property
    def figure(self) -> go.Figure:
        """The curves as drawn now (a validated copy, for reading)."""
        return self.plot.figure

    def update(self, table: pd.DataFrame) -> None:
        """Show ``table`` (the lab's runs so far): values move in place; new lines are added."""
        self.table = table
        self.redraw()

    def settings(self) -> dict[str, Any]:
        """The view's config keys: ``lab.curve_smoothing`` and ``lab.curve_overlay`` (saved with every run)."""
        smoothing = round(float(self.smoothing.value), 2)
        return {CURVE_SMOOTHING: smoothing, CURVE_OVERLAY: list(self.runs.value)}

    def restore(self, cfg: DictConfig) -> None:
        """Take the smoothing and overlaid runs from ``cfg`` (a run's config), then hand it to ``on_restore``."""
        self.smoothing.value = float(OmegaConf.select(cfg, CURVE_SMOOTHING, default=DEFAULT_SMOOTHING))
        overlay = [str(p) for p in OmegaConf.select(cfg, CURVE_OVERLAY, default=None) or []]
        self.find_runs(keep=overlay)
        if self.on_restore is not None:
            self.on_restore(cfg)

    def copy_command(self) -> str:
        """Show (and return) the command line for the panel's settings, selected for copying."""
        text = self.command(self.settings()) if self.command is not None else "this panel has no command"
        self.command_box.value = text
        return text

    def find_runs(self, *, keep: Sequence[str] = ()) -> None:
        """Offer the finished runs under the run roots in the picker, keeping ``keep`` picked (and offered, when a
        restored run lies elsewhere)."""
        found = [str(p) for p in finished_runs(self.run_roots)]
        offered = found + [p for p in keep if p not in found and Path(p).is_dir()]
        self._quiet = True  # one redraw below, not one per trait
        self.runs.options = offered  # (resets the value)
        self.runs.value = tuple(p for p in keep if p in offered)
        self._quiet = False
        missing = [p for p in keep if p not in offered]
        self.note.value = f"not found, not drawn: <code>{html.escape(', '.join(missing))}</code>" if missing else ""
        self.redraw()

    def redraw(self) -> None:
        """Redraw the curves: new values into the same traces, or new traces when what is drawn changed."""
        if self._quiet or not hasattr(self, "widget"):  # still being built, or more changes coming
            return
        traces = panel_traces(self.table, panels=self.panels, band=self.band, smoothing=float(self.smoothing.value),
                              overlay=self._overlay())  # fmt: skip
        if list(traces) == self._keys:  # the same lines: their values move, the axes follow them
            moved = {i: {k: props[k] for k in _MOVED if k in props} for i, props in enumerate(traces.values())}
            self.plot.update(moved, frame=False)
            return
        figure = empty_panels(self.panels, set(self.table.metric) or None)
        figure.add_traces([go.Scatter(**props) for props in traces.values()])
        self.plot.replace(figure)
        self._keys = list(traces)

    def _overlay(self) -> pd.DataFrame | None:
        picked = list(self.runs.value)
        for path in picked:
            if path not in self._read:
                self._read[path] = read_run_dir(path).assign(run=path)  # the path: two sweeps' cells share names
        return pd.concat([self._read[p] for p in picked], ignore_index=True) if picked else None

    def _restore_picked(self) -> None:
        picked = list(self.runs.value)
        if len(picked) != 1:
            self.note.value = "pick one run in <b>overlay runs</b> to restore its settings"
            return
        self.restore(run_config(picked[0]))
        self.note.value = f"restored the settings of <code>{html.escape(picked[0])}</code>"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
