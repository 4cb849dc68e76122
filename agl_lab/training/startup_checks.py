"""What the lab trainer refuses as it starts, asked of the very code that refuses it, as doctor findings.

Before its first step a short run builds verl's ``ActorConfig`` from ``actor_rollout_ref.actor`` (the dataclasses check
their own fields: the optimizer's ``warmup_style``, the micro-batch sizes), runs ``ActorConfig.validate`` (batch
divisibility), builds verl's optimizer and LR schedule (:func:`agl_lab.training.actor.build_optimizer_and_scheduler`:
torch's optimizer checks ``weight_decay`` and ``betas``, verl's cosine schedule asserts ``min_lr_ratio``), resolves
``lab.device`` (:func:`agl_lab.training.policy.resolve_device`); its first update calls the policy loss from verl's
registry (``dro`` needs its ``dro_beta``) and verl's ``kl_penalty`` (``kl_loss_type`` must be one it implements).
Each of these runs here as it runs there — the optimizer on one parameter, the loss and the KL on one token — and what
it raises becomes one finding naming the key, verl's own words and the fix: :func:`startup_findings`, which
:func:`agl_lab.training.preflight.trainer_findings` adds to the doctor's, for ``agl-lab check`` and ``train`` alike.

verl often asserts without a message (``assert self.warmup_style in [...]``): the finding then quotes the failed
assertion and where verl makes it. The key is the one the message (or the assertion) names.
"""

from __future__ import annotations

import copy
import re
import traceback
from collections.abc import Callable, Collection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.core_algos import get_policy_loss_fn, kl_penalty
from verl.utils.config import omega_conf_to_dataclass

from agl_lab.config.checks import Finding
from agl_lab.config.tree import leaves
from agl_lab.core.keys import ACTOR, DEVICE, EPOCHS, KL_PENALTY, STEPS, USE_KL_IN_REWARD
from agl_lab.training.actor import build_optimizer_and_scheduler
from agl_lab.training.policy import resolve_device

__all__ = ["KL_TYPES", "startup_findings"]

# verl's kl_penalty estimators (each also with a "+": k2's gradient, straight through); "full" raises there too
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
_UNSET_MICRO = "Please set at least one of"  # verl's words when neither micro-batch size is set
# The fix for what verl refuses, by the key (relative to actor_rollout_ref.actor) the refusal names.
_FIXES = {
    "ppo_micro_batch_size": f"remove it: verl takes only {ACTOR}.ppo_micro_batch_size_per_gpu",
    "optim.warmup_style": f"remove it (verl deprecated it): set {ACTOR}.optim.lr_scheduler_type=constant or cosine",
    "optim.lr_scheduler_type": "use constant or cosine",
    "optim.min_lr_ratio": "set it in [0, 1]: the cosine schedule's floor, as a share of optim.lr",
    "optim.weight_decay": "set it >= 0 (verl's default: 0.01)",
    "optim.betas": "set both in [0, 1), e.g. [0.9,0.999] (verl's default)",
    "policy_loss.dro_beta": "set it to a positive number (DRO's quadratic log-ratio penalty), or use another loss_mode",
}


def startup_findings(cfg: DictConfig, *, erred: Collection[str] = ()) -> tuple[list[Finding], Any]:
    """The findings for what a short run of ``cfg`` would refuse as it starts (module docstring), and verl's actor
    config (None when verl refuses to build it, or was not asked). Run on a config the doctor's key and type checks
    passed; ``erred``: the keys the doctor already refused, whose sections are not asked again (torch would refuse
    ``lr=nan`` a second time, in its own words)."""
    findings = [*_steps(cfg), *_device(cfg)]
    if _touches(erred, ACTOR):
        return [*findings, *_kl(cfg)], None
    actor, problem = _attempt(lambda: omega_conf_to_dataclass(cfg.actor_rollout_ref.actor))
    if problem is not None:
        return [*findings, _refusal(cfg, problem, ACTOR, "verl's actor config refuses it")], None
    checks: list[tuple[str, str, Callable[[], Any]]] = [
        (ACTOR, "verl refuses the batch sizes", lambda: actor.validate(n_gpus=1, train_batch_size=_batch(cfg))),
        (f"{ACTOR}.optim", "verl's optimizer or LR schedule refuses it", lambda: _optimizer(actor, cfg)),
        (f"{ACTOR}.policy_loss", "verl's policy loss refuses the config at its first call", lambda: _loss(actor)),
    ]
    for section, what, check in checks:
        _, problem = _attempt(check)
        if problem is not None:
            findings.append(_refusal(cfg, problem, section, what))
    return [*findings, *_kl(cfg)], actor


def _touches(keys: Collection[str], section: str) -> bool:
    return any(key == section or key.startswith(f"{section}.") for key in keys)


def _steps(cfg: DictConfig) -> list[Finding]:
    steps = OmegaConf.select(cfg, STEPS)
    if isinstance(steps, int) and not isinstance(steps, bool):
        return []  # a number outside the range is the constraints table's finding
    return [
        Finding(
            "error",
            STEPS,
            f"must be a positive integer for a short run, got {'null' if steps is None else repr(steps)}: the lab "
            f"trainer runs exactly that many steps (Agent Lightning's trainer counts them from {EPOCHS} "
            "and its dataset; the lab's task has none)",
            f"set {STEPS}, e.g. {STEPS}=40 (the short run's)",
        )
    ]


