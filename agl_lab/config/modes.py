"""The loss-mode catalogue: the normalizations the field uses, with what each weighs and how to select it.

A *loss mode* is how an optimizer step's loss adds up its tokens' policy-gradient terms, which decides how much
each rollout weighs. Each :class:`LossMode` has its name (``token-mean``, ``per_rollout_mean:rows``,
``trl:dr_grpo``, …), a one-line label (the one panels, the CLI and figures show), the per-token weight formula and
the batch's loss scale, its source (the project's documentation), the function computing the weights
(:mod:`agl_lab.core.weights`), what splitting a rollout into k rows does to it, what else its weights depend on,
and the config keys that select it in Agent Lightning's trainer (none for a mode it cannot train with: TRL's,
SkyRL's and ``rollout_mean``). Adding a mode is one entry here plus its weight function. Exported as
``agl_lab.LOSS_MODES``; ``lab.normalizations`` measures the split and dependence claims on the weight functions
and the tests hold them equal. Notebook: ``notebooks/01_per_rollout_weighting.ipynb``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from agl_lab.config.verl_features import VerlFeature, feature_for
from agl_lab.core import weights
from agl_lab.core.keys import DIVISOR, LOSS_AGG_MODE, LOSS_MODE
from agl_lab.core.loss import CISPO_PER_ROLLOUT_MEAN_LOSS_MODE, PER_ROLLOUT_MEAN_LOSS_MODE

__all__ = [
    "AGG_LOSS_POLICY_LOSSES", "DEPENDENCIES", "LOSS_MODES", "SPLITS", "LossMode", "known_as", "mode_from_config",
    "mode_settings", "mode_table", "trainable_modes", "unknown_mode_hint",
]  # fmt: skip

_VERL_CODE = "https://github.com/volcengine/verl/blob/v0.9.1/verl/trainer/ppo/core_algos.py"
_VERL_GRPO = "https://verl.readthedocs.io/en/latest/algo/grpo.html"
_VERL_DAPO = "https://verl.readthedocs.io/en/latest/algo/dapo.html"
_AGL = "https://microsoft.github.io/agent-lightning/stable/4-trainer-configuration/"
# agentlightning 1.0.2 (PyPI): agentlightning/verl/per_rollout_loss.py, compute_policy_loss_cispo_per_rollout_mean
_AGL_CISPO = "https://pypi.org/project/agentlightning/1.0.2/"
_TRL = "https://huggingface.co/docs/trl/main/en/grpo_trainer#loss-types"
_SKYRL = "https://docs.skyrl.ai/docs/api-ref/skyrl/config"
_UNI_AGENT_185 = "https://github.com/verl-project/uni-agent/issues/185"  # its session mean (open issue)
_VERL_7580 = "https://github.com/verl-project/verl/pull/7580"  # per-row loss_weight (open PR)
_PROPOSED = "verl PR #7580 (proposed, not released)"

# What splitting one rollout's tokens into k rows does to its weight.
SPLITS = {
    "k times": "a rollout split into k rows weighs k times what it weighs as one row",
    "by tokens": "a rollout weighs by its tokens, however many rows it became",
    "by micro-batch tokens": "a rollout weighs by its tokens' shares of the micro-batches its rows land in",
    "equal": "every rollout weighs the same, however many rows or tokens",
}
# What else a rollout's weight can move with, the rollout itself and the config's constants held fixed.
DEPENDENCIES = ("batch composition", "micro-batch size", "dp size")

# verl 0.9.1 registry entries that aggregate through agg_loss with the configured loss_agg_mode, so at ratio 1 they
# weigh like that mode (clip_cov also zeroes max(1, ⌊clip_cov_ratio·N_μ⌋) random tokens per micro-batch;
# bypass_mode multiplies by its rejection mask; every one by rollout_is_weights when the trainer passes them).
# sapo and geo_mean aggregate their own way and have catalogue entries; per_rollout_mean is Agent Lightning's. (verl
# 0.8.0's gspo forces seq-mean-token-mean; dro is verl 0.9's: agl_lab.config.verl_features.) A config's loss weighs
# like its catalogue mode: agl_lab.lab.loss_scale.weighing_mode.
AGG_LOSS_POLICY_LOSSES = (
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "dro",
    "cispo",
    "bypass_mode",
)


@dataclass(frozen=True)
class LossMode:
    """One loss normalization: how it weighs tokens, who defines it, and how to select it in the trainer."""

    name: str
    label: str  # short, one line: what every panel, figure and the CLI show
    family: str  # who defines it
    formula: str  # the per-token weight w = −∂L/∂log π ÷ A (symbols: agl_lab.core.weights)
    scale: str  # the batch's loss scale: Σ w over the step's trained tokens
    source: str  # the project's documentation (or code where the docs are silent)
    weight: Callable[[weights.TokenLayout], np.ndarray] = field(repr=False)
    split: str = "by tokens"  # one of SPLITS
    depends_on: tuple[str, ...] = ()  # of DEPENDENCIES
    settings: Mapping[str, Any] = field(default_factory=dict)  # dotted config keys → values; empty: not trainable
    known_as: tuple[str, ...] = ()  # the same objective's option names in other frameworks, so their users find it

    @property
    def verl_feature(self) -> VerlFeature | None:
        """What of verl's this mode needs that not every verl agl_lab is tested on has (``token-sum``: verl 0.9)."""
        return next((f for key, value in self.settings.items() if (f := feature_for(key, value))), None)

    @property
    def verl_problem(self) -> str | None:
        """Why the installed verl cannot train with this mode, naming the verl it needs; None when it can."""
        return self.verl_feature.problem() if self.verl_feature else None

    @property
    def trainable(self) -> bool:
        """Whether Agent Lightning's trainer (and the lab trainer) can train with this mode on the installed verl."""
        return bool(self.settings) and self.verl_problem is None


