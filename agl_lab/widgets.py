"""Widget panels (ipywidgets 8) for the notebooks: compute and render here, wiring only in the notebook.

:class:`WeightingPanel` puts the synthetic generator's knobs (or a loaded batch), the three settings
(rollout-level advantage, the loss mode with its divisor, the update cap), the PPO mini-batch size and the
seed next to four live figures from :mod:`agl_lab.plots`. Every change recomputes through
:func:`agl_lab.weighting.analyze_weighting` (only the stages the change touches) and redraws, in place, only
the figures whose inputs changed. Bounded boxes and sliders
clamp out-of-range values where you can see them; a combination the generator refuses (e.g. min tokens
above max tokens) is reported in red and the last valid figure stays. Notebook:
``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import io
import threading
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import ipywidgets as w
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from omegaconf import DictConfig, OmegaConf
from verl import DataProto

from agl_lab import plots
from agl_lab.config import compose_config
from agl_lab.handoff import format_dotlist
from agl_lab.pipeline import mini_batch_rows
from agl_lab.rows import group_rows
from agl_lab.synthetic import CALL_PATTERNS, SyntheticKnobs, knob_range, synthetic_rows
from agl_lab.weighting import MODES, Weighting, analyze_weighting, mode_from_config, mode_settings

__all__ = ["CAP_CHOICES", "MODE_CHOICES", "TrainingPanel", "WeightingPanel"]

MODE_CHOICES = (
    ("per_rollout_mean, ÷ rows (Agent Lightning v1.0)", "per_rollout_mean:rows"),
    ("per_rollout_mean, ÷ rollouts (Eq. 16)", "per_rollout_mean:rollouts"),
    ("verl token-mean", "token-mean"),
    ("verl seq-mean-token-sum", "seq-mean-token-sum"),
    ("verl seq-mean-token-mean", "seq-mean-token-mean"),
    ("verl seq-mean-token-sum-norm", "seq-mean-token-sum-norm"),
)
CAP_CHOICES = ("none", *range(1, 17))  # agentlightning.max_ppo_update_times; "none" = null (no cap)
_GENERATOR_KNOBS = (
    "n_prompts",
    "rollouts_per_prompt",
    "calls",
    "min_calls",
    "max_calls",
    "continue_prob",
    "fail_extra_calls",
    "min_tokens",
    "max_tokens",
    "success_prob",
    "partial_credit",
    "break_prob",
    "level",
)
_WIDE = {"description_width": "initial"}


class WeightingPanel:
    """The live weighting panel. Display it as a notebook cell's result; read ``result`` for the current tables.

    ``knobs``: the synthetic batch to start from; or ``rows``: a loaded batch (the generator's knobs are then
    hidden). ``cfg``: a composed config to start the settings from (estimator, cap, mini-batch, loss mode); by
    default GRPO with mini-batches of a quarter of the prompts and no cap. ``controls`` maps each knob and setting
    to its widget; after setting values in code, :meth:`recompute` returns the new :class:`Weighting`.
    """

    def __init__(
        self,
        *,
        knobs: SyntheticKnobs | None = None,
        rows: DataProto | None = None,
        cfg: DictConfig | None = None,
        dpi: int = 72,
    ) -> None:
        self.knobs = knobs or SyntheticKnobs()
        self.rows_given = rows
        self.rollouts_per_prompt = _rollouts_per_prompt(rows) if rows is not None else self.knobs.rollouts_per_prompt
        if cfg is None:
            prompts = self.knobs.n_prompts if rows is None else max(1, len(rows) // self.rollouts_per_prompt)
            cfg = compose_config(
                overrides={
                    "algorithm": {"adv_estimator": "grpo"},
                    "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": max(1, prompts // 4)}},
                }
            )
        self.cfg = copy.deepcopy(cfg)  # the panel edits its own copy, never the caller's
        self.dpi = dpi
        self.result: Weighting | None = None
        self.metrics: dict[str, Any] = {}
        self.error: str | None = None
        self.warning: str | None = None
        self._rows_cache: tuple[SyntheticKnobs, DataProto] | None = None
        self._analysis_cache: dict[tuple, tuple[Weighting, dict[str, Any]]] = {}

        self.controls = self._settings_controls(cfg)
        if rows is None:
            self.controls.update(self._generator_controls(self.knobs))
        self.status = w.HTML()
        self.summary = w.HTML()
        # Four figures, not one: a change redraws only those whose inputs changed (a new loss mode leaves the
        # histogram and the cap figure as they are), which keeps a redraw within the panel's time budget.
        self.figures = {
            "weights": _LiveFigure((12.5, 4.4), dpi=dpi, width="100%"),
            "rows": _LiveFigure((5.2, 3.9), dpi=dpi, width="33%"),
            "mass": _LiveFigure((5.2, 3.9), dpi=dpi, width="33%"),
            "cap": _LiveFigure((5.2, 3.9), dpi=dpi, width="33%"),
        }
        self._selection: tuple = ()
        self._highlighted: str | None = None
        self.widget = self._layout()
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    def recompute(self) -> Weighting:
        """Read every widget, regenerate or reanalyse what changed, redraw; returns the new analysis.

        Raises ValueError for values the generator or the analysis refuses (on a widget change the panel shows
        it in red instead).
        """
        self._analyze()
        self.redraw()
        return self.result

    def update(self) -> None:
        """What every widget change runs: :meth:`recompute`, with refused values reported instead of raised."""
        try:
            self._analyze()
        except ValueError as exc:
            self.error = str(exc)
            self.status.value = f"<b style='color:#b00020'>Refused:</b> {html.escape(self.error)} (figure unchanged)"
            return
        self.error = None
        self.redraw()
        note = f"<span style='color:#a05a00'>⚠ {html.escape(self.warning)}</span>" if self.warning else ""
        rows_per_mb = mini_batch_rows(self.cfg)
        self.status.value = f"PPO mini-batch = ppo_mini_batch_size × rollout.n = {rows_per_mb} rows. {note}"

    def _analyze(self) -> None:
        rows = self._rows()
        settings = self.settings()
        self.cfg.actor_rollout_ref.rollout.n = self._n()
        self.cfg.actor_rollout_ref.actor.ppo_mini_batch_size = settings["ppo_mini_batch_size"]
        self.cfg.agentlightning.max_ppo_update_times = settings["max_ppo_update_times"]
        self.cfg.lab.seed = settings["seed"]
        key = (id(rows), self._n(), settings["ppo_mini_batch_size"], settings["max_ppo_update_times"], settings["seed"])
        level = settings["rollout_level"]
        if key != self._selection:
            self._analysis_cache.clear()  # another batch or selection: the cached analyses are stale
            self._selection = key
        if (key, level) not in self._analysis_cache:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._analysis_cache[(key, level)] = analyze_weighting(rows, self.cfg, rollout_levels=(level,))
            self.warning = "; ".join(str(c.message) for c in caught) or None
        self.result, self.metrics = self._analysis_cache[(key, level)]

    def knobs_from_widgets(self) -> SyntheticKnobs:
        """The generator knobs the widgets show (ValueError naming the knob if the combination is refused)."""
        values = {name: self.controls[name].value for name in _GENERATOR_KNOBS if name in self.controls}
        return dataclasses.replace(self.knobs, **values, seed=self.controls["seed"].value)

    def settings(self) -> dict[str, Any]:
        """The three settings, the mini-batch size and the seed as the widgets show them."""
        cap = self.controls["cap"].value
        return {
            "rollout_level": bool(self.controls["rollout_level"].value),
            "mode": self.controls["mode"].value,
            "max_ppo_update_times": None if cap == "none" else int(cap),
            "ppo_mini_batch_size": int(self.controls["ppo_mini_batch_size"].value),
            "seed": int(self.controls["seed"].value),
        }

    def dotlist(self) -> list[str]:
        """The shown settings as Hydra overrides for Agent Lightning's trainer (or ``agl-lab check``)."""
        s = self.settings()
        keys = {
            **mode_settings(s["mode"]),
            "algorithm.enable_rollout_level_advantage": str(s["rollout_level"]).lower(),
            "agentlightning.max_ppo_update_times": "null"
            if s["max_ppo_update_times"] is None
            else s["max_ppo_update_times"],
            "actor_rollout_ref.actor.ppo_mini_batch_size": s["ppo_mini_batch_size"],
            "actor_rollout_ref.rollout.n": self._n(),
        }
        return [f"{key}={value}" for key, value in keys.items()]

    def redraw(self) -> list[str]:
        """Redraw the figures whose inputs changed since they were last drawn; returns their names.

        A figure already on screen is updated in place (``plots.update_*``: same artists, new data, kept layout),
        half the cost of drawing anew; it is drawn anew only when its structure changed (other row classes, say).
        """
        result, s = self.result, self.settings()
        mode, level, selection = s["mode"], s["rollout_level"], self._selection
        figures, drawn = self.figures, []
        weights = figures["weights"]
        if weights.drawn_for == (selection,) and self._highlighted != mode:  # same bars: move the shading only
            weights.edit((selection,), partial(plots.highlight_mode, mode=mode, modes=MODES))
            drawn.append("weights")
        self._highlighted = mode
        rollouts, rows = result.rollouts, result.rows
        plan = {  # name: (inputs, draw anew, update in place)
            "weights": (
                (selection,),
                partial(plots.rollout_weight_by_mode, rollouts, modes=MODES, highlight=mode),
                partial(plots.update_rollout_weight_by_mode, rollouts=rollouts, modes=MODES, highlight=mode),
            ),
            "rows": ((selection[0],), partial(plots.rows_per_rollout_histogram, rows), None),
            "mass": (
                (selection, mode, level),
                partial(plots.mass_vs_rows, rollouts, mode=mode, rollout_level=level),
                partial(plots.update_mass_vs_rows, rollouts=rollouts, mode=mode, rollout_level=level),
            ),
            "cap": ((selection,), partial(plots.cap_drops, rows), partial(plots.update_cap_drops, rows=rows)),
        }
        for name, (inputs, draw, update) in plan.items():
            figure = figures[name]
            if figure.drawn_for == inputs:
                continue
            if not (update is not None and figure.drawn_for is not None and figure.edit(inputs, update)):
                figure.render(inputs, draw)
            drawn.append(name)
        self.summary.value = _summary_html(result, s, self.dotlist())
        return drawn

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _on_change(self, _change: dict) -> None:
        self.update()

    def _rows(self) -> DataProto:
        if self.rows_given is not None:
            return self.rows_given
        knobs = self.knobs_from_widgets()
        if self._rows_cache is None or self._rows_cache[0] != knobs:
            self._rows_cache = (knobs, synthetic_rows(knobs)[0])
        return self._rows_cache[1]

    def _n(self) -> int:
        """rollout.n: the generator's rollouts per prompt, or what the loaded batch has."""
        if self.rows_given is None:
            return int(self.controls["rollouts_per_prompt"].value)
        return self.rollouts_per_prompt

    def _settings_controls(self, cfg: DictConfig) -> dict[str, w.ValueWidget]:
        cap = cfg.agentlightning.max_ppo_update_times
        return {
            "rollout_level": w.Checkbox(
                value=bool(cfg.algorithm.enable_rollout_level_advantage),
                description="rollout-level advantage",
                indent=False,
            ),
            "mode": w.Dropdown(options=MODE_CHOICES, value=_initial_mode(cfg), description="loss mode", style=_WIDE),
            "cap": w.SelectionSlider(
                options=CAP_CHOICES,
                value="none" if cap is None else min(int(cap), CAP_CHOICES[-1]),
                description="max_ppo_update_times",
                continuous_update=False,
                style=_WIDE,
            ),
            "ppo_mini_batch_size": w.BoundedIntText(
                value=int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size),
                min=1,
                max=100_000,
                description="ppo_mini_batch_size (prompts)",
                style=_WIDE,
            ),
            "seed": w.BoundedIntText(value=int(cfg.lab.seed), min=0, max=2**31 - 1, description="seed", style=_WIDE),
        }

    def _generator_controls(self, knobs: SyntheticKnobs) -> dict[str, w.ValueWidget]:
        controls: dict[str, w.ValueWidget] = {
            "calls": w.Dropdown(options=CALL_PATTERNS, value=knobs.calls, description="calls per rollout", style=_WIDE),
            "level": w.ToggleButtons(
                options=("trajectory", "transition"), value=knobs.level, style={"button_width": "90px"}
            ),
        }
        for name in (
            "n_prompts",
            "rollouts_per_prompt",
            "min_calls",
            "max_calls",
            "fail_extra_calls",
            "min_tokens",
            "max_tokens",
        ):
            low, high = knob_range(name)
            controls[name] = w.BoundedIntText(
                value=getattr(knobs, name), min=low, max=high, description=name.replace("_", " "), style=_WIDE
            )
        for name in ("success_prob", "partial_credit", "break_prob", "continue_prob"):
            low, high = knob_range(name)
            controls[name] = w.FloatSlider(
                value=getattr(knobs, name),
                min=low,
                max=high,
                step=0.05,
                description=name.replace("_", " "),
                continuous_update=False,
                style=_WIDE,
            )
        return controls

    def _layout(self) -> w.Widget:
        c = self.controls
        settings = w.VBox(
            [w.HTML("<b>Settings</b>"), c["rollout_level"], c["mode"], c["cap"], c["ppo_mini_batch_size"], c["seed"]]
        )
        columns = [settings]
        if self.rows_given is None:
            columns.insert(
                0,
                w.VBox(
                    [
                        w.HTML("<b>Synthetic batch</b>"),
                        c["n_prompts"],
                        c["rollouts_per_prompt"],
                        c["success_prob"],
                        c["partial_credit"],
                        c["calls"],
                        w.HBox([c["min_calls"], c["max_calls"]]),
                        c["fail_extra_calls"],
                        c["continue_prob"],
                        w.HBox([c["min_tokens"], c["max_tokens"]]),
                        c["break_prob"],
                        c["level"],
                    ]
                ),
            )
        small = w.HBox([self.figures[name].image for name in ("rows", "mass", "cap")])
        return w.VBox(
            [
                w.HBox(columns, layout=w.Layout(gap="24px")),
                self.status,
                self.summary,
                self.figures["weights"].image,
                small,
            ]
        )


