"""A form for the three per-rollout settings that shows the config they compose to.

Set the switches; the panel composes the config exactly as ``agl_lab.compose_config`` does (your base
overrides, then the form's dotlist, then any extra ``key=value`` items), and shows the resolved settings, the
doctor's findings, and what to hand to Agent Lightning: the overrides that differ from its defaults and the
dotlist for its training scripts. A config that cannot be composed is shown as the error, in red.
Notebook: ``notebooks/02_config_check.ipynb``.
"""

from __future__ import annotations

import html
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import yaml
from verl.trainer.ppo import core_algos

from agl_lab.config import ConfigError, compose_config
from agl_lab.doctor import CAP, LOSS_MODE, PAIR_ADV, diagnose, findings_frame, settings_frame
from agl_lab.handoff import format_dotlist, overrides
from agl_lab.loss import PER_ROLLOUT_MEAN_LOSS_MODE

__all__ = ["ConfigPanel"]

_ESTIMATORS = ["grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus", "opo", "gpg", "gae"]
_LEVEL_COLOURS = {"error": "#b00020", "warning": "#b26a00", "note": "#555555"}


class ConfigPanel:
    """The form (``.widget``) and what it composes to (``.cfg``, ``.findings``, ``.dotlist()``)."""

    def __init__(self, base_overrides: Mapping[str, Any] | None = None, base_dotlist: Sequence[str] = ()):
        self.base_overrides = dict(base_overrides or {})
        self.base_dotlist = list(base_dotlist)
        start = compose_config(overrides=self.base_overrides, dotlist=self.base_dotlist)
        loss_modes = [(f"{PER_ROLLOUT_MEAN_LOSS_MODE} · rows divisor (v1.0)", (PER_ROLLOUT_MEAN_LOSS_MODE, "rows"))]
        loss_modes.append(
            (f"{PER_ROLLOUT_MEAN_LOSS_MODE} · rollouts divisor (Eq. 16)", (PER_ROLLOUT_MEAN_LOSS_MODE, "rollouts"))
        )
        loss_modes += [
            (name, (name, None)) for name in core_algos.POLICY_LOSS_REGISTRY if name != PER_ROLLOUT_MEAN_LOSS_MODE
        ]
        style = {"description_width": "190px"}
        layout = widgets.Layout(width="480px")
        self.rollout_level = widgets.Checkbox(
            value=bool(start.algorithm.enable_rollout_level_advantage),
            description="enable_rollout_level_advantage",
            indent=True,
            style=style,
            layout=layout,  # wide enough that JupyterLab does not cut the label
        )
        self.loss_mode = widgets.Dropdown(options=loss_modes, description="loss mode", style=style, layout=layout)
        self.loss_mode.value = next(
            v for _, v in loss_modes if v[0] == start.actor_rollout_ref.actor.policy_loss.loss_mode
        )
        cap = start.agentlightning.max_ppo_update_times
        self.cap = widgets.SelectionSlider(  # "none" = null, Agent Lightning's default (ipywidgets can't hold None)
            options=["none"] + [str(n) for n in range(1, 9)],
            value="none" if cap is None else str(cap),
            description="max_ppo_update_times",
            style=style,
            layout=layout,
        )
        estimators = list(dict.fromkeys([start.algorithm.adv_estimator, *_ESTIMATORS]))
        self.estimator = widgets.Dropdown(
            options=estimators, value=start.algorithm.adv_estimator, description="adv_estimator", style=style
        )
        self.extra = widgets.Text(
            description="more key=value",
            placeholder="data.train_batch_size=32 actor_rollout_ref.rollout.n=8",
            style=style,
            layout=widgets.Layout(width="720px"),
        )
        self.view = widgets.HTML()
        for control in (self.rollout_level, self.loss_mode, self.cap, self.estimator, self.extra):
            control.observe(lambda _change: self.refresh(), names="value")
        self.widget = widgets.VBox(
            [self.rollout_level, self.loss_mode, self.cap, self.estimator, self.extra, self.view]
        )
        self.cfg = None
        self.findings: list = []
        self.error: str | None = None
        self.refresh()

    def dotlist(self) -> list[str]:
        """The base dotlist, the form's settings as Hydra overrides, then the extra items as typed."""
        mode, divisor = self.loss_mode.value
        items = [
            *self.base_dotlist,
            f"{PAIR_ADV}={str(self.rollout_level.value).lower()}",
            f"{LOSS_MODE}={mode}",
            f"{CAP}={'null' if self.cap.value == 'none' else self.cap.value}",
            f"algorithm.adv_estimator={self.estimator.value}",
        ]
        if divisor is not None:
            items.append(f"lab.per_rollout_divisor={divisor}")
        try:
            return items + shlex.split(self.extra.value)
        except ValueError as exc:  # an unbalanced quote
            raise ConfigError(f"config has problems:\n  - more key=value: {exc}") from exc

    def refresh(self) -> None:
        """Compose again from the current form values and redraw the view."""
        try:
            self.cfg = compose_config(overrides=self.base_overrides, dotlist=self.dotlist())
            self.findings, self.error = diagnose(self.cfg), None
        except ConfigError as exc:
            self.cfg, self.findings, self.error = None, [], str(exc)
        self.view.value = self._render()

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
