"""Short training runs from a notebook (notebook 03): the model and task, settings, task knobs, Run and Stop, the
step's progress, live curves and the rollouts' transcripts.

Training runs in a background thread, because a cell that blocks cannot receive a Stop click (which the run takes
between two sampled tokens); the curves (:class:`agl_lab.ui.curve_view.CurveView`: plotly, hover and zoom,
smoothing, other runs overlaid, copy as command) move to new data as steps finish, and the transcripts
(:class:`agl_lab.ui.transcript_view.TranscriptView`) show each finished step's rollouts as text. Choosing a pretrained
model starts the panel from the short-run preset with the pretrained one (``conf/pretrained.yaml``). A run whose
three settings are one of the demo's is drawn under that setting's name
and colour (``both_on`` blue, as in every other figure). The curves' smoothing and overlaid runs are settings of the
run (``lab.curve_*``) like the others, so its ``config.yaml`` restores the whole panel. Notebook:
``notebooks/03_short_training_runs.ipynb``.
"""

from __future__ import annotations

import copy
import html
import threading
import time
import warnings
from typing import Any

import ipywidgets as w
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.lab_config import TASKS
from agl_lab.config.model_source import MODELS
from agl_lab.config.modes import trainable_modes
from agl_lab.config.task_rows import fitting_limits
from agl_lab.core.keys import MAX_TURNS, MODEL, REWRITE_PROB, SEED, STEPS, TASK, TASK_SIZE, TRACE_LEVEL
from agl_lab.curves.history import long_form
from agl_lab.ui.controls import WIDE, control_overrides, settings_controls
from agl_lab.ui.curve_view import CurveView
from agl_lab.ui.gc_pauses import freeze_loaded
from agl_lab.ui.run_command import train_command
from agl_lab.ui.run_status import demo_setting_name, last_step, links_html, shown_path
from agl_lab.ui.transcript_view import TranscriptView

__all__ = ["TrainingPanel"]


