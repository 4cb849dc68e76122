"""The named starting points a config is composed from (:data:`BASES`), each with the YAML it adds.

Every entrance composes from one of them (:func:`agl_lab.config.compose.compose_from`) and says which: ``agl``
(Agent Lightning's defaults: what ``agl-lab launch`` sends), ``example`` (+ the example overrides) and ``short-run``
(+ the short-run preset: ``agl-lab train``, ``demo``, ``sweep``, the notebooks' runs; + the pretrained preset when
the policy is a pretrained model: :func:`agl_lab.config.model_source.is_pretrained`). This module loads no Hydra, so
a command that only names a base stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

__all__ = ["BASES", "PRETRAINED_YAML", "SHORT_RUN_YAML", "Base"]

SHORT_RUN_YAML = Path(__file__).with_name("conf") / "short_run.yaml"
PRETRAINED_YAML = SHORT_RUN_YAML.with_name("pretrained.yaml")


@dataclass(frozen=True)
class Base:
    """A named starting point: Agent Lightning's defaults, plus the overrides in ``yaml`` (none for ``agl``)."""

    name: str
    label: str  # one line: what every subcommand prints as the base it composed from
    yaml: Path | None = None
    trainer: str = "lab"  # whose trainer its configs go to (agl_lab.config.doctor.TRAINERS): the doctor speaks of it
    # Overrides between this base's and yours when the config's policy is a pretrained model (lab.model, a .gguf file,
    # a run's saved adapter on one: agl_lab.config.model_source.is_pretrained): the sizes
    # a pretrained chat model needs (prompts of its chat template, answers of sentences, a LoRA adapter)
    pretrained_yaml: Path | None = None

    def overrides(self) -> dict[str, Any]:
        """This base's overrides over Agent Lightning's defaults, as a nested dict (empty for ``agl``)."""
        return OmegaConf.to_container(OmegaConf.load(self.yaml)) if self.yaml else {}


_AGL = "Agent Lightning's defaults"
BASES: dict[str, Base] = {  # what each entrance composes from; `agl-lab check --base NAME` checks any
    "agl": Base("agl", f"{_AGL} (verl's ppo_trainer + Agent Lightning's additions), nothing else", trainer="agl"),
    "example": Base(
        "example", f"{_AGL} + conf/example.yaml (grpo, 2 prompts x 3 rollouts)", SHORT_RUN_YAML.parent / "example.yaml"
    ),
    "short-run": Base(
        "short-run",
        f"{_AGL} + conf/short_run.yaml (grpo, 8 locks x 8 rollouts; + conf/pretrained.yaml for a pretrained lab.model)",
        SHORT_RUN_YAML,
        pretrained_yaml=PRETRAINED_YAML,
    ),
}