def _verl(name: str, **kw: Any) -> LossMode:
    """A verl ``loss_agg_mode`` with verl's ``vanilla`` PPO loss."""
    settings = {LOSS_MODE: "vanilla", LOSS_AGG_MODE: name}
    return LossMode(name=name, label=f"verl {name}", family="verl loss_agg_mode", settings=settings, **kw)


def _verl_loss(name: str, *, line: int, **kw: Any) -> LossMode:
    """A registered verl policy loss that aggregates its own way (its source: the line in verl's core_algos)."""
    settings = {LOSS_MODE: name}
    return LossMode(name=name, family="verl policy loss", source=f"{_VERL_CODE}#L{line}", settings=settings, **kw)


def _per_rollout(divisor: str, *, loss_mode: str = PER_ROLLOUT_MEAN_LOSS_MODE, **kw: Any) -> LossMode:
    """Agent Lightning's per-rollout normalization with ``lab.per_rollout_divisor=divisor``."""
    kw.setdefault("source", _AGL)
    return LossMode(
        name=f"{loss_mode}:{divisor}",
        family="Agent Lightning",
        split="equal",
        depends_on=(_COMPOSITION,),
        settings={LOSS_MODE: loss_mode, DIVISOR: divisor},
        **kw,
    )


def _proposed(name: str, **kw: Any) -> LossMode:
    """A verl PR #7580 weight (revision of 2026-09-19: rescaled to mean 1 over the step's rows, on every loss term)."""
    return LossMode(name=name, family=_PROPOSED, source=_VERL_7580, settings={LOSS_MODE: name}, **kw)


_COMPOSITION, _MICRO, _DP = DEPENDENCIES

