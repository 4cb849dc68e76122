"""Which estimators verl's ``compute_advantage`` hands ``algorithm.norm_adv_by_std_in_grpo``, found by running it.

verl's ``grpo``, ``grpo_vectorized`` and ``grpo_passk`` each take a ``norm_adv_by_std_in_grpo`` argument, but
``compute_advantage`` (verl's trainer, Agent Lightning's and the lab's all call it) passes the config's value only to
``grpo``; ``grpo_passk`` reads it from the config itself, and ``grpo_vectorized`` is left with its default (True). So
``adv_estimator=grpo_vectorized`` with ``norm_adv_by_std_in_grpo=false`` still divides every advantage by its group's
standard deviation: a Dr. GRPO-style run that is silently plain GRPO. Read in verl 0.8.0 and 0.9.1.

Rather than keep a list of such estimators per verl version, :func:`std_flag_ignored` asks the installed verl: it runs
``compute_advantage`` on four rows in two prompt groups, with the flag false and true (in the keyword and in the
config, as the trainers pass both), and calls the flag ignored when both give the same advantages. An estimator that
needs more than outcome rewards (``gdpo``: its reward keys) is not probed. The config doctor turns that into a warning
(:mod:`agl_lab.config.doctor`); ``agl-lab check`` and notebook 02 show it."""

from __future__ import annotations

import functools
import inspect
import warnings

import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab.core.keys import ALGORITHM, ESTIMATOR, GAMMA, LAM, NORM_ADV_BY_STD

__all__ = ["std_flag_finding", "std_flag_ignored"]

_FLAG = NORM_ADV_BY_STD.rsplit(".", 1)[1]
_REWARDS = (0.0, 1.0, 0.0, 3.0)  # (rows,): two groups of two, each with a spread other than 1


@functools.cache
def std_flag_ignored(estimator: str) -> bool:
    """Whether verl's ``compute_advantage`` gives ``estimator`` the same advantages with the flag false as with it
    true, although the estimator's own function takes the flag. False for an estimator that does not take it (the flag
    means nothing there) and when the probe cannot run the estimator (it needs more than outcome rewards)."""
    try:
        function = core_algos.get_adv_estimator_fn(estimator)
    except ValueError:
        return False
    if _FLAG not in inspect.signature(function).parameters:
        return False
    try:
        off, on = (_probe(estimator, flag) for flag in (False, True))
    except Exception:  # noqa: BLE001  (an estimator that needs fields four outcome rows lack: nothing to say)
        return False
    return bool(torch.equal(off, on))


def std_flag_finding(estimator: str, flag: object) -> tuple[str, str, str] | None:
    """``(key, message, fix)`` when ``flag`` (the config's ``norm_adv_by_std_in_grpo``) is false and verl ignores it
    for ``estimator``; None otherwise."""
    if flag is not False or not std_flag_ignored(estimator):
        return None
    return (
        NORM_ADV_BY_STD,
        f"{NORM_ADV_BY_STD}=false does nothing with {ESTIMATOR}={estimator}: verl's compute_advantage never passes "
        f"the flag to {estimator}, which still divides each advantage by its group's standard deviation (found by "
        "running the installed verl's compute_advantage both ways)",
        f"use {ESTIMATOR}=grpo (the same estimator, and it honours the flag), or drop {NORM_ADV_BY_STD}=false",
    )


def _probe(estimator: str, flag: bool) -> torch.Tensor:
    rows = len(_REWARDS)
    rewards = torch.zeros(rows, 2)  # (rows, R): each row's reward on its last token
    rewards[:, -1] = torch.tensor(_REWARDS)
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(rows, 2)},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)},
    )
    cfg = OmegaConf.create()  # the config's algorithm section as the trainers pass it, named through core/keys
    for key, value in ((ESTIMATOR, estimator), (NORM_ADV_BY_STD, flag), (GAMMA, 1.0), (LAM, 1.0)):
        OmegaConf.update(cfg, key, value)
    algorithm = OmegaConf.select(cfg, ALGORITHM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = compute_advantage(
            batch, adv_estimator=estimator, gamma=1.0, lam=1.0, num_repeat=2, norm_adv_by_std_in_grpo=flag,
            config=algorithm,
        )  # fmt: skip
    return out.batch["advantages"]