class TrainingPanel:
    """Short training runs from a notebook: the settings, task knobs, steps and seed; Run and Stop; live curves.

    Training runs in a background thread (a cell that blocks cannot receive a Stop click), calling
    :func:`agl_lab.train` with a ``threading.Event`` that Stop sets; the curves (``curves``, a
    :class:`agl_lab.ui.curve_view.CurveView`) are updated from the history at most every ``redraw_s`` seconds and
    once at the end; its Copy as command shows the ``agl-lab train`` line of the panel's settings, and Restore
    settings puts a finished run's back (:meth:`restore`). ``cfg``: the config to start from (default
    ``agl_lab.short_run_config()``); the panel edits its own copy. In code: ``start()``, ``stop()``, ``wait()``
    (join the run: for headless notebooks, so no thread outlives the kernel), ``result`` (the last
    :class:`agl_lab.training.trainer.TrainResult`), ``error`` (the last run's error text, or None).
    """

    def __init__(self, cfg: DictConfig | None = None, *, redraw_s: float = 1.0) -> None:
        from agl_lab.config.compose import short_run_config

        freeze_loaded()  # short GC pauses from here on (agl_lab.ui.gc_pauses)
        self.cfg = copy.deepcopy(cfg) if cfg is not None else short_run_config()
        if not isinstance(self.cfg.trainer.total_training_steps, int):
            raise ValueError(
                f"TrainingPanel needs {STEPS} (a number of steps): start from agl_lab.short_run_config(), which sets it"
            )
        self.redraw_s = redraw_s
        self.result = None
        self.error: str | None = None
        self.history = pd.DataFrame()
        self.setting = demo_setting_name(self.cfg)  # the name (and colour) the run's figures use
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._run_dir: str | None = None
        self._last_draw = 0.0
        self.controls = self._controls(self.cfg)
        self.run_button = w.Button(description="Run", button_style="success", icon="play")
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.run_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.stop())
        self.status = w.HTML("Set the settings and press <b>Run</b>.")
        self.progress = w.IntProgress(value=0, min=0, max=1, description="rollouts", layout=w.Layout(width="420px"))
        self.links = w.HTML()
        self.transcripts = TranscriptView()
        self.controls["model"].observe(lambda change: self._start_from(change["new"]), names="value")
        self.curves = CurveView(smoothing=self.cfg.lab.curve_smoothing, overlay=list(self.cfg.lab.curve_overlay),
                                command=lambda _: train_command(self.config()), on_restore=self.restore)  # fmt: skip
        self.widget = self._layout()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def settings(self) -> dict[str, Any]:
        """The config keys the widgets set, with typed values (``lab.run_dir`` is chosen per run).

        More turns than the config's row limits fit (``lab.max_turns``, ``level``) add the raised limits
        (:func:`agl_lab.config.task_rows.fitting_limits`), so the panel's rows are never cut for its own knobs.
        """
        return self._config_and_settings()[1]

    def config(self) -> DictConfig:
        """The panel's config with the widgets' values applied."""
        return self._config_and_settings()[0]

    def _config_and_settings(self) -> tuple[DictConfig, dict[str, Any]]:
        """:meth:`config` and :meth:`settings` from one copy of the config (a copy of verl's whole tree is most of
        what Run costs before the run starts)."""
        c = self.controls
        values = {
            **control_overrides(c),
            MODEL: c["model"].value,
            TASK: c["task"].value,
            TRACE_LEVEL: c["level"].value,
            TASK_SIZE: int(c["task_size"].value),
            MAX_TURNS: int(c["max_turns"].value),
            REWRITE_PROB: float(c["rewrite_prob"].value),
            STEPS: int(c["steps"].value),
            SEED: int(c["seed"].value),
            **self.curves.settings(),
        }
        cfg = self._applied(values)
        limits = fitting_limits(cfg)
        for key, value in limits.items():
            OmegaConf.update(cfg, key, value, merge=False)
        return cfg, {**values, **limits}

    def restore(self, cfg: DictConfig) -> None:
        """Set every control from ``cfg`` (a finished run's config): the settings, task knobs, steps and seed."""
        for name, control in self._controls(cfg).items():
            options = getattr(self.controls[name], "options", None)
            if options is None or control.value in [o[1] if isinstance(o, tuple) else o for o in options]:
                self.controls[name].value = control.value

    def _start_from(self, model: str) -> None:
        """Another model: the panel starts from the short-run preset composed for it (a pretrained model's sizes,
        task and LoRA: conf/pretrained.yaml), its controls set from that; the three settings stay as they are."""
        from agl_lab.config.compose import short_run_config

        kept = {name: self.controls[name].value for name in ("rollout_level", "mode", "max_ppo_update_times")}
        self.cfg = short_run_config(dotlist=[f"{MODEL}={model}"])
        self.restore(self.cfg)
        for name, value in kept.items():
            self.controls[name].value = value

    def _applied(self, values: dict[str, Any]) -> DictConfig:
        cfg = copy.deepcopy(self.cfg)
        for key, value in values.items():
            OmegaConf.update(cfg, key, value, merge=False)
        return cfg

    def start(self) -> None:
        """Start a run with the shown settings in a background thread (what Run does); ignored while one runs."""
        if self.running:
            return
        from agl_lab.training.runs import create_run_dir

        # the buttons answer the click first; the run's config (a copy of verl's whole tree, ~20 ms) comes after, and
        # a Stop clicked meanwhile waits in the kernel's queue until this returns
        self._stop_event.clear()
        self.run_button.disabled, self.stop_button.disabled = True, False
        try:
            cfg, settings = self._config_and_settings()
            cfg.lab.run_dir = None
            cfg.lab.run_dir = str(create_run_dir(cfg))  # chosen now, so the panel can show it from the first step
            self._run_dir = cfg.lab.run_dir
        except BaseException:
            self.run_button.disabled, self.stop_button.disabled = False, True
            raise
        self.setting = demo_setting_name(cfg)
        self.result, self.error, self.history = None, None, pd.DataFrame()
        self.transcripts.show_steps([])
        self.links.value = f"Run directory: <code>{html.escape(shown_path(cfg.lab.run_dir))}</code>"
        self.status.value = f"Starting ({html.escape(' '.join(format_dotlist(settings)))}) …"
        self._thread = threading.Thread(target=self._train, args=(cfg,), name="agl-lab-training", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the run to stop (what Stop does): between two sampled tokens (that step is dropped), or after the
        update that is under way."""
        self._stop_event.set()
        self.status.value += " — stopping …"

    def wait(self, timeout: float | None = None):
        """Block until the run ends (or ``timeout`` seconds pass); return its result (None if it failed)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.result

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _train(self, cfg: DictConfig) -> None:
        from agl_lab.training.trainer import train

        steps = int(cfg.trainer.total_training_steps)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a skipped step or a failed tracker shows in the status instead
                self.result = train(cfg, stop_event=self._stop_event, on_step=self._on_step, progress=False,
                                    on_progress=self._on_progress, on_validation=self._on_validation)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 — shown in the panel; the notebook stays usable
            self.error = f"{type(exc).__name__}: {exc}"
            self.status.value = f"<b style='color:#b00020'>Run failed:</b> {html.escape(self.error)}"
        else:
            before = self.result.validation  # the held-out evaluation before training (step 0) heads the curves
            before = before[before["step"] == 0] if len(before) else before
            self.history = pd.concat([before, self.result.history], ignore_index=True)
            if len(self.result.history):  # a run stopped before its first step has nothing to draw
                self._redraw()
            state = "stopped" if self.result.stopped else "finished"
            self.status.value = f"<b>Run {state}</b> after {len(self.result.history)} of {steps} steps. " + last_step(
                self.history
            )
            self.links.value = links_html(self.result)
        finally:
            self.run_button.disabled, self.stop_button.disabled = False, True

    def _on_progress(self, step: int, done: int, total: int, phase: str) -> None:
        self.progress.max, self.progress.value = total, done
        self.progress.description = f"step {step}"
        self.progress.bar_style = "" if phase == "sampling" else "info"
        self.progress.tooltip = f"{done} of {total} rollouts done; {phase}"

    def _on_step(self, record: dict[str, Any]) -> None:
        self.transcripts.load(self._run_dir)
        self.history = pd.concat([self.history, pd.DataFrame([record])], ignore_index=True)
        steps = int(self.controls["steps"].value)
        self.status.value = f"Step {record['step']} of {steps}. " + last_step(self.history)
        if time.monotonic() - self._last_draw >= self.redraw_s:
            self._redraw()

    def _on_validation(self, record: dict[str, Any]) -> None:
        """A held-out evaluation: step 0's (before training) is a record of its own; a later one is in its step's."""
        if record["step"] == 0:
            self.history = pd.concat([self.history, pd.DataFrame([record])], ignore_index=True)
            self.status.value = "Evaluated the initial policy on the held-out items (step 0)."
            self._redraw()

    def _redraw(self) -> None:
        self.curves.update(long_form(self.history, setting=self.setting, seed=int(self.controls["seed"].value)))
        self._last_draw = time.monotonic()

    def _controls(self, cfg: DictConfig) -> dict[str, w.ValueWidget]:
        controls = settings_controls(cfg, modes=trainable_modes(), keep_own=True)
        lab = cfg.lab
        return {
            **controls,
            "model": w.Dropdown(options=MODELS, value=lab.model, description="model", style=WIDE),
            "task": w.Dropdown(options=TASKS, value=lab.task, description="task", style=WIDE),
            "level": w.ToggleButtons(
                options=("trajectory", "transition"),
                value=cfg.agentlightning.trace_aggregator.level,
                style={"button_width": "90px"},
            ),
            "task_size": w.BoundedIntText(
                value=lab.task_size,
                min=2,
                max=64,
                description="task size",
                style=WIDE,
                tooltip="lock: locks; retry_arith, arith_workflow: operands 0 to size-1; guess_number: 1 to size",
            ),  # fmt: skip
            "max_turns": w.BoundedIntText(value=lab.max_turns, min=1, max=16, description="max turns", style=WIDE),
            "rewrite_prob": w.FloatSlider(
                value=lab.rewrite_prob,
                min=0.0,
                max=1.0,
                step=0.05,
                description="context rewrite prob",
                continuous_update=False,
                style=WIDE,
            ),
            "steps": w.BoundedIntText(
                value=int(cfg.trainer.total_training_steps), min=1, max=100_000, description="steps", style=WIDE
            ),
        }

    def _layout(self) -> w.Widget:
        c = self.controls
        settings = w.VBox(
            [
                w.HTML("<b>Settings</b>"),
                c["rollout_level"],
                c["mode"],
                c["max_ppo_update_times"],
                c["ppo_mini_batch_size"],
            ]
        )
        task = w.VBox([w.HTML("<b>Model and task</b>"), c["model"], c["task"], c["level"], c["task_size"],
                       c["max_turns"], c["rewrite_prob"]])  # fmt: skip
        run = w.VBox([w.HTML("<b>Run</b>"), c["steps"], c["seed"], w.HBox([self.run_button, self.stop_button])])
        return w.VBox([w.HBox([settings, task, run], layout=w.Layout(gap="24px")), self.status, self.progress,
                       self.links, self.curves.widget, self.transcripts.widget])  # fmt: skip
