"""The live weighting panel (notebook 01): a batch, the settings and four figures that redraw in place.

:class:`WeightingPanel` puts the synthetic generator's knobs (or a loaded batch), the three settings
(rollout-level advantage, the loss mode, the update cap), the PPO mini-batch size and the seed next to four live
figures (:mod:`agl_lab.lab.weight_figures`, :mod:`agl_lab.lab.batch_figures`). Every change recomputes through
:func:`agl_lab.lab.weighting.analyze_weighting` (only the stages the change touches) and redraws, in place, only
the figures whose inputs changed. Bounded boxes and sliders clamp out-of-range values where you can see them; a
combination the generator refuses (e.g. min tokens above max tokens) is reported in red and the last valid
figure stays. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import copy
import dataclasses
import html
import warnings
from functools import partial
from typing import Any

import ipywidgets as w
import numpy as np
from omegaconf import DictConfig
from verl import DataProto

from agl_lab.config.compose import compose_config
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.modes import LOSS_MODES, mode_from_config
from agl_lab.config.settings import ROLLOUT_N
from agl_lab.core.groups import group_rows, rollouts_per_prompt
from agl_lab.core.pipeline import mini_batch_rows
from agl_lab.lab import batch_figures, weight_figures
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from agl_lab.lab.weighting import Weighting, analyze_weighting
from agl_lab.ui.controls import LiveFigure, control_overrides, control_settings, generator_controls, settings_controls

__all__ = ["WeightingPanel"]

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
        self.rollouts_per_prompt = rollouts_per_prompt(rows) if rows is not None else self.knobs.rollouts_per_prompt
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

        self.modes = list(LOSS_MODES)
        self.controls = settings_controls(cfg, modes=self.modes)
        own = mode_from_config(cfg)
        # a config whose loss the catalogue does not hold opens on the first mode, and says so
        self.notice = (
            None
            if own is not None
            else (
                f"the config's loss ({cfg.actor_rollout_ref.actor.policy_loss.loss_mode}, "
                f"{cfg.actor_rollout_ref.actor.loss_agg_mode}) is not in the mode catalogue: showing {self.modes[0]}"
            )
        )
        if rows is None:
            self.controls.update(generator_controls(self.knobs))
        self.status = w.HTML()
        self.summary = w.HTML()
        # Four figures, not one: a change redraws only those whose inputs changed (a new loss mode leaves the
        # histogram and the cap figure as they are), which keeps a redraw within the panel's time budget.
        self.figures = {
            "weights": LiveFigure((12.5, 4.4), dpi=dpi, width="100%"),
            "rows": LiveFigure((5.2, 3.9), dpi=dpi, width="33%"),
            "mass": LiveFigure((5.2, 3.9), dpi=dpi, width="33%"),
            "cap": LiveFigure((5.2, 3.9), dpi=dpi, width="33%"),
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
        notes = [n for n in (self.notice, self.warning) if n]
        note = "".join(f"<span style='color:#a05a00'>⚠ {html.escape(n)}</span> " for n in notes)
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
        return control_settings(self.controls)

    def dotlist(self) -> list[str]:
        """The shown settings as Hydra overrides for Agent Lightning's trainer (or ``agl-lab check``)."""
        return format_dotlist({**control_overrides(self.controls), ROLLOUT_N: self._n()})

    def redraw(self) -> list[str]:
        """Redraw the figures whose inputs changed since they were last drawn; returns their names.

        A figure already on screen is updated in place (the figures' ``update_*`` twins: same artists, new data,
        kept layout), half the cost of drawing anew; it is drawn anew only when its structure changed.
        """
        result, s = self.result, self.settings()
        mode, level, selection = s["mode"], s["rollout_level"], self._selection
        figures, drawn = self.figures, []
        weights = figures["weights"]
        if weights.drawn_for == (selection,) and self._highlighted != mode:  # same bars: move the shading only
            weights.edit((selection,), partial(weight_figures.highlight_mode, mode=mode, modes=self.modes))
            drawn.append("weights")
        self._highlighted = mode
        rollouts, rows = result.rollouts, result.rows
        plan = {  # name: (inputs, draw anew, update in place)
            "weights": (
                (selection,),
                partial(weight_figures.rollout_weight_by_mode, rollouts, modes=self.modes, highlight=mode),
                partial(
                    weight_figures.update_rollout_weight_by_mode, rollouts=rollouts, modes=self.modes, highlight=mode
                ),
            ),
            "rows": ((selection[0],), partial(batch_figures.rows_per_rollout_histogram, rows), None),
            "mass": (
                (selection, mode, level),
                partial(weight_figures.mass_vs_rows, rollouts, mode=mode, rollout_level=level),
                partial(weight_figures.update_mass_vs_rows, rollouts=rollouts, mode=mode, rollout_level=level),
            ),
            "cap": (
                (selection,),
                partial(batch_figures.cap_drops, rows),
                partial(batch_figures.update_cap_drops, rows=rows),
            ),
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


def _summary_html(result: Weighting, s: dict[str, Any], dotlist: list[str]) -> str:
    totals = result.totals
    line = totals[(totals["mode"] == s["mode"]) & (totals["rollout_level"] == s["rollout_level"])].iloc[0]
    n_rows = len(result.rows)
    n_rollouts = group_rows(result.rows["rollout_id"].to_numpy(), field="rollout_id").n_groups
    ratio = "–" if np.isnan(line["weight_ratio"]) else f"{line['weight_ratio']:.3g}×"
    return (
        f"<b>{html.escape(LOSS_MODES[s['mode']].label)}</b>: batch total loss scale Σ weights = "
        f"<b>{line['total_weight']:.4g}</b>; "
        f"heaviest / lightest rollout = <b>{ratio}</b>; "
        f"{int(line['rows_kept'])} of {n_rows} rows and {int(line['rollouts_kept'])} of {n_rollouts} rollouts trained "
        f"in {int(line['mini_batches'])} mini-batches.<br><small>As config overrides: <code>"
        + html.escape(" ".join(dotlist))
        + "</code></small>"
    )
