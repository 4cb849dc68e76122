"""The kinds of band drawn across seeds, and the label each carries: one source for :func:`agl_lab.curves.bands.bands`,
the figures' legends and ``agl-lab sweep --band`` (whose help must not load pandas and scipy to list them).

Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BAND_LABELS", "Band"]

Band = Literal["ci95", "std", "seeds"]
BAND_LABELS = {
    "ci95": "mean and 95% t-interval of the mean over n seeds, cut at the metric's bounds",
    "std": "mean ± 1 std over n seeds, cut at the metric's bounds",
    "seeds": "mean over n seeds (thick) and each seed (thin)",
}