class TrainingPanel:
    """Short training runs from a notebook: the settings, task knobs, steps and seed; Run and Stop; live figures.

    Training runs in a background thread (a cell that blocks cannot receive a Stop click), calling
    :func:`agl_lab.train` with a ``threading.Event`` that Stop sets; figures are redrawn from the history at most
    every ``redraw_s`` seconds and once at the end. ``cfg``: the config to start from (default
    ``agl_lab.short_run_config()``); the panel edits its own copy. In code: ``start()``, ``stop()``, ``wait()``
    (join the run: for headless notebooks, so no thread outlives the kernel), ``result`` (the last
    :class:`agl_lab.trainer.TrainResult`), ``error`` (the last run's error text, or None).
    """

    def __init__(self, cfg: DictConfig | None = None, *, dpi: int = 80, redraw_s: float = 1.0) -> None:
        from agl_lab.trainer import short_run_config

        self.cfg = copy.deepcopy(cfg) if cfg is not None else short_run_config()
        self.redraw_s = redraw_s
        self.result = None
        self.error: str | None = None
        self.history = pd.DataFrame()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_draw = 0.0
        self.controls = self._controls(self.cfg)
        self.run_button = w.Button(description="Run", button_style="success", icon="play")
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.run_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        self.status = w.HTML("Set the settings and press <b>Run</b>.")
        self.links = w.HTML()
        self.figures = {
            "success": _LiveFigure((5.4, 3.8), dpi=dpi, width="33%"),
            "rows": _LiveFigure((5.4, 3.8), dpi=dpi, width="33%"),
            "drops": _LiveFigure((5.4, 3.8), dpi=dpi, width="33%"),
        }
        self.widget = self._layout()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def settings(self) -> dict[str, Any]:
        """The config keys the widgets set, with typed values (``lab.run_dir`` is chosen per run)."""
        c = self.controls
        cap = c["cap"].value
        return {
            "algorithm.enable_rollout_level_advantage": bool(c["rollout_level"].value),
            **mode_settings(c["mode"].value),
            "agentlightning.max_ppo_update_times": None if cap == "none" else int(cap),
            "actor_rollout_ref.actor.ppo_mini_batch_size": int(c["ppo_mini_batch_size"].value),
            "agentlightning.trace_aggregator.level": c["level"].value,
            "lab.task_size": int(c["task_size"].value),
            "lab.max_turns": int(c["max_turns"].value),
            "lab.rewrite_prob": float(c["rewrite_prob"].value),
            "trainer.total_training_steps": int(c["steps"].value),
            "lab.seed": int(c["seed"].value),
        }

    def config(self) -> DictConfig:
        """The panel's config with the widgets' values applied."""
        cfg = copy.deepcopy(self.cfg)
        for key, value in self.settings().items():
            OmegaConf.update(cfg, key, value, merge=False)
        return cfg

    def start(self) -> None:
        """Start a run with the shown settings in a background thread (what Run does); ignored while one runs."""
        if self.running:
            return
        from agl_lab.runs import create_run_dir

        cfg = self.config()
        cfg.lab.run_dir = None
        cfg.lab.run_dir = str(create_run_dir(cfg))  # chosen now, so the panel can show it from the first step
        self.result, self.error, self.history = None, None, pd.DataFrame()
        self._stop_event.clear()
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.links.value = f"Run directory: <code>{html.escape(cfg.lab.run_dir)}</code>"
        self.status.value = f"Starting ({html.escape(' '.join(format_dotlist(self.settings())))}) …"
        self._thread = threading.Thread(target=self._train, args=(cfg,), name="agl-lab-training", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the run to stop after its current step (what Stop does)."""
        self._stop_event.set()
        self.status.value += " — stopping after this step …"

    def wait(self, timeout: float | None = None):
        """Block until the run ends (or ``timeout`` seconds pass); return its result (None if it failed)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.result

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _train(self, cfg: DictConfig) -> None:
        from agl_lab.trainer import train

        steps = int(cfg.trainer.total_training_steps)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a skipped step or a failed tracker shows in the status instead
                self.result = train(cfg, stop_event=self._stop_event, on_step=self._on_step, progress=False)
        except Exception as exc:  # noqa: BLE001 — shown in the panel; the notebook stays usable
            self.error = f"{type(exc).__name__}: {exc}"
            self.status.value = f"<b style='color:#b00020'>Run failed:</b> {html.escape(self.error)}"
        else:
            self.history = self.result.history
            if len(self.history):  # a run stopped before its first step has nothing to draw
                self._redraw()
            state = "stopped" if self.result.stopped else "finished"
            self.status.value = f"<b>Run {state}</b> after {len(self.history)} of {steps} steps. " + _last_step(
                self.history
            )
            self.links.value = _links_html(self.result)
        finally:
            self.run_button.disabled, self.stop_button.disabled = False, True

    def _on_step(self, record: dict[str, Any]) -> None:
        self.history = pd.concat([self.history, pd.DataFrame([record])], ignore_index=True)
        steps = int(self.controls["steps"].value)
        self.status.value = f"Step {record['step']} of {steps}. " + _last_step(self.history)
        if time.monotonic() - self._last_draw >= self.redraw_s:
            self._redraw()

    def _redraw(self) -> None:
        history, step = self.history, int(self.history["step"].iloc[-1])
        self.figures["success"].render((step,), lambda ax: plots.success_curve(history, ax=ax))
        self.figures["rows"].render(
            (step,), lambda ax: plots.n_rows_vs_n_rollouts(plots.aggregated_counts(history), ax=ax)
        )
        self.figures["drops"].render((step,), lambda ax: plots.step_rows(history, ax=ax))
        self._last_draw = time.monotonic()

    def _controls(self, cfg: DictConfig) -> dict[str, w.ValueWidget]:
        # the settings widgets are the weighting panel's (rollout-level, loss mode, cap, mini-batch, seed); its
        # builder reads only cfg
        controls = WeightingPanel._settings_controls(self, cfg)
        lab = cfg.lab
        return {
            **controls,
            "level": w.ToggleButtons(
                options=("trajectory", "transition"),
                value=cfg.agentlightning.trace_aggregator.level,
                style={"button_width": "90px"},
            ),
            "task_size": w.BoundedIntText(value=lab.task_size, min=2, max=64, description="locks", style=_WIDE),
            "max_turns": w.BoundedIntText(value=lab.max_turns, min=1, max=16, description="max turns", style=_WIDE),
            "rewrite_prob": w.FloatSlider(
                value=lab.rewrite_prob,
                min=0.0,
                max=1.0,
                step=0.05,
                description="context rewrite prob",
                continuous_update=False,
                style=_WIDE,
            ),
            "steps": w.BoundedIntText(
                value=int(cfg.trainer.total_training_steps or 40), min=1, max=100_000, description="steps", style=_WIDE
            ),
        }

    def _layout(self) -> w.Widget:
        c = self.controls
        settings = w.VBox(
            [w.HTML("<b>Settings</b>"), c["rollout_level"], c["mode"], c["cap"], c["ppo_mini_batch_size"]]
        )
        task = w.VBox([w.HTML("<b>Task</b>"), c["level"], c["task_size"], c["max_turns"], c["rewrite_prob"]])
        run = w.VBox([w.HTML("<b>Run</b>"), c["steps"], c["seed"], w.HBox([self.run_button, self.stop_button])])
        figures = w.HBox([self.figures[name].image for name in ("success", "rows", "drops")])
        return w.VBox([w.HBox([settings, task, run], layout=w.Layout(gap="24px")), self.status, self.links, figures])


class _LiveFigure:
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
        self.canvas.draw()
        buffer = io.BytesIO()
        # zlib level 1: a quarter faster than the default 6 for a few percent more bytes
        imsave(buffer, np.asarray(self.canvas.buffer_rgba()), format="png", pil_kwargs={"compress_level": 1})
        self.image.value = buffer.getvalue()
        self.drawn_for = inputs


def _initial_mode(cfg: DictConfig) -> str:
    """The config's loss mode if the panel offers it (token-sum, say, it does not), else v1.0's."""
    mode = mode_from_config(cfg)
    return mode if mode in dict(MODE_CHOICES).values() else MODE_CHOICES[0][1]


def _rollouts_per_prompt(rows: DataProto) -> int:
    """rollout.n of a loaded batch: the most common number of rollouts per dataset item (1 without data ids)."""
    if "data_id_list" not in rows.non_tensor_batch:
        return 1
    frame = pd.DataFrame(
        {"uid": rows.non_tensor_batch["data_id_list"], "rollout": rows.non_tensor_batch["rollout_id_list"]}
    )
    counts = frame.drop_duplicates().groupby("uid", sort=False).size().to_numpy()
    values, freq = np.unique(counts, return_counts=True)
    return int(values[np.argmax(freq)])


def _summary_html(result: Weighting, s: dict[str, Any], dotlist: list[str]) -> str:
    totals = result.totals
    line = totals[(totals["mode"] == s["mode"]) & (totals["rollout_level"] == s["rollout_level"])].iloc[0]
    n_rows = len(result.rows)
    n_rollouts = group_rows(result.rows["rollout_id"].to_numpy(), field="rollout_id").n_groups
    ratio = "–" if np.isnan(line["weight_ratio"]) else f"{line['weight_ratio']:.3g}×"
    return (
        f"<b>{html.escape(s['mode'])}</b>: batch total loss scale Σ weights = <b>{line['total_weight']:.4g}</b>; "
        f"heaviest / lightest rollout = <b>{ratio}</b>; "
        f"{int(line['rows_kept'])} of {n_rows} rows and {int(line['rollouts_kept'])} of {n_rollouts} rollouts trained "
        f"in {int(line['mini_batches'])} mini-batches.<br><small>As config overrides: <code>"
        + html.escape(" ".join(dotlist))
        + "</code></small>"
    )


def _last_step(history: pd.DataFrame) -> str:
    if not len(history):
        return ""
    last = history.iloc[-1]
    return (
        f"success {last['lab/success_rate']:.2f}, {int(last['training/n_sample'])} rows from "
        f"{int(last['training/n_rollouts'])} rollouts, {int(last['training/n_sample_trained'])} trained"
    )


def _links_html(result) -> str:
    """The run directory and where its W&B run is (a link when online, the folder and `wandb sync` when offline)."""
    parts = [f"Run directory: <code>{html.escape(str(result.run_dir))}</code>"]
    where = result.wandb_run
    if where and where.startswith("http"):
        parts.append(f'W&B run: <a href="{html.escape(where)}" target="_blank">{html.escape(where)}</a>')
    elif where:
        parts.append(f"W&B run (offline): <code>{html.escape(where)}</code> — upload with <code>wandb sync</code>")
    return "<br>".join(parts)
