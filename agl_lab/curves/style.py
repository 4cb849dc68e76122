"""One look for every history figure, matplotlib PNGs and the notebooks' plotly curves alike.

The colours per setting (:func:`setting_colours`: the demo's settings keep theirs, ``both_on`` blue, ``both_off``
orange, ``both_on_cap2`` green, others follow by name), the smoothing shown by default (:data:`DEFAULT_SMOOTHING`,
TensorBoard's 0.6; the raw values are always drawn faint behind the smoothed ones), the x axis, line widths and
opacities, legends outside the data, and the text that says how a figure was smoothed. Axis names and units come
from the metric catalogue (:mod:`agl_lab.curves.metrics`), panel titles from :mod:`agl_lab.curves.panels`.
Figures: :mod:`agl_lab.curves.figures` (PNG/SVG), :mod:`agl_lab.curves.forest`, the notebooks' live curves
(``agl_lab.ui.curve_view.CurveView``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agl_lab.config.lab_config import CURVE_SMOOTHING
from agl_lab.config.settings import DEMO_SETTINGS

__all__ = [
    "BAND_OPACITY",
    "DEFAULT_SMOOTHING",
    "LINE_WIDTH",
    "OVERLAY_COLOUR",
    "PALETTE",
    "RAW_OPACITY",
    "SHARED_COLOUR",
    "STEP_LABEL",
    "legend_outside",
    "plotly_layout",
    "setting_colours",
    "smoothing_note",
]

# matplotlib's default cycle (tab10, C0..C9) as hex, so plotly draws each setting in the colour the PNGs use.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")  # fmt: skip
SHARED_COLOUR = "#4d4d4d"  # a curve several settings share, drawn once
OVERLAY_COLOUR = "#808080"  # runs laid over the lab's curves (the run picker, W&B runs read back)
DEFAULT_SMOOTHING = CURVE_SMOOTHING  # lab.curve_smoothing's default (TensorBoard's 0.6); 0 shows the values as logged
STEP_LABEL = "training step"
LINE_WIDTH = {"smoothed": 2.0, "raw": 1.0, "seed": 0.8, "overlay": 1.0}
RAW_OPACITY = 0.3  # the values as logged, behind their smoothed line
BAND_OPACITY = 0.18


def setting_colours(settings: Iterable[str]) -> dict[str, str]:
    """One colour (hex) per setting, the same in every figure: the demo's settings keep theirs, others follow by
    name."""
    fixed = list(DEMO_SETTINGS)
    names = sorted({str(s) for s in settings})
    colours = {name: PALETTE[fixed.index(name)] for name in names if name in fixed}
    rest = [name for name in names if name not in colours]
    colours.update({name: PALETTE[(len(fixed) + i) % len(PALETTE)] for i, name in enumerate(rest)})
    return colours


def smoothing_note(smoothing: float) -> str:
    """What a figure's lines are: the values as logged, or smoothed with the raw values faint behind."""
    if smoothing <= 0:
        return "lines: values as logged"
    return f"bold: debiased EMA, smoothing {smoothing:g}; faint: as logged"


def legend_outside(ax: Any, handles: list, *, title: str | None = None, below: bool = False) -> None:
    """A matplotlib legend outside the data: beside the axes, or ``below`` them in two columns (figures of several
    panels); constrained layout makes room for it."""
    where = dict(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2) if below else dict(
        loc="upper left", bbox_to_anchor=(1.02, 1.0))  # fmt: skip
    ax.legend(handles=handles, borderaxespad=0.0, fontsize="small", title=title or None, title_fontsize="small",
              alignment="left", frameon=False, **where)  # fmt: skip


def plotly_layout(*, height: int, width: int | None = None) -> dict[str, Any]:
    """The plotly layout every curve figure starts from: white, gridded, the legend below the panels in columns
    (beside them it would take the width a notebook's panels need), hover by point."""
    layout = dict(
        template="plotly_white",
        height=height,
        margin=dict(l=70, r=10, t=60, b=50),
        font=dict(size=12),
        hovermode="closest",
        hoverlabel=dict(align="left"),
        legend=dict(
            orientation="h", x=0.0, xanchor="left", y=-0.1, yanchor="top", font=dict(size=11), groupclick="togglegroup"
        ),
        uirevision="keep",  # zoom and hidden traces survive every update
    )
    if width is not None:
        layout["width"] = width
    return layout
