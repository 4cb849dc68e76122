"""The standard panels as plotly traces: curves to hover (step, value, run, seed) and zoom, as W&B users expect.

The same panels as the PNGs (:mod:`agl_lab.curves.panels`, drawn by :mod:`agl_lab.curves.figures`), in the same
style (:mod:`agl_lab.curves.style`): per setting a bold line (the mean over its seeds, smoothed with the debiased EMA
of :func:`agl_lab.curves.bands.smoothed`), the values as logged faint behind it, with several seeds each seed as a
thin line and the band of the title; overlaid runs (the run picker, W&B runs read back) as thin grey lines. Hovering
any point shows its step, value (and the value as logged), run and seed.

:func:`panel_traces` returns the traces as plain dicts under stable keys, so a live figure
(:class:`agl_lab.ui.curve_view.CurveView`) moves its traces to new data in place when only values change (a smoothing
step, a new training step) and rebuilds them only when what is drawn changes (another setting, overlaid runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from agl_lab.curves.bands import Band, band_stats, group_same_curves, smoothed
from agl_lab.curves.metrics import metric_info
from agl_lab.curves.panels import PANELS, panel_lines, panel_reference, panel_ylabel
from agl_lab.curves.style import (
    BAND_OPACITY,
    DEFAULT_SMOOTHING,
    LINE_WIDTH,
    OVERLAY_COLOUR,
    RAW_OPACITY,
    SHARED_COLOUR,
    STEP_LABEL,
    plotly_layout,
    setting_colours,
)

__all__ = ["empty_panels", "panel_traces", "panel_ylabels"]

_DASHES = ("solid", "dash", "dot")
_HOVER = ("<b>%{{fullData.name}}</b><br>step %{{x}}<br>{name}: %{{y:.4g}}{logged}<br>run: %{{customdata[0]}}"
          "<br>seed: %{{customdata[1]}}<extra></extra>")  # fmt: skip


def empty_panels(panels: Sequence[str] = tuple(PANELS), present: set[str] | None = None) -> go.Figure:
    """The panels' grid (two columns) with titles and axis labels, and no trace yet; ``present``: the metrics the
    table has (the y units follow the lines drawn; default: each line's first metric)."""
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    specs = [[{} if r * cols + c < len(panels) else None for c in range(cols)] for r in range(rows)]  # no empty cell
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[PANELS[p].title for p in panels], specs=specs,
                        horizontal_spacing=0.12, vertical_spacing=0.16)  # fmt: skip
    for i, ylabel in enumerate(panel_ylabels(panels, present)):
        row, col = divmod(i, cols)
        fig.update_xaxes(title_text=STEP_LABEL, row=row + 1, col=col + 1)
        fig.update_yaxes(title_text=ylabel, row=row + 1, col=col + 1)
        reference = panel_reference(panels[i])
        if reference is not None:  # a shape across the panel: it needs no steps, so live updates never move it
            x, y = _axes(i)
            fig.add_shape(
                type="line",
                xref=f"{x} domain",
                x0=0,
                x1=1,
                yref=y,
                y0=reference[0],
                y1=reference[0],
                line=dict(color=SHARED_COLOUR, dash="dot", width=1.2),
                name=reference[1],
                showlegend=True,
            )
    fig.update_layout(**plotly_layout(height=360 * rows + 200))  # + the legend below
    fig.update_annotations(font_size=13)  # the subplot titles
    return fig


def panel_traces(
    table: pd.DataFrame,
    *,
    panels: Sequence[str] = tuple(PANELS),
    band: Band = "std",
    smoothing: float = DEFAULT_SMOOTHING,
    overlay: pd.DataFrame | None = None,
) -> dict[str, dict[str, Any]]:
    """Every trace of the panels, key → ``go.Scatter`` properties. The keys depend on what is drawn (settings,
    seeds, metrics, overlaid runs), never on the values, so a smoothing change keeps them."""
    traces: dict[str, dict[str, Any]] = {}
    present = set(table.metric) if len(table) else set()
    curves = _Curves(table, sorted({m for p in panels for m in panel_lines(p, present)}), band, smoothing)
    for i, panel in enumerate(panels):
        axes = dict(zip(("xaxis", "yaxis"), _axes(i), strict=True))
        lines = panel_lines(panel, present)
        for metric, dash in zip(lines, _DASHES, strict=False):
            for group in curves.groups(metric):
                traces.update(curves.traces(panel, metric, group, dash=dash, axes=axes))
            if len(lines) > 1:  # the line style's meaning, once per panel
                traces[f"style|{panel}|{metric}"] = dict(**axes, x=[None], y=[None], mode="lines",
                                                         name=metric_info(metric).name, legendgroup=f"style|{panel}",
                                                         legendgrouptitle_text=PANELS[panel].quantity,
                                                         line=dict(color="black", dash=dash, width=1.5))  # fmt: skip
        if lines:
            traces[f"overlay|{panel}"] = dict(**axes, mode="lines", legendgroup="overlay",
                                              **_overlay(overlay, lines, smoothing), hovertemplate=_OVERLAY_HOVER,
                                              line=dict(color=OVERLAY_COLOUR, width=LINE_WIDTH["overlay"]))  # fmt: skip
    _name_overlay(traces, overlay)
    return traces