# fmt: off
LOSS_MODES: dict[str, LossMode] = {
    m.name: m
    for m in (
        _per_rollout("rows", label="per_rollout_mean ÷ rows (Agent Lightning v1.0)", formula="w = 1 / (T · N)",
                     scale="R / N", weight=weights.per_rollout_mean_rows),
        _per_rollout("rollouts", label="per_rollout_mean ÷ rollouts (Eq. 16)", formula="w = 1 / (T · R)", scale="1",
                     weight=weights.per_rollout_mean_rollouts),
        # CISPO's per-token gradient is −sg(clip(ratio))·Â·∇log π on the same normalized advantages: at ratio 1 (a
        # step's first update) it weighs as per_rollout_mean; off ratio 1 scaled by the clipped ratio, never zeroed.
        _per_rollout("rows", loss_mode=CISPO_PER_ROLLOUT_MEAN_LOSS_MODE, source=_AGL_CISPO,
                     label="cispo_per_rollout_mean ÷ rows (Agent Lightning 1.0.2)",
                     formula="w = 1 / (T · N) at ratio 1", scale="R / N", weight=weights.per_rollout_mean_rows),
        _verl("token-mean", formula="w = 1 / N_b", scale="mini-batches", weight=weights.token_mean, source=_VERL_DAPO,
              depends_on=(_COMPOSITION, _DP),
              known_as=("slime --loss-aggregation token_mean", "AReaL actor.loss_aggregation=token_mean",
                        "SkyRL algorithm.loss_reduction=token_mean")),
        _verl("seq-mean-token-sum", formula="w = 1 / G", scale="tokens / G", weight=weights.seq_mean_token_sum,
              source=f"{_VERL_CODE}#L1140"),
        _verl("seq-mean-token-mean", formula="w = 1 / (n · G)", scale="rows / G", weight=weights.seq_mean_token_mean,
              source=_VERL_GRPO, split="k times",
              known_as=("slime --loss-aggregation sample_mean",
                        "slime's and Miles' per-rollout (per-sample) denominators, rollout_mask_sums",
                        "AReaL actor.loss_aggregation=seq_mean", "SkyRL algorithm.loss_reduction=sequence_mean")),
        _verl("seq-mean-token-sum-norm", formula="w = 1 / (G · H)", scale="tokens / (G · H)",
              weight=weights.seq_mean_token_sum_norm, source=_VERL_GRPO,
              known_as=("slime --loss-aggregation constant", "AReaL actor.loss_aggregation=constant",
                        "SkyRL algorithm.loss_reduction=seq_mean_token_sum_norm")),
        _verl("token-sum", formula="w = 1", scale="tokens", weight=weights.token_sum, source=f"{_VERL_CODE}#L1140"),
        _verl_loss("sapo", line=1622, label="verl sapo (forces seq-mean-token-mean)", formula="w = 1 / (n · G)",
                   scale="rows / G", weight=weights.sapo, split="k times"),
        _verl_loss("geo_mean", line=1928, label="verl geo_mean (mean over micro-batch rows)",
                   formula="w = 1 / (n · B_μ · D)", scale="micro-batches / D", weight=weights.geo_mean, split="k times",
                   depends_on=(_MICRO, _DP)),
        LossMode(name="trl:grpo", label="TRL grpo", family="TRL", formula="w = 1 / (n · G)", scale="rows / G",
                 source=_TRL, weight=weights.trl_grpo, split="k times", known_as=("TRL GRPOConfig loss_type=grpo",)),
        LossMode(name="trl:bnpo", label="TRL bnpo", family="TRL", formula="w = 1 / (N_μ · M_b)", scale="mini-batches",
                 source=_TRL, weight=weights.trl_bnpo, split="by micro-batch tokens", depends_on=(_COMPOSITION, _MICRO),
                 known_as=("TRL GRPOConfig loss_type=bnpo",)),
        LossMode(name="trl:dr_grpo", label="TRL dr_grpo", family="TRL", formula="w = 1 / (G · H)",
                 scale="tokens / (G · H)", source=_TRL, weight=weights.trl_dr_grpo,
                 known_as=("TRL GRPOConfig loss_type=dr_grpo",)),
        LossMode(name="trl:dapo", label="TRL dapo (TRL's default)", family="TRL", formula="w = 1 / N_b",
                 scale="mini-batches", source=_TRL, weight=weights.trl_dapo, depends_on=(_COMPOSITION, _DP),
                 known_as=("TRL GRPOConfig loss_type=dapo",)),
        LossMode(name="skyrl:prompt_mean", label="SkyRL prompt_mean", family="SkyRL", formula="w = 1 / (P_b · T_p)",
                 scale="mini-batches", source=_SKYRL, weight=weights.skyrl_prompt_mean, depends_on=(_COMPOSITION, _DP),
                 known_as=("SkyRL algorithm.loss_reduction=prompt_mean", "AReaL actor.loss_aggregation=prompt_mean",
                           "slime --loss-aggregation prompt_mean")),
        # uni-agent #185 (open) asks for L = mean over sessions of the mean over their rows: this mode
        LossMode(name="rollout_mean", label="rollout_mean (mean over rollouts of row means; uni-agent #185's session "
                 "mean)", family="agl_lab", formula="w = 1 / (R · k · n)", scale="1", source=_UNI_AGENT_185,
                 weight=weights.rollout_mean, split="equal", depends_on=(_COMPOSITION,),
                 known_as=("uni-agent session-balanced loss (#185)",)),
        _proposed("session_equal", label="session_equal: loss_weight 1/k, mean 1 (verl #7580, proposed)",
                  formula="w = N / (R · k · n · G)", scale="rows / G", weight=weights.session_equal, split="equal",
                  depends_on=(_COMPOSITION,), known_as=("verl PR #7580 loss_weight = 1/N",)),
        _proposed("partition_preserving", label="partition_preserving: loss_weight n / mean n (verl #7580, proposed)",
                  formula="w = k / (T · G)", scale="rows / G", weight=weights.partition_preserving, split="k times",
                  known_as=("verl PR #7580 loss_weight = T_j / mean(T)",)),
    )
}
# fmt: on