def _device(cfg: DictConfig) -> list[Finding]:
    _, problem = _attempt(lambda: resolve_device(cfg.lab.device))
    if problem is None:
        return []
    text = str(problem).partition(": use ")
    return [Finding("error", DEVICE, text[0], f"use {text[2]}" if text[2] else "use auto, cpu or cuda")]


def _batch(cfg: DictConfig) -> int:
    return int(cfg.data.train_batch_size)


def _optimizer(actor: Any, cfg: DictConfig) -> None:
    """verl's optimizer and LR schedule as the lab's actor builds them, on one parameter: what they refuse does not
    depend on the model."""
    with torch.random.fork_rng(devices=[]):  # a layer's init draws from torch's RNG: a check leaves the run's as it was
        one_parameter = SimpleNamespace(model=torch.nn.Linear(1, 1))
    steps = OmegaConf.select(cfg, STEPS)
    build_optimizer_and_scheduler(one_parameter, actor, total_steps=steps if isinstance(steps, int) else 1)


def _loss(actor: Any) -> None:
    """The policy loss from verl's registry, called once on one token as the lab's actor calls it."""
    actor = copy.deepcopy(actor)  # the update sets global_batch_info per mini-batch; the caller's stays untouched
    actor.global_batch_info.update(
        dp_size=1, batch_num_tokens=1, global_batch_size=1, loss_scale_factor=actor.loss_scale_factor
    )
    log_prob = torch.zeros(1, 1)  # (rows, T)
    get_policy_loss_fn(actor.policy_loss.loss_mode)(
        old_log_prob=log_prob,
        log_prob=log_prob.clone(),
        advantages=torch.ones(1, 1),  # (rows, T)
        response_mask=torch.ones(1, 1, dtype=torch.bool),  # (rows, T)
        loss_agg_mode=actor.loss_agg_mode,
        config=actor,
        rollout_is_weights=None,
    )


def _kl(cfg: DictConfig) -> list[Finding]:
    """verl's kl_penalty on one token for each KL term that is on (the actor's loss, the reward's penalty)."""
    terms = [(f"{ACTOR}.use_kl_loss", f"{ACTOR}.kl_loss_type")]
    terms += [(USE_KL_IN_REWARD, KL_PENALTY)]
    findings = []
    for switch, key in terms:
        name = OmegaConf.select(cfg, key)
        if not OmegaConf.select(cfg, switch):
            continue
        _, problem = _attempt(lambda name=name: kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), kl_penalty=name))
        if problem is not None:
            choices = ", ".join([*KL_TYPES, *(f"{kind}+" for kind in ("k1", "k3", "low_var_kl"))])
            findings.append(
                Finding(
                    "error",
                    key,
                    f"verl's kl_penalty has no {name!r} ({type(problem).__name__} at the first update, with {switch})",
                    f"use one of {choices} (a + adds k2's gradient, straight through)",
                )
            )
    return findings


def _attempt(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except (InstantiationException, ValueError, AssertionError, TypeError, NotImplementedError) as exc:
        return None, exc.__cause__ if isinstance(exc, InstantiationException) and exc.__cause__ else exc


def _refusal(cfg: DictConfig, problem: BaseException, section: str, what: str) -> Finding:
    """A finding for verl's refusal: its message (or the assertion it failed), the key it names, the fix."""
    text = " ".join(str(problem).split()) or _failed_assertion(problem)
    if _UNSET_MICRO in text:  # it names both keys: the one to set is verl's current one
        key = f"{ACTOR}.ppo_micro_batch_size_per_gpu"
        fix = f"set {key}, e.g. to the mini-batch's rows (agl_lab.short_run_config sizes the batch for a short run)"
        return Finding("error", key, f"{what}: {text}", fix)
    names = [path for path, _ in leaves(OmegaConf.select(cfg, section))]
    relative = _named(text, names)
    key = f"{section}.{relative}" if relative else section
    short = key.removeprefix(f"{ACTOR}.")
    generic = f"set {key} to a value verl accepts (agl_lab.short_run_config sizes the batch for a short run)"
    return Finding("error", key, f"{what}: {text}", _FIXES.get(short, generic))


def _failed_assertion(problem: BaseException) -> str:
    """``assert ...`` failed (file:line): the source line verl asserts on, for an AssertionError without a message."""
    frames = traceback.extract_tb(problem.__traceback__)
    if not frames:
        return f"{type(problem).__name__} without a message"
    frame = frames[-1]
    where = Path(frame.filename)
    shown = "/".join(where.parts[where.parts.index("verl") :]) if "verl" in where.parts else where.name
    return f"`{frame.line}` failed ({shown}:{frame.lineno})"


def _named(text: str, names: list[str]) -> str | None:
    """The key among ``names`` (dotted, relative to the section) that ``text`` names first (its last part as a word,
    or that part's singular: ``beta`` names ``betas``); the longest on a tie."""
    found = []
    for name in names:
        last = name.rsplit(".", 1)[-1]
        for word in dict.fromkeys([last, last.removesuffix("s")]):
            match = re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", text)
            if match:
                found.append((match.start(), -len(name), name))
    return min(found)[2] if found else None