class _Curves:
    """The table's statistics, split once by metric and setting, and the traces of one curve drawn from them.

    The rows are smoothed once; the statistics of the smoothed and of the logged values come from one grouping each,
    and are cut into each (metric, setting)'s curve by position (they come sorted by setting, metric and step): a
    smoothing step at the training panel's sizes was ~90 ms of pandas splitting and regrouping, most of a redraw.
    """

    def __init__(self, table: pd.DataFrame, metrics: list[str], band: Band, smoothing: float) -> None:
        self.smoothing = smoothing
        self.colours = setting_colours(table.setting.dropna().unique()) if len(table) else {}
        self.order = [str(s) for s in table.setting.drop_duplicates()] if len(table) else []
        self.legend_done: set[str] = set()
        self.parts: dict[tuple, _Part] = {}
        if not metrics:
            return
        runs = smoothed(table, metrics, smoothing=smoothing)
        runs["logged"] = smoothed(table, metrics).value.to_numpy() if smoothing > 0 else runs.value.to_numpy()
        stats = band_stats(runs, band=band)  # sorted by setting, metric, step
        keys = ["setting", "metric", "step"]
        logged = runs.groupby(keys, dropna=False)["logged"].mean().to_numpy()  # the same groups, the same order
        setting, metric = stats.setting.to_numpy(), stats.metric.to_numpy()
        pair = pd.factorize(setting)[0] * (len(metrics) + 1) + pd.factorize(metric)[0]  # (points,)
        starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        ends = np.r_[starts[1:], len(pair)]
        columns = [stats[c].to_numpy(float) for c in ("step", "mean", "low", "high", "n_seeds")] + [logged]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            self.parts[(metric[a], setting[a])] = _Part(*(c[a:b] for c in columns))
        self.runs, self.run_rows = runs, runs.groupby(["metric", "setting"], sort=False).indices
        own = table.groupby("setting", sort=False)
        self.labels = {str(s): _run_label(part) for s, part in own}

    def groups(self, metric: str) -> list[list[str]]:
        # what makes two settings' curves the same: step, mean and band, step by step
        curves = {s: np.column_stack(part[:4]) for (m, s), part in self.parts.items() if m == metric}
        return group_same_curves(curves, self.order)

    def traces(self, panel: str, metric: str, group: list[str], *, dash: str, axes: dict) -> dict[str, dict]:
        """Band, seeds, values as logged and the bold line of one setting's curve (or of settings sharing it)."""
        setting, shared = group[0], len(group) > 1
        colour = SHARED_COLOUR if shared else self.colours[setting]
        key = f"{panel}|{metric}|{'+'.join(group)}"
        part = self.parts[(metric, setting)]
        n = int(part.n_seeds.max())
        name = metric_info(metric).name
        hover = _HOVER.format(name=name, logged=_LOGGED)
        base = dict(**axes, legendgroup="shared" if shared else setting, mode="lines")
        out = {}
        if n > 1:
            out[f"band|{key}"] = dict(base, **_band(part), fillcolor=colour, opacity=BAND_OPACITY, showlegend=False,
                                      hoverinfo="skip")  # fmt: skip
            seeds_of = self.runs.take(self.run_rows[(metric, setting)])
            out[f"seeds|{key}"] = dict(base, **_seed_lines(seeds_of), name=setting, opacity=0.45,
                                       line=dict(color=colour, width=LINE_WIDTH["seed"], dash=dash), showlegend=False,
                                       hovertemplate=hover)  # fmt: skip
        smooth = self.smoothing > 0
        out[f"raw|{key}"] = dict(base, x=_c(part.step if smooth else []), y=_c(part.logged if smooth else []),
                                 opacity=RAW_OPACITY, line=dict(color=colour, width=LINE_WIDTH["raw"], dash=dash),
                                 showlegend=False, hoverinfo="skip")  # fmt: skip
        run, seeds = self.labels[setting]
        data = _objects([(run, seeds, f"{v:.4g}") for v in part.logged])
        label = f"{name}: same for every setting (n={n})" if shared else f"{setting} (n={n})"
        out[f"mean|{key}"] = dict(base, x=_c(part.step), y=_c(part.mean), name=label, customdata=data,
                                  showlegend=shared or setting not in self.legend_done, hovertemplate=hover,
                                  line=dict(color=colour, width=LINE_WIDTH["smoothed"], dash=dash))  # fmt: skip
        self.legend_done.add(setting)
        return out


