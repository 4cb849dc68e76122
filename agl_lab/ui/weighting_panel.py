"""The live weighting panel (notebook 01): a batch, the settings, two interactive figures and a rollout's rows.

:class:`WeightingPanel` puts the synthetic generator's knobs (or a loaded batch), the three settings (rollout-level
advantage, the loss mode — every normalization of the catalogue, trainable or not — and the update cap), the PPO
mini- and micro-batch sizes, the data-parallel ranks and the seed next to two plotly figures
(:mod:`agl_lab.ui.weighting_figures`): weights by mode and rows per rollout with the batch's rows and the cap's
drops, and every rollout's mass. Hovering a rollout shows its id, uid, rows, tokens, reward, advantage, weight and
fate; clicking it lists its rows beside the plot. A change recomputes only what it touches — the generator's
batch through the vectorized trace aggregation (:mod:`agl_lab.lab.synthetic_fast`), the selection and advantage
through the trainer's own steps on compact rows, a new mode nothing — and sends one message per figure. The
default estimator is verl's ``grpo_vectorized`` (``grpo``'s numbers without its Python loop; on Agent Lightning's
bf16 scores the two round differently, by up to 2^-8 of an advantage). Headless runs (papermill) keep a static PNG
of the figures. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import html
import io
import warnings
from contextlib import contextmanager
from typing import Any

import ipywidgets as w
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from omegaconf import DictConfig, OmegaConf
from verl import DataProto

from agl_lab.config.compose import compose_config
from agl_lab.config.dotlist import format_dotlist
from agl_lab.config.modes import LOSS_MODES, mode_from_config
from agl_lab.config.settings import configure
from agl_lab.core.groups import rollouts_per_prompt
from agl_lab.core.keys import LOSS_AGG_MODE, LOSS_MODE, MICRO_BATCH, ROLLOUT_N, SEED
from agl_lab.core.pipeline import mini_batch_rows
from agl_lab.lab import weight_figures
from agl_lab.lab.class_stats import class_weights, fate_counts, size_counts
from agl_lab.lab.compact_rows import OUTCOME_ESTIMATORS, CompactRows, compact_rows
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows
from agl_lab.lab.synthetic_fast import fast_synthetic_rows
from agl_lab.lab.weighting import Weighting, analyze_weighting
from agl_lab.ui.controls import WIDE, control_overrides, control_settings, generator_controls, settings_controls
from agl_lab.ui.gc_pauses import freeze_loaded
from agl_lab.ui.rollout_scatter import RolloutScatter
from agl_lab.ui.weighting_figures import WeightBars
from agl_lab.ui.weighting_html import rows_html, summary_html

__all__ = ["WeightingPanel"]

_GENERATOR_KNOBS = ("n_prompts", "rollouts_per_prompt", "calls", "min_calls", "max_calls", "continue_prob",
                    "fail_extra_calls", "min_tokens", "max_tokens", "success_prob", "partial_credit", "break_prob",
                    "level")  # fmt: skip
_TABLE_COLUMNS = ("row", "mini_batch", "micro_batch", "trainable_tokens", "fate", "advantage", "weight", "mass")


class WeightingPanel:
    """The live weighting panel. Display it as a notebook cell's result; read ``result`` for the current tables.

    ``knobs``: the synthetic batch to start from; or ``rows``: a loaded batch (the generator's knobs are then
    hidden). ``cfg``: a composed config to start the settings from (estimator, cap, mini- and micro-batch, loss
    mode); by default ``grpo_vectorized`` with mini-batches of a quarter of the prompts and no cap. ``controls`` maps
    each knob and setting to its widget; after setting values in code, :meth:`recompute` returns the new
    :class:`Weighting`; :meth:`show_rollout` is what a click on a rollout runs.
    """

    def __init__(
        self, *, knobs: SyntheticKnobs | None = None, rows: DataProto | None = None, cfg: DictConfig | None = None
    ) -> None:
        freeze_loaded()  # short GC pauses from here on (agl_lab.ui.gc_pauses)
        self.knobs = knobs or SyntheticKnobs()
        self.rows_given = compact_rows(rows) if rows is not None else None
        self._full_rows = rows
        self.rollouts_per_prompt = rollouts_per_prompt(rows) if rows is not None else self.knobs.rollouts_per_prompt
        if cfg is None:
            prompts = self.knobs.n_prompts if rows is None else max(1, len(rows) // self.rollouts_per_prompt)
            actor = {"ppo_mini_batch_size": max(1, prompts // 4)}
            cfg = compose_config(overrides={"algorithm": {"adv_estimator": "grpo_vectorized"},
                                            "actor_rollout_ref": {"actor": actor}})  # fmt: skip
        self.cfg = copy.deepcopy(cfg)  # the panel edits its own copy, never the caller's
        self.result: Weighting | None = None
        self.metrics: dict[str, Any] = {}
        self.error: str | None = None
        self.warning: str | None = None
        self.picked: Any = None  # the rollout id whose rows the table shows
        self._rows_cache: tuple[SyntheticKnobs, Any] | None = None
        self._analysis_cache: dict[tuple, tuple[Weighting, dict[str, Any]]] = {}
        self._selection: tuple = ()
        self._drawn: dict[str, tuple] = {}

        self.modes = list(LOSS_MODES)
        self.controls = settings_controls(cfg, modes=self.modes)
        micro = cfg.actor_rollout_ref.actor.get("ppo_micro_batch_size_per_gpu", None)
        self.controls["micro"] = w.BoundedIntText(value=int(micro or 0), min=0, max=100_000, style=WIDE,
                                                  description="ppo_micro_batch_size_per_gpu (0: whole)")  # fmt: skip
        self.controls["dp_size"] = w.BoundedIntText(value=1, min=1, max=1024, description="dp ranks", style=WIDE)
        own = mode_from_config(cfg)
        self.notice = None if own is not None else (
            f"the config's loss ({OmegaConf.select(cfg, LOSS_MODE)}, {OmegaConf.select(cfg, LOSS_AGG_MODE)}) "
            f"is not in the mode catalogue: showing {self.modes[0]}"
        )  # fmt: skip
        if rows is None:
            self.controls.update(generator_controls(self.knobs))
        self.status, self.summary, self.scatter_title = w.HTML(), w.HTML(), w.HTML()
        self.table = w.HTML("<i>Click a rollout in the plot to list its rows here.</i>")
        self.table.add_class("panel-table")
        self.bars = WeightBars(self.modes)
        self.scatter = RolloutScatter(self.show_rollout)
        self.widget = self._layout()
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    # ---- what a change runs ---------------------------------------------------------------------------------

    def recompute(self) -> Weighting:
        """Read every widget, regenerate or reanalyse what changed, redraw; returns the new analysis.

        Raises ValueError for values the generator or the analysis refuses (on a widget change the panel shows
        it in red instead).
        """
        with _one_torch_thread():
            self._analyze()
            self.redraw()
        return self.result

    def update(self) -> None:
        """What every widget change runs: :meth:`recompute`, with refused values reported instead of raised."""
        try:
            self.recompute()
        except ValueError as exc:
            self.error = str(exc)
            self.status.value = f"<b style='color:#b00020'>Refused:</b> {html.escape(self.error)} (figure unchanged)"
            return
        self.error = None
        notes = [n for n in (self.notice, self.warning) if n]
        note = "".join(f"<span style='color:#a05a00'>⚠ {html.escape(n)}</span> " for n in notes)
        s = self.settings()
        self.status.value = (
            f"PPO mini-batch = ppo_mini_batch_size × rollout.n = {mini_batch_rows(self.cfg)} rows over "
            f"{s['dp_size']} rank(s), micro-batches of {s['micro'] or 'all its'} rows. {note}"
        )

    def _analyze(self) -> None:
        rows = self._rows()
        s = self.settings()
        # the settings reach the config as the dotlist gives them (the analysis computes every rollout level and
        # normalization itself, so their keys change nothing here), with the seed the analysis draws with
        configure(self.cfg, {**self._overrides(), SEED: s["seed"]}, in_place=True)
        key = (id(rows), self._n(), s["ppo_mini_batch_size"], s["max_ppo_update_times"], s["seed"], s["micro"],
               s["dp_size"])  # fmt: skip
        if key != self._selection:
            self._analysis_cache.clear()  # another batch or selection: the cached analyses are stale
            self._selection = key
        level = s["rollout_level"]
        if (key, level) not in self._analysis_cache:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._analysis_cache[(key, level)] = analyze_weighting(
                    rows, self.cfg, rollout_levels=(level,), dp_size=s["dp_size"]
                )
            self.warning = "; ".join(str(c.message) for c in caught) or None
        self.result, self.metrics = self._analysis_cache[(key, level)]

    def redraw(self) -> list[str]:
        """Update what changed since the last drawing (one message per figure); returns what it updated."""
        result, s = self.result, self.settings()
        mode, level, drawn = s["mode"], s["rollout_level"], []
        if self._drawn.get("bars") != (self._selection,):
            weights = np.stack([result.rollout_weight(m) for m in result.modes])  # (modes, rollouts)
            relative = result.relative_weights()
            stats = class_weights(result.rollout_groups.sizes, result.rows_kept, relative, weights, result.modes)
            groups = result.rollout_groups
            histogram = size_counts(groups.sizes, result.compact.reward[groups.first_rows])
            self.bars.update(stats, highlight=mode, histogram=histogram, fates=fate_counts(groups, result.fate))
            self._drawn["bars"] = (self._selection,)
            self._drawn["highlight"] = mode
            drawn.append("bars")
        elif self._drawn.get("highlight") != mode:
            self.bars.widget.update(layout=self.bars.highlight(mode))
            self._drawn["highlight"] = mode
            drawn.append("highlight")
        if self._drawn.get("scatter") != (self._selection, mode, level):
            self.scatter.update(result.view(mode, level))
            self.scatter_title.value = (
                f"<b>Rollout mass under {html.escape(LOSS_MODES[mode].label)}</b> (rollout-level advantage "
                f"{'on' if level else 'off'}): hover a rollout for its numbers, click it for its rows"
            )
            self._drawn["scatter"] = (self._selection, mode, level)
            drawn.append("scatter")
            if self.picked is not None:
                self.show_rollout(self.picked)
        self.summary.value = summary_html(result, s, self.dotlist())
        return drawn

    def show_rollout(self, rollout: int | Any) -> pd.DataFrame:
        """List one rollout's rows beside the plot (``rollout``: its index in the batch's rollouts, or its id)."""
        result, s = self.result, self.settings()
        ids = result.rollout_groups.ids
        rollout_id = ids[rollout] if isinstance(rollout, int | np.integer) else rollout
        table = result.row_table(s["mode"], rollout_level=s["rollout_level"], rollout_id=rollout_id)
        self.picked = rollout_id
        self.table.value = rows_html(rollout_id, table[list(_TABLE_COLUMNS)])
        return table

    # ---- reading the widgets ----------------------------------------------------------------------------------

    def knobs_from_widgets(self) -> SyntheticKnobs:
        """The generator knobs the widgets show (ValueError naming the knob if the combination is refused)."""
        values = {name: self.controls[name].value for name in _GENERATOR_KNOBS if name in self.controls}
        return dataclasses.replace(self.knobs, **values, seed=self.controls["seed"].value)

    def settings(self) -> dict[str, Any]:
        """The three settings, mini- and micro-batch sizes, dp ranks and the seed as the widgets show them."""
        return {**control_settings(self.controls), "micro": int(self.controls["micro"].value),
                "dp_size": int(self.controls["dp_size"].value)}  # fmt: skip

    def dotlist(self) -> list[str]:
        """The shown settings as Hydra overrides for Agent Lightning's trainer (a mode it cannot train: left out)."""
        return format_dotlist(self._overrides())

    def _overrides(self) -> dict[str, Any]:
        """The shown settings as config keys: the shared controls', ``rollout.n`` and the micro-batch size."""
        micro = int(self.controls["micro"].value) or None
        return {**control_overrides(self.controls), ROLLOUT_N: self._n(), MICRO_BATCH: micro}

    def _rows(self) -> CompactRows | DataProto:
        if self.rows_given is not None:
            outcome = str(self.cfg.algorithm.adv_estimator) in OUTCOME_ESTIMATORS
            return self.rows_given if outcome else self._full_rows
        knobs = self.knobs_from_widgets()
        if self._rows_cache is None or self._rows_cache[0] != knobs:
            outcome = str(self.cfg.algorithm.adv_estimator) in OUTCOME_ESTIMATORS and knobs.turn_rewards == "off"
            self._rows_cache = (knobs, (fast_synthetic_rows if outcome else synthetic_rows)(knobs)[0])
        return self._rows_cache[1]

    def _n(self) -> int:
        """rollout.n: the generator's rollouts per prompt, or what the loaded batch has."""
        if self.rows_given is None:
            return int(self.controls["rollouts_per_prompt"].value)
        return self.rollouts_per_prompt

    def _on_change(self, _change: dict) -> None:
        self.update()

    # ---- display ----------------------------------------------------------------------------------------------

    def _layout(self) -> w.Widget:
        c = self.controls
        settings = w.VBox([w.HTML("<b>Settings</b>"), c["rollout_level"], c["mode"], c["max_ppo_update_times"],
                           c["ppo_mini_batch_size"], c["micro"], c["dp_size"], c["seed"]])  # fmt: skip
        columns = [settings]
        if self.rows_given is None:
            generator = [c[name] for name in ("n_prompts", "rollouts_per_prompt", "success_prob", "partial_credit",
                                              "calls")]  # fmt: skip
            generator += [w.HBox([c["min_calls"], c["max_calls"]]), c["fail_extra_calls"], c["continue_prob"],
                          w.HBox([c["min_tokens"], c["max_tokens"]]), c["break_prob"], c["level"]]  # fmt: skip
            columns.insert(0, w.VBox([w.HTML("<b>Synthetic batch</b>"), *generator]))
        self.table.layout = w.Layout(width="380px", max_height="440px", overflow="auto")
        rollouts = w.HBox([self.scatter.widget, self.table], layout=w.Layout(gap="12px"))
        return w.VBox([w.HBox(columns, layout=w.Layout(gap="24px")), self.status, self.summary, self.bars.widget,
                       self.scatter_title, rollouts])  # fmt: skip

    def static_png(self) -> bytes:
        """The figures as one PNG (matplotlib): what a notebook executed without a browser keeps."""
        s = self.settings()
        fig = Figure(figsize=(12, 8.2), dpi=80, layout="constrained")
        top, bottom = fig.subplots(2, 1, height_ratios=[1.1, 1])
        weight_figures.rollout_weight_by_mode(self.result.rollouts, modes=self.modes, highlight=s["mode"], ax=top)
        weight_figures.mass_vs_rows(self.result.rollouts, mode=s["mode"], rollout_level=s["rollout_level"], ax=bottom)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        return buffer.getvalue()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        data = self.widget._repr_mimebundle_(**kwargs)
        data, meta = data if isinstance(data, tuple) else (data, {})
        return {**data, "image/png": base64.b64encode(self.static_png()).decode()}, meta


@contextmanager
def _one_torch_thread():
    """The panel's tensors are one number per row: torch's thread pool costs more than it saves (2 shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
