"""The proposals side by side on one batch: influence by rows-per-rollout class, effective sample size and cosine.

One figure of :func:`agl_lab.weighting_diagnostics`'s table (its ``attrs["influence"]``), for a few loss modes:

* left: per rows-per-rollout class, each mode's share of the gradient mass (bars) against the class's share of the
  rollouts (black ticks: what every mode would give if each rollout weighed the same), with the class's failure
  fraction under its label (verl PR #7580: "N=10 trajectories are 13% of trajectories but 34% of the gradient, 76% of
  them failures");
* middle: each mode's solve-rate gap (by trajectory − what its objective sees);
* right: each mode's effective sample size of the row weights (÷ rows) and the cosine between its weighted and the
  unweighted row advantages (the PR: ESS 53–60%, cosine 0.73–0.75 under 1/N).

Made without pyplot, like every figure here. Notebook: ``notebooks/06_weighting_proposals.ipynb``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

__all__ = ["PROPOSALS", "plot_proposals"]

# The field's answers to a trajectory split into N rows (catalogue names), in the order the figure draws them.
PROPOSALS = ("seq-mean-token-mean", "session_equal", "partition_preserving", "rollout_mean", "per_rollout_mean:rows")


def plot_proposals(table: pd.DataFrame, *, modes: Sequence[str] = PROPOSALS, title: str | None = None) -> Figure:
    """The figure (module docstring) for ``modes`` of ``table`` (a weighting_diagnostics result of one batch)."""
    missing = [m for m in modes if m not in set(table["mode"])]
    if missing:
        raise ValueError(f"the table has no rows for {missing}: compute weighting_diagnostics with those modes")
    influence = table.attrs.get("influence")
    if influence is None or not set(modes) <= set(influence["mode"]):
        raise ValueError("the table carries no influence by class for these modes (attrs['influence']): use a batch")
    rows = table.set_index("mode").loc[list(modes)]
    colours = [colormaps["tab10"](i) for i in range(len(modes))]
    fig = Figure(figsize=(13, 4.4), layout="constrained")
    left, middle, right = fig.subplots(1, 3, width_ratios=(2.2, 1, 1.3))

    classes = list(dict.fromkeys(influence["rows_per_rollout"]))
    width = 0.8 / len(modes)
    first = influence[influence["mode"] == modes[0]].set_index("rows_per_rollout").loc[classes]
    for i, (mode, colour) in enumerate(zip(modes, colours, strict=True)):
        part = influence[influence["mode"] == mode].set_index("rows_per_rollout").loc[classes]
        x = np.arange(len(classes)) + (i - (len(modes) - 1) / 2) * width
        left.bar(x, part["gradient_share"], width, color=colour, label=mode)
    ticks = np.arange(len(classes))
    left.hlines(first["rollout_share"], ticks - 0.42, ticks + 0.42, colors="black", lw=2, label="share of rollouts")
    failed = first["failure_fraction"]
    labels = [f"{k} row{'' if k == '1' else 's'}\n{f:.0%} failed" for k, f in zip(classes, failed, strict=True)]
    left.set_xticks(ticks, labels)
    left.set_ylabel("share of the gradient mass")
    left.set_title("Influence by rows per rollout", fontsize=11)
    left.legend(fontsize="small", ncols=2)

    y = np.arange(len(modes))
    middle.barh(y, rows["gap"], color=colours)
    middle.axvline(0.0, color="0.4", lw=0.8)
    middle.set_yticks(y, modes)
    middle.invert_yaxis()
    middle.set_xlabel("solve by trajectory − by row")
    middle.set_title(f"Gap (by trajectory {rows['solve_by_trajectory'].iloc[0]:.2f})", fontsize=11)

    right.barh(y - 0.2, rows["ess_fraction"], 0.4, color=colours, label="ESS ÷ rows")
    right.barh(y + 0.2, rows["adv_cosine"], 0.4, color=colours, alpha=0.45, hatch="//", label="cos(adv_w, adv_u)")
    right.set_yticks(y, [""] * len(modes))
    right.invert_yaxis()
    right.set_xlim(0, 1.05)
    right.set_title("Effective sample size and cosine", fontsize=11)
    right.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2)
    shared = rows.iloc[0]
    fig.suptitle(
        title
        or f"{int(shared['trajectories'])} rollouts, {int(shared['rows'])} rows; rows per solved / failed rollout "
        f"{shared['mean_rows_solved']:.2f} / {shared['mean_rows_failed']:.2f}",
        fontsize="medium",
    )
    return fig