def _run_label(own: pd.DataFrame) -> tuple[str, str]:
    """A setting's bold line in hover: its run (or how many runs it is the mean of) and its seeds."""
    runs, seeds = own.run.dropna().unique(), own.seed.dropna().unique()
    run = str(runs[0]) if len(runs) == 1 else f"mean of {len(runs)} runs"
    return run, ", ".join(_seed(s) for s in sorted(seeds)) or "–"


_LOGGED = " (as logged: %{customdata[2]})"
_OVERLAY_HOVER = ("<b>%{customdata[0]}</b><br>step %{x}<br>%{customdata[2]}: %{y:.4g}<br>seed: %{customdata[1]}"
                  "<extra></extra>")  # fmt: skip


def _axes(i: int) -> tuple[str, str]:
    return ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")


def panel_ylabels(panels: Sequence[str], present: set[str] | None = None) -> list[str]:
    """Each panel's y label for a table holding ``present`` (None: each line's first metric)."""
    labels = []
    for panel in panels:
        have = present if present is not None else {line.split("|")[0] for line in PANELS[panel].lines}
        labels.append(panel_ylabel(panel, panel_lines(panel, have) or [PANELS[panel].lines[0].split("|")[0]]))
    return labels


def _c(values) -> np.ndarray:
    # contiguous float arrays: plotly sends them as binary buffers (ipykernel refuses strided ones)
    return np.ascontiguousarray(np.asarray(values, dtype=float))


class _Part(NamedTuple):
    """One setting's curve of one metric, step by step: the statistics over its seeds (smoothed) and the mean as
    logged."""

    step: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_seeds: np.ndarray
    logged: np.ndarray


def _band(part: _Part) -> dict[str, Any]:
    """The band as one closed polygon: the upper edge left to right, the lower edge back."""
    x = np.concatenate([part.step, part.step[::-1]])
    y = np.concatenate([part.high, part.low[::-1]])
    return dict(x=_c(x), y=_c(y), fill="toself", line=dict(width=0))


def _seed_lines(per_run: pd.DataFrame) -> dict[str, Any]:
    """Every seed's line in one trace, runs apart by a gap (NaN); hover data: run, seed, value as logged."""
    part = per_run.sort_values(["run", "step"], kind="stable")
    run = part.run.astype(str).to_numpy()
    ends = np.append(np.flatnonzero(run[1:] != run[:-1]) + 1, len(run))  # where each run's points end
    x = np.insert(part.step.to_numpy(float), ends, np.nan)
    y = np.insert(part.value.to_numpy(float), ends, np.nan)
    rows = [(r, _seed(s), f"{v:.4g}") for r, s, v in zip(run, part.seed, part.logged, strict=True)]
    for end in reversed(ends):
        rows.insert(end, ("", "", ""))
    return dict(x=_c(x), y=_c(y), customdata=_objects(rows))


def _overlay(overlay: pd.DataFrame | None, metrics: list[str], smoothing: float) -> dict[str, Any]:
    if overlay is None or not overlay.metric.isin(metrics).any():
        return dict(x=_c([]), y=_c([]), customdata=_objects([]))
    lines = smoothed(overlay, [m for m in metrics if m in set(overlay.metric)], smoothing=smoothing)
    xs, ys, data = [], [], []
    for (source, run, metric), part in lines.groupby(["source", "run", "metric"], sort=True):
        xs += [*part.step.to_numpy(float), np.nan]
        ys += [*part.value.to_numpy(float), np.nan]
        seed = _seed(part.seed.iloc[0])
        data += [(f"{run} ({source})", seed, metric_info(metric).name)] * len(part) + [("", "", "")]
    return dict(x=_c(xs), y=_c(ys), customdata=_objects(data))


def _name_overlay(traces: dict[str, dict[str, Any]], overlay: pd.DataFrame | None) -> None:
    """One legend entry for every overlaid run, on the first panel's overlay trace."""
    keys = [k for k in traces if k.startswith("overlay|")]
    runs = 0 if overlay is None or overlay.empty else overlay.groupby(["source", "run"]).ngroups
    for i, key in enumerate(keys):
        traces[key]["name"] = f"overlaid runs ({runs})"
        traces[key]["showlegend"] = i == 0 and runs > 0


def _seed(seed: Any) -> str:
    return "–" if seed is None or pd.isna(seed) else str(int(seed))


def _objects(rows: list[tuple[str, ...]]) -> np.ndarray:
    out = np.empty((len(rows), 3), dtype=object)
    if rows:
        out[:] = rows
    return out
