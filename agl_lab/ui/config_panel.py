"""A form for the three per-rollout settings that shows the config they compose to.

Set the switches; the panel composes the config exactly as ``agl_lab.compose_config`` does (your config file, then
your base overrides, then the form's dotlist, then any extra ``key=value`` items), and shows the resolved settings,
the doctor's findings for the trainer you name (``trainer="agl"``: Agent Lightning's, the lab's by default), and what
to hand to Agent Lightning: the overrides that differ from its defaults and the dotlist for its training scripts. A
config that cannot be composed is shown as the error, in red.
Notebook: ``notebooks/02_config_check.ipynb``.
"""

from __future__ import annotations

import html
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import yaml

from agl_lab.config.compose import ConfigError, compose_config
from agl_lab.config.doctor import diagnose, findings_frame, settings_frame
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.handoff import overrides
from agl_lab.config.modes import trainable_modes
from agl_lab.config.settings import SETTINGS, estimator_choices
from agl_lab.core.keys import ESTIMATOR, ROLLOUT_N, TRAIN_BATCH
from agl_lab.ui.controls import control_overrides, settings_controls
from agl_lab.ui.gc_pauses import freeze_loaded

__all__ = ["ConfigPanel"]

_LEVEL_COLOURS = {"error": "#b00020", "warning": "#b26a00", "note": "#555555"}


class ConfigPanel:
    """The form (``.widget``) and what it composes to (``.cfg``, ``.findings``, ``.dotlist()``)."""

    def __init__(
        self,
        base_overrides: Mapping[str, Any] | None = None,
        base_dotlist: Sequence[str] = (),
        *,
        config_file: str | os.PathLike[str] | None = None,
        trainer: str = "lab",
    ):
        freeze_loaded()  # short GC pauses from here on (agl_lab.ui.gc_pauses)
        self.base_overrides = dict(base_overrides or {})
        self.base_dotlist = list(base_dotlist)
        self.config_file, self.trainer = config_file, trainer  # the file is read on every compose: edits show
        start = self._compose(self.base_dotlist)
        style = {"description_width": "220px"}  # the longest description, "ppo_mini_batch_size (prompts)", fits
        layout = widgets.Layout(width="620px")  # the longest loss-mode label fits beside it
        self.controls = settings_controls(start, modes=trainable_modes(), keep_own=True)
        for name in ("rollout_level", "mode", "max_ppo_update_times", "ppo_mini_batch_size"):
            self.controls[name].style, self.controls[name].layout = style, layout
        self.controls["rollout_level"].indent = True
        estimators = list(dict.fromkeys([start.algorithm.adv_estimator, *estimator_choices()]))
        self.estimator = widgets.Dropdown(
            options=estimators, value=start.algorithm.adv_estimator, description=SETTINGS[ESTIMATOR].label, style=style
        )
        self.extra = widgets.Text(
            description="more key=value",
            placeholder=f"{TRAIN_BATCH}=32 {ROLLOUT_N}=8",
            style=style,
            layout=widgets.Layout(width="760px"),
        )
        self.view = widgets.HTML()
        shown = [
            self.controls[name] for name in ("rollout_level", "mode", "max_ppo_update_times", "ppo_mini_batch_size")
        ]
        for control in (*shown, self.estimator, self.extra):
            control.observe(lambda _change: self.refresh(), names="value")
        self.widget = widgets.VBox([*shown, self.estimator, self.extra, self.view])
        self.cfg = None
        self.findings: list = []
        self.error: str | None = None
        self.refresh()

    def dotlist(self) -> list[str]:
        """The base dotlist, the form's settings as Hydra overrides, then the extra items as typed."""
        items = [
            *self.base_dotlist,
            *format_dotlist({**control_overrides(self.controls), ESTIMATOR: self.estimator.value}),
        ]
        try:
            return items + shlex.split(self.extra.value)
        except ValueError as exc:  # an unbalanced quote
            raise ConfigError(f"config has problems:\n  - more key=value: {exc}") from exc

    def refresh(self) -> None:
        """Compose again from the current form values and redraw the view."""
        try:
            self.cfg = self._compose(self.dotlist())
            self.findings, self.error = diagnose(self.cfg, trainer=self.trainer, composed=True), None
        except ConfigError as exc:
            self.cfg, self.findings, self.error = None, [], str(exc)
        self.view.value = self._render()

    def _compose(self, dotlist: list[str]):
        return compose_config(overrides=self.base_overrides, dotlist=dotlist, config_file=self.config_file)

    def _render(self) -> str:
        if self.error is not None:
            return f"<pre style='color:{_LEVEL_COLOURS['error']}'>{html.escape(self.error)}</pre>"
        settings = settings_frame(self.cfg).drop(columns="meaning").to_html(index=False)
        findings = findings_frame(self.findings)
        if findings.empty:
            doctor = "<p>Doctor: no findings.</p>"
        else:
            doctor = "".join(
                f"<li style='color:{_LEVEL_COLOURS[f.level]}'><b>{f.level}</b> {html.escape(f.key)}: "
                f"{html.escape(f.message)} <i>fix: {html.escape(f.fix)}</i></li>"
                for f in self.findings
            )
            doctor = f"<p>Doctor:</p><ul>{doctor}</ul>"
        nested = overrides(self.cfg)
        return (
            f"<h4>Resolved</h4>{settings}{doctor}"
            f"<h4>Overrides for Agent Lightning (keys that differ from its defaults)</h4>"
            f"<pre>{html.escape(yaml.safe_dump(nested, sort_keys=True) or '{}')}</pre>"
            f"<h4>Dotlist for its training scripts</h4><pre>{html.escape(' '.join(format_dotlist(nested)))}</pre>"
        )

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
