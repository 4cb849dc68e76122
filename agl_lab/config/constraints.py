"""The values each number the trainers read may take: one table, and the doctor's findings derived from it.

Composition checks a value's *type* (:mod:`agl_lab.config.key_types`); this table holds its *range*: what verl's
config dataclasses, Agent Lightning's trainer or the lab's trainer refuse later, crash on, or silently train nothing
with. A null batch size crashes step 1 with a ``TypeError``; ``max_response_length=0`` leaves nothing to train;
``lr=-1`` climbs the loss; ``clip_ratio=-0.2`` clips every token; ``total_training_steps=-5`` runs no step. The doctor
(:func:`constraint_findings`) reports each as an error naming the key, what it must be and the value to set, before
anything runs, so no later stage is the first to refuse. The ``lab:`` section's ranges come from its own field
metadata (:func:`agl_lab.config.lab_config.lab_field_rule`), the one source the widgets read too.

Relations between keys (a mini-batch larger than the batch, a pair set half-way) and finiteness (NaN/inf in any
float) are the doctor's other checks; a value that is not a number at all is a type error from composition.

The docs' config page (docs/config.md, "The doctor's ranges") lists the table (a test keeps the two equal).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agl_lab.config.lab_config import LabConfig, lab_field_rule
from agl_lab.core.keys import (
    ACTOR,
    AGGREGATOR,
    EPOCHS,
    GAMMA,
    KL_COEF,
    LAM,
    MAX_PPO_UPDATE_TIMES,
    MAX_PROMPT_LENGTH,
    MAX_RESPONSE_LENGTH,
    REF_LOG_PROB_MICRO,
    ROLLOUT,
    STEPS,
    TRAIN_BATCH,
    lab_key,
)
from agl_lab.core.ranges import Constraint, show_number
from agl_lab.core.update_cap import CAP_RANGE

__all__ = ["CONSTRAINTS", "Constraint", "constraint_problems"]


_SIZE = Constraint("integer", low=1)
_MICRO = Constraint("integer", low=1, nullable=True)
_NON_NEGATIVE = Constraint("number", low=0)
_POSITIVE = Constraint("number", low=0, low_open=True)
_SHARE = Constraint("number", low=0, high=1)

CONSTRAINTS: dict[str, Constraint] = {
    TRAIN_BATCH: _SIZE,
    MAX_PROMPT_LENGTH: _SIZE,
    MAX_RESPONSE_LENGTH: Constraint("integer", low=1, why=": every response would be empty, nothing trains"),
    f"{ROLLOUT}.n": _SIZE,
    f"{ROLLOUT}.prompt_length": _SIZE,  # data.max_prompt_length unless set apart
    f"{ROLLOUT}.response_length": _SIZE,  # the tokens per LLM call; data.max_response_length unless set apart
    f"{ACTOR}.ppo_mini_batch_size": _SIZE,
    f"{ACTOR}.ppo_epochs": Constraint("integer", low=1, why=": the actor would make no update, so nothing trains"),
    EPOCHS: _SIZE,
    STEPS: Constraint("integer", low=1, nullable=True, why=": no step would run"),
    f"{AGGREGATOR}.trajectory_max_prompt_length": _SIZE,
    f"{AGGREGATOR}.trajectory_max_response_length": _SIZE,
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": _MICRO,
    f"{ACTOR}.ppo_micro_batch_size": _MICRO,
    f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": _MICRO,
    f"{ROLLOUT}.log_prob_micro_batch_size": _MICRO,
    REF_LOG_PROB_MICRO: _MICRO,
    MAX_PPO_UPDATE_TIMES: CAP_RANGE,  # written beside the cap, which checks its own arguments by it
    f"{ACTOR}.optim.lr": Constraint("number", low=0, why=": a negative learning rate climbs the loss"),
    f"{ACTOR}.loss_scale_factor": Constraint(
        "number",
        low=0,
        low_open=True,
        nullable=True,
        why=": verl divides the loss by it (seq-mean-token-sum-norm), so a negative one flips the loss's sign and "
        "every update climbs it, away from the rewards",
        fix=f"set {ACTOR}.loss_scale_factor=null (verl's default: the response length) or a positive number",
    ),
    f"{ACTOR}.kl_loss_coef": _NON_NEGATIVE,
    KL_COEF: _NON_NEGATIVE,
    f"{ROLLOUT}.temperature": Constraint(
        "number", low=0, low_open=True, why=": log-probs are taken on logits divided by it (0 is greedy decoding)"
    ),
    f"{ACTOR}.clip_ratio": Constraint("number", low=0, low_open=True, why=": PPO would clip every token"),
    f"{ACTOR}.clip_ratio_low": _POSITIVE,
    f"{ACTOR}.clip_ratio_high": _POSITIVE,
    f"{ACTOR}.grad_clip": Constraint("number", low=0, low_open=True, why=": every gradient would be scaled to 0"),
    f"{ACTOR}.clip_ratio_c": Constraint(
        "number", low=1, low_open=True, text="clip_ratio_c must be greater than 1.0, got {value}"
    ),
    f"{ROLLOUT}.top_p": Constraint(
        "number",
        low=0,
        high=1,
        low_open=True,
        why=": nucleus sampling keeps the tokens that cover top_p of the probability, so 0 keeps none",
    ),  # fmt: skip
    f"{ROLLOUT}.top_k": Constraint("integer", low=-1, text="must be -1 (off) or >= 0, got {value}"),
    GAMMA: _SHARE,
    LAM: _SHARE,
}
# the lab: section's fields with a range, from their own metadata
for _name, _field in LabConfig.__dataclass_fields__.items():
    _rule = lab_field_rule(_name)
    if "low" in _rule:
        _kind = "integer" if _field.type in (int, "int") else "number"
        CONSTRAINTS[lab_key(_name)] = Constraint(_kind, low=_rule["low"], high=_rule.get("high"))


def constraint_problems(cfg: DictConfig, *, default: Callable[[str], Any]) -> list[tuple[str, str, str]]:
    """``(key, message, fix)`` for every value of ``cfg`` outside :data:`CONSTRAINTS` (``default``: a key's default,
    suggested as the fix when it is acceptable)."""
    problems = []
    for key, rule in CONSTRAINTS.items():
        parent, _, name = key.rpartition(".")
        section = OmegaConf.select(cfg, parent, default=None)
        if isinstance(section, DictConfig) and name in section and OmegaConf.is_interpolation(section, name):
            continue  # it follows another key (rollout.response_length: data.max_response_length), checked there
        value = OmegaConf.select(cfg, key, default=None)
        message = rule.problem(value)
        if message is None:
            continue
        suggested = default(key)
        fits = suggested is not None and rule.accepts(suggested)
        example = f" (Agent Lightning's default: {show_number(suggested)})" if fits else ""
        problems.append((key, message, rule.fix or f"set {key} to {rule.describe()}{example}"))
    return problems