def mode_settings(mode: str) -> dict[str, Any]:
    """The config keys (dotted → value) that select catalogue mode ``mode`` in Agent Lightning's trainer.

    Raises ValueError for a mode no trainer can train with, and for one the installed verl lacks (naming the verl
    it needs).
    """
    entry = _entry(mode)
    if not entry.settings:
        raise ValueError(f"loss mode {mode!r} ({entry.family}) is not one Agent Lightning's trainer can train with")
    if entry.verl_problem:
        raise ValueError(f"loss mode {mode!r}: {entry.verl_problem}")
    return dict(entry.settings)


def mode_from_config(cfg: DictConfig) -> str | None:
    """The catalogue mode a composed config selects, or None when no entry's keys match (say, ``gspo``)."""
    values: dict[str, Any] = {}  # each key read once: the entries share three, and a select costs ~30 µs

    def value(key: str) -> Any:
        if key not in values:
            values[key] = OmegaConf.select(cfg, key, default=None)
        return values[key]

    for name, entry in LOSS_MODES.items():
        if entry.settings and all(value(key) == wanted for key, wanted in entry.settings.items()):
            return name
    return None


def trainable_modes() -> list[str]:
    """The catalogue modes a training run can use, in catalogue order."""
    return [name for name, entry in LOSS_MODES.items() if entry.trainable]


def mode_table() -> str:
    """The catalogue as a Markdown table (docs/normalizations.md's mode table is this, pinned by a test)."""
    lines = [
        "| mode | what it is | per-token weight | batch loss scale | a rollout split into k rows | also depends on "
        "| trainable with | the same objective elsewhere |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in LOSS_MODES.items():
        keys = " ".join(f"`{k.rsplit('.', 1)[-1]}={v}`" for k, v in m.settings.items()) or "—"
        keys += f" (verl ≥ {m.verl_feature.since})" if m.verl_feature else ""
        depends = ", ".join(m.depends_on) or "—"
        label = f"[{m.label}]({m.source})"
        elsewhere = "; ".join(f"`{alias}`" if "=" in alias or "--" in alias else alias for alias in m.known_as) or "—"
        lines.append(
            f"| `{name}` | {label} | `{m.formula}` | {m.scale} | {m.split} | {depends} | {keys} | {elsewhere} |"
        )
    return "\n".join(lines)


def known_as(name: str) -> tuple[str, str] | None:
    """``(catalogue mode, the other framework's option)`` for an option name another framework uses for the same
    objective (``prompt_mean``, ``sample_mean``, ``dr_grpo``), or None: what "unknown loss mode" messages suggest."""
    wanted = re.escape(str(name).lower())
    for mode, entry in LOSS_MODES.items():
        for alias in entry.known_as:
            if re.search(rf"(^|[\s=]){wanted}($|[\s,)])", alias.lower()):
                return mode, alias
    return None


def unknown_mode_hint(name: str) -> str:
    """`` (did you mean 'x'?)`` for a near catalogue name or another framework's name of the same objective; or ''."""
    alias = known_as(name)
    if alias is not None:
        return f" (did you mean {alias[0]!r}? the same objective as {alias[1]})"
    near = difflib.get_close_matches(str(name), list(LOSS_MODES), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _entry(mode: str) -> LossMode:
    if mode not in LOSS_MODES:
        raise ValueError(f"unknown loss mode {mode!r}{unknown_mode_hint(mode)}: choose from {list(LOSS_MODES)}")
    return LOSS_MODES[mode]
