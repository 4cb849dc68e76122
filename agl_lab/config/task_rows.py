"""How long the lab's agent tasks make their rows, against the trace aggregator's limits.

Rows are padded to the aggregator's limits, as Agent Lightning pads them, so the short-run preset keeps the limits
just above the longest rows its task makes (``conf/short_run.yaml``). Raise ``lab.max_turns`` and rows outgrow
them: prompts are cut and their rows dropped, responses cut. The doctor warns with the limits that fit
(:func:`row_limit_problem`); tests/test_tasks.py checks :func:`lock_row_lengths` on real episodes.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from agl_lab.core.aggregation import aggregation_limits

__all__ = ["lock_row_lengths", "row_limit_problem"]


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


def row_limit_problem(cfg: DictConfig) -> tuple[str, str] | None:
    """``(message, fix)`` when the configured task makes rows longer than the aggregator's limits, else None."""
    turns = OmegaConf.select(cfg, "lab.max_turns", default=None)
    call_tokens = OmegaConf.select(cfg, "actor_rollout_ref.rollout.response_length", default=None)
    task = OmegaConf.select(cfg, "lab.task", default=None)
    if task != "lock" or not all(isinstance(v, int) and v >= 1 for v in (turns, call_tokens)):
        return None
    limits, longest = aggregation_limits(cfg), lock_row_lengths(max_turns=turns, call_tokens=call_tokens)
    level = "trajectory" if str(limits["level"]).startswith("trajectory") else "transition"
    need = {"prompt": longest[f"{level}_prompt"], "response": longest[f"{level}_response"]}
    have = {"prompt": limits["max_prompt_length"], "response": limits["max_response_length"]}
    if all(need[k] <= have[k] for k in need):
        return None
    prefix = "agentlightning.trace_aggregator.trajectory_" if level == "trajectory" else "data."
    keys = {k: f"{prefix}max_{k}_length" for k in need}
    message = (
        f"lab.max_turns={turns} makes {level}-level rows of up to {need['prompt']} prompt and {need['response']} "
        f"response tokens, over {keys['prompt']}={have['prompt']} or {keys['response']}={have['response']}: longer "
        "prompts are cut and their rows dropped (training/n_sample_dropped/marked), longer responses cut "
        "(training/n_truncated_sample)"
    )
    settings = " and ".join(f"{keys[k]}={max(need[k], have[k])}" for k in need)
    return message, f"set {settings} (rows are padded to the limits: larger is slower), or fewer turns"
