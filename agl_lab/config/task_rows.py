"""How long the lab's agent tasks make their rows, against the trace aggregator's limits.

Rows are padded to the aggregator's limits, as Agent Lightning pads them, so the short-run preset keeps the limits
just above the longest rows its task makes (``conf/short_run.yaml``). Raise ``lab.max_turns`` and rows outgrow
them: prompts are cut and their rows dropped, responses cut. The doctor warns with the limits that fit
(:func:`row_limit_problem`), and the training panel raises them as its turns grow (:func:`fitting_limits`);
tests/test_tasks.py checks :func:`lock_row_lengths` on real episodes.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from agl_lab.core.aggregation import aggregation_limits
from agl_lab.core.keys import AGGREGATOR, DATA, MAX_TURNS, RESPONSE_LENGTH, TASK

__all__ = ["fitting_limits", "lock_row_lengths", "row_limit_problem"]


def lock_row_lengths(*, max_turns: int, call_tokens: int) -> dict[str, int]:
    """The longest rows the ``lock`` task can make, in tokens.

    A first prompt is 3 tokens (``lock L3 try``), each call answers at most ``call_tokens``
    (``rollout.response_length``), a wrong guess adds a 2-token observation (``no try``), and a rewritten context
    is 4 tokens plus one per earlier guess.
    """
    per_turn = call_tokens + 2
    return {
        "trajectory_prompt": max_turns + 3,  # a context rewritten after max_turns - 1 guesses
        "trajectory_response": per_turn * max_turns - 2,  # every call merged, with the observations between them
        "transition_prompt": 3 + per_turn * (max_turns - 1),  # the last call's prompt: the whole context so far
        "transition_response": call_tokens,
    }


def fitting_limits(cfg: DictConfig) -> dict[str, int]:
    """The limit overrides (dotlist key -> tokens) that make the task's longest rows fit; empty when they fit.

    Only raises limits (rows are padded to them, so larger is slower). For ``lab.task=lock`` with positive integer
    ``lab.max_turns`` and ``rollout.response_length``; other tasks get ``{}``. The training panel applies these when
    its ``max turns`` or ``level`` changes; the doctor's warning names them as its fix.
    """
    turns = OmegaConf.select(cfg, MAX_TURNS, default=None)
    call_tokens = OmegaConf.select(cfg, RESPONSE_LENGTH, default=None)
    task = OmegaConf.select(cfg, TASK, default=None)
    if task != "lock" or not all(_positive_int(v) for v in (turns, call_tokens)):
        return {}
    limits, longest = aggregation_limits(cfg), lock_row_lengths(max_turns=turns, call_tokens=call_tokens)
    level = _level(limits)
    prefix = f"{AGGREGATOR}.trajectory_" if level == "trajectory" else f"{DATA}."
    return {
        f"{prefix}max_{part}_length": longest[f"{level}_{part}"]
        for part in ("prompt", "response")
        if longest[f"{level}_{part}"] > limits[f"max_{part}_length"]
    }


def row_limit_problem(cfg: DictConfig) -> tuple[str, str] | None:
    """``(message, fix)`` when the configured task makes rows longer than the aggregator's limits, else None."""
    raise_to = fitting_limits(cfg)
    if not raise_to:
        return None
    limits = aggregation_limits(cfg)
    level = _level(limits)
    longest = lock_row_lengths(max_turns=cfg.lab.max_turns, call_tokens=cfg.actor_rollout_ref.rollout.response_length)
    prefix = f"{AGGREGATOR}.trajectory_" if level == "trajectory" else f"{DATA}."
    keys = {part: f"{prefix}max_{part}_length" for part in ("prompt", "response")}
    message = (
        f"{MAX_TURNS}={cfg.lab.max_turns} makes {level}-level rows of up to {longest[f'{level}_prompt']} prompt "
        f"and {longest[f'{level}_response']} response tokens, over {keys['prompt']}={limits['max_prompt_length']} "
        f"or {keys['response']}={limits['max_response_length']}: longer prompts are cut and their rows dropped "
        "(training/n_sample_dropped/marked), longer responses cut (training/n_truncated_sample)"
    )
    fitted = {keys[part]: raise_to.get(keys[part], limits[f"max_{part}_length"]) for part in keys}
    settings = " and ".join(f"{key}={value}" for key, value in fitted.items())
    return message, f"set {settings} (rows are padded to the limits: larger is slower), or fewer turns"


def _level(limits: dict) -> str:
    return "trajectory" if str(limits["level"]).startswith("trajectory") else "transition"


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
