"""A run's weighting diagnostics over its steps: the gap, the advantage cosine and the ESS of every mode, per step.

:func:`plot_steps` draws :func:`agl_lab.weighting_diagnostics`'s ``by_step=True`` table: one panel per column, a line
per mode. Modes whose values are equal in every panel at every step (``token-mean``, TRL's ``bnpo`` and ``dapo``; the
``per_rollout_mean`` variants; …) share one line and one colour, labelled with all their names, so eighteen modes stay
readable; a mode whose column the source cannot give (no token counts: ``missing``) has no line there, and a note
under the panels names the modes without any.
The influence by rows-per-rollout class of the whole run is :func:`agl_lab.lab.diagnostics_figures.plot_proposals`
on the whole-run table (a class for every row count the run has). Made without pyplot, like every figure here.
Notebook: ``notebooks/06_weighting_proposals.ipynb``; ``agl-lab weighting RUN --out DIR`` saves both.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["STEP_PANELS", "plot_steps"]

# column -> (panel title, the field's figure for it: verl PR #7580's runs)
STEP_PANELS = {
    "gap": ("Gap: solve by trajectory − by row", "the PR: +0.105 to +0.138 unweighted"),
    "adv_cosine": ("Cosine of weighted and unweighted advantages", "the PR: 0.73–0.75 under 1/N"),
    "ess_fraction": ("Effective sample size ÷ rows", "the PR: 0.53–0.60 under 1/N"),
}


def plot_steps(steps: pd.DataFrame, *, modes: Sequence[str] | None = None, title: str | None = None) -> Figure:
    """The three panels (module docstring) for ``modes`` (default: every mode of ``steps``) of a by-step table."""
    modes = list(dict.fromkeys(steps["mode"])) if modes is None else list(modes)
    absent = [m for m in modes if m not in set(steps["mode"])]
    if absent:
        raise ValueError(f"the table has no steps for {absent}: compute weighting_diagnostics with those modes")
    wide = {c: _wide(steps, c) for c in STEP_PANELS}
    x = wide["gap"].index.to_numpy(dtype=np.int64)
    fig = Figure(figsize=(14, 4.4), layout="constrained")
    axes = fig.subplots(1, len(STEP_PANELS), sharex=True)
    groups = _same_series(wide, modes)
    for ax, (column, (panel, reference)) in zip(axes, STEP_PANELS.items(), strict=True):
        for i, names in enumerate(groups):
            values = wide[column][names[0]].to_numpy(dtype=np.float64)
            if not np.isnan(values).all():
                ax.plot(
                    x,
                    values,
                    marker="o" if len(x) < 12 else None,
                    ms=3,
                    lw=1.4,
                    color=colormaps["tab20"](i % 20),
                    label=" = ".join(names),
                )
        if column == "gap":
            ax.axhline(0.0, color="0.4", lw=0.8)
        ax.set_title(f"{panel}\n{reference}", fontsize=9)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = [], []
    for ax in axes:  # each group once, in the groups' order
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    fig.legend(handles, labels, loc="outside right", fontsize="x-small")
    empty = [m for m in modes if all(wide[c][m].isna().all() for c in STEP_PANELS)]
    missing = sorted({v for v in steps.get("missing", pd.Series(dtype=str)).fillna("") for v in v.split(",") if v})
    if empty:
        note = f"No values for {', '.join(empty)}" + (f": the source lacks {', '.join(missing)}." if missing else ".")
        fig.supxlabel("\n".join(textwrap.wrap(note, 180)), fontsize="x-small", ha="left", x=0.01)
    shared = steps.groupby("step", dropna=False)[["trajectories", "rows"]].first()
    fig.suptitle(
        title
        or f"{len(x)} step{'s' * (len(x) != 1)}, {int(shared['trajectories'].sum())} trajectories, "
        f"{int(shared['rows'].sum())} rows: every mode on the same rollouts",
        fontsize="medium",
    )
    return fig


def _wide(steps: pd.DataFrame, column: str) -> pd.DataFrame:
    """(steps, modes) values of ``column``; a lone batch without a step number is step 0."""
    return steps.assign(step=steps["step"].fillna(0)).pivot(index="step", columns="mode", values=column).sort_index()


def _same_series(wide: dict[str, pd.DataFrame], modes: list[str]) -> list[list[str]]:
    """Modes grouped by equal values in every panel at every step (to 1e-9): one line per group, in mode order."""
    groups: dict[bytes, list[str]] = {}
    for mode in modes:
        values = np.concatenate([frame[mode].to_numpy(dtype=np.float64) for frame in wide.values()])
        groups.setdefault((np.round(values, 9) + 0.0).tobytes(), []).append(mode)  # + 0.0: -0.0 is 0.0
    return list(groups.values())
