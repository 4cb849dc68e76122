"""Building blocks of the notebooks' widget panels (ipywidgets 8): the shared settings controls and live figures.

The panels themselves: :class:`agl_lab.weighting_panel.WeightingPanel` (notebook 01),
:class:`agl_lab.config_panel.ConfigPanel` (notebook 02) and :class:`agl_lab.training_panel.TrainingPanel`
(notebook 03). Compute and render happen in the package; notebooks only wire and display.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import ipywidgets as w
import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from omegaconf import DictConfig

from agl_lab.weighting import mode_from_config

__all__ = ["CAP_CHOICES", "MODE_CHOICES", "WIDE", "LiveFigure", "initial_mode", "settings_controls"]

MODE_CHOICES = (
    ("per_rollout_mean, ÷ rows (Agent Lightning v1.0)", "per_rollout_mean:rows"),
    ("per_rollout_mean, ÷ rollouts (Eq. 16)", "per_rollout_mean:rollouts"),
    ("verl token-mean", "token-mean"),
    ("verl seq-mean-token-sum", "seq-mean-token-sum"),
    ("verl seq-mean-token-mean", "seq-mean-token-mean"),
    ("verl seq-mean-token-sum-norm", "seq-mean-token-sum-norm"),
)
CAP_CHOICES = ("none", *range(1, 17))  # agentlightning.max_ppo_update_times; "none" = null (no cap)
WIDE = {"description_width": "initial"}


def settings_controls(cfg: DictConfig) -> dict[str, w.ValueWidget]:
    """The settings both panels share, started from ``cfg``: rollout-level advantage, loss mode (with the divisor),
    the update cap ("none" = null), the PPO mini-batch size (prompts) and the seed."""
    cap = cfg.agentlightning.max_ppo_update_times
    return {
        "rollout_level": w.Checkbox(
            value=bool(cfg.algorithm.enable_rollout_level_advantage),
            description="rollout-level advantage",
            indent=False,
        ),
        "mode": w.Dropdown(
            options=MODE_CHOICES,
            value=initial_mode(cfg),
            description="loss mode",
            style=WIDE,
            layout=w.Layout(width="380px"),  # the longest choice fits, so a label is never cut
        ),
        "cap": w.SelectionSlider(
            options=CAP_CHOICES,
            value="none" if cap is None else min(int(cap), CAP_CHOICES[-1]),
            description="max_ppo_update_times",
            continuous_update=False,
            style=WIDE,
        ),
        "ppo_mini_batch_size": w.BoundedIntText(
            value=int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size),
            min=1,
            max=100_000,
            description="ppo_mini_batch_size (prompts)",
            style=WIDE,
        ),
        "seed": w.BoundedIntText(value=int(cfg.lab.seed), min=0, max=2**31 - 1, description="seed", style=WIDE),
    }


def initial_mode(cfg: DictConfig) -> str:
    """The config's loss mode if the panel offers it (token-sum, say, it does not), else v1.0's."""
    mode = mode_from_config(cfg)
    return mode if mode in dict(MODE_CHOICES).values() else MODE_CHOICES[0][1]


class LiveFigure:
    """A figure shown through an Image widget and redrawn into the same Figure and widget when its inputs change."""

    def __init__(self, size: tuple[float, float], *, dpi: int, width: str) -> None:
        self.figure = Figure(figsize=size, dpi=dpi, layout="constrained")
        self.canvas = FigureCanvasAgg(self.figure)
        self.ax = self.figure.add_subplot()
        self.image = w.Image(format="png", layout=w.Layout(width=width))
        self.drawn_for: tuple | None = None

    def render(self, inputs: tuple, draw: Callable[..., Any]) -> bool:
        """Draw anew with ``draw(ax=...)`` unless ``inputs`` equal those of the last drawing; True if it drew."""
        if inputs == self.drawn_for:
            return False
        self.ax.clear()
        draw(ax=self.ax)
        self._publish(inputs)
        return True

    def edit(self, inputs: tuple, change: Callable[[Axes], bool | None]) -> bool:
        """Apply ``change(ax)`` to what is drawn, keeping the layout (half the cost of a draw).

        ``change`` returns False to decline (nothing is published, and False is returned).
        """
        if change(self.ax) is False:
            return False
        self.figure.set_layout_engine("none")
        try:
            self._publish(inputs)
        finally:
            self.figure.set_layout_engine("constrained")
        return True

    def _publish(self, inputs: tuple) -> None:
        # Unhinted glyphs: a quarter less drawing time (text dominates it), and no visible change at screen dpi.
        with rc_context({"text.hinting": "none"}):
            self.canvas.draw()
        buffer = io.BytesIO()
        # zlib level 1: a quarter faster than the default 6 for a few percent more bytes
        imsave(buffer, np.asarray(self.canvas.buffer_rgba()), format="png", pil_kwargs={"compress_level": 1})
        self.image.value = buffer.getvalue()
        self.drawn_for = inputs
