"""Which verl agl_lab runs on, and what agl_lab offers that only the newer of the verls it is tested on has.

Agent Lightning 1.0.x declares ``verl>=0.7.1,<0.9.0`` and its setup installs verl 0.8.0; agl_lab defaults to verl
0.9.1 and is tested on both (``make test VERL=0.8.0``; docs/getting-started.md, "Which verl"). Its batch math is the
same on both: the differential tests against Agent Lightning pass on each. A few things agl_lab offers exist only
from verl 0.9.0 on (:data:`VERL_FEATURES`): the ``token-sum`` loss aggregation, the ``dro`` policy loss and verl's
platform registry (``verl.plugin``), through which ``lab.actor=verl`` runs verl's actor engine in the lab's process.
Under an older verl the mode catalogue and the config doctor refuse them with the version each needs
(:func:`verl_problems`) rather than fail on an import or a ``ValueError`` deep inside verl. One loss also weighs
differently: verl 0.8.0's ``gspo`` aggregates with ``seq-mean-token-mean`` whatever ``loss_agg_mode`` says (from
0.9.0 on it honours it: :func:`forced_aggregation`); the catalogue's weights and a doctor's note follow that.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version

from omegaconf import DictConfig, OmegaConf
from packaging.version import Version

from agl_lab.core.keys import ACTOR_BACKEND, LOSS_AGG_MODE, LOSS_MODE

__all__ = ["AGENT_LIGHTNING_VERL", "DEFAULT_VERL", "VERL_FEATURES", "VERL_VERSION", "VerlFeature", "feature_for"]
__all__ += ["FORCED_AGGREGATIONS", "forced_aggregation", "verl_notes", "verl_problems"]

VERL_VERSION = version("verl")  # the installed verl
DEFAULT_VERL = "0.9.1"  # what `make` installs unless told VERL=0.8.0 (the Makefile's VERL)
AGENT_LIGHTNING_VERL = "0.8.0"  # what Agent Lightning 1.0.x's setup installs (it declares verl>=0.7.1,<0.9.0)


@dataclass(frozen=True)
class VerlFeature:
    """Something agl_lab offers that verl has only from ``since`` on, selected by ``key=value`` in the config."""

    key: str
    value: str
    what: str  # what a message calls it
    since: str  # the first verl release that has it

    def available(self, verl: str = VERL_VERSION) -> bool:
        """Whether verl ``verl`` (the installed one by default) has it."""
        return Version(verl) >= Version(self.since)

    def problem(self, verl: str = VERL_VERSION) -> str | None:
        """Why ``key=value`` cannot run on verl ``verl``, naming the version it needs; None when it can."""
        if self.available(verl):
            return None
        return (
            f"{self.key}={self.value} needs {self.what} (verl {self.since} or newer); this environment has verl {verl} "
            f"(Agent Lightning 1.0.x installs {AGENT_LIGHTNING_VERL})"
        )

    def fix(self) -> str:
        """What to do instead: another value, or the verl that has it."""
        return f"choose another {self.key.rsplit('.', 1)[-1]}, or verl {DEFAULT_VERL} (make ... VERL={DEFAULT_VERL})"


_SINCE_090 = "0.9.0"  # token-sum, dro and verl.plugin arrived together (read in the 0.9.0 and 0.8.0 wheels)
VERL_FEATURES: dict[str, VerlFeature] = {
    "token-sum": VerlFeature(LOSS_AGG_MODE, "token-sum", "verl's token-sum aggregation", _SINCE_090),
    "dro": VerlFeature(LOSS_MODE, "dro", "verl's dro policy loss", _SINCE_090),
    "verl-actor": VerlFeature(
        ACTOR_BACKEND, "verl", "verl's platform registry (verl.plugin) to run verl's actor in the lab", _SINCE_090
    ),
}


def feature_for(key: str, value: object) -> VerlFeature | None:
    """The feature that ``key=value`` selects, or None."""
    return next((f for f in VERL_FEATURES.values() if f.key == key and f.value == value), None)


# Policy losses that, before verl ``since``, aggregate their own way whatever loss_agg_mode says (read in the 0.8.0 and
# 0.9.1 wheels' core_algos): loss mode -> (aggregation, since).
FORCED_AGGREGATIONS = {"gspo": ("seq-mean-token-mean", _SINCE_090)}


def forced_aggregation(loss_mode: object, *, verl: str = VERL_VERSION) -> str | None:
    """The aggregation ``loss_mode`` uses on verl ``verl`` whatever ``loss_agg_mode`` says; None when it honours it."""
    if loss_mode not in FORCED_AGGREGATIONS:
        return None
    aggregation, since = FORCED_AGGREGATIONS[loss_mode]
    return None if Version(verl) >= Version(since) else aggregation


def verl_notes(cfg: DictConfig, *, verl: str = VERL_VERSION) -> list[tuple[str, str, str]]:
    """``(key, message, fix)`` where verl ``verl`` runs ``cfg`` otherwise than it says (gspo on verl 0.8.0)."""
    loss_mode = OmegaConf.select(cfg, LOSS_MODE, default=None)
    agg_key = LOSS_AGG_MODE
    agg_mode = OmegaConf.select(cfg, agg_key, default=None)
    forced = forced_aggregation(loss_mode, verl=verl)
    if forced is None or agg_mode == forced:
        return []
    since = FORCED_AGGREGATIONS[loss_mode][1]
    return [
        (
            agg_key,
            f"verl {verl}'s {loss_mode} aggregates with {forced} whatever loss_agg_mode says ({agg_mode} here); verl "
            f"{since} and newer honour loss_agg_mode",
            f"set {agg_key}={forced} to say what runs, or use verl {DEFAULT_VERL} (make ... VERL={DEFAULT_VERL})",
        )
    ]


def verl_problems(cfg: DictConfig, *, verl: str = VERL_VERSION) -> list[tuple[str, str, str]]:
    """``(key, message, fix)`` for every feature ``cfg`` selects that verl ``verl`` lacks (none on verl 0.9.1)."""
    found = []
    for feature in VERL_FEATURES.values():
        if OmegaConf.select(cfg, feature.key, default=None) == feature.value and (text := feature.problem(verl)):
            found.append((feature.key, text, feature.fix()))
    return found
