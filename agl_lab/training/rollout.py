"""Sampling rollouts: the current policy plays the task's episodes, and each LLM call is recorded as tokens.

One step samples ``data.train_batch_size`` dataset items and ``actor_rollout_ref.rollout.n`` episodes of
each (one GRPO group per item). Episodes run side by side: every turn, the prompts of all unfinished
episodes go to the policy as one batch, with verl's rollout settings (``temperature``, ``top_k``, ``top_p``,
``response_length`` new tokens per call), each prompt in the policy's tokens and, when its tokenizer has one, its chat
template (:mod:`agl_lab.training.conversation`). What comes out is what Agent Lightning's store holds for each
rollout, the sequence of ``(prompt ids, response ids)`` calls and one final reward, ready for
:func:`agl_lab.core.aggregation.aggregate`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from agl_lab.core.aggregation import LLMCall, Rollout
from agl_lab.core.keys import CONTEXT_REWRITES, GENERATED_TOKENS, MEAN_TURNS, NO_GUESS_RATE, SUCCESS_RATE
from agl_lab.training.conversation import Conversation
from agl_lab.training.kv_reuse import KVPrefix
from agl_lab.training.policy import Policy, StopEvent, generate
from agl_lab.training.tasks import NO_GUESS, Task

__all__ = ["SamplingParams", "collect_rollouts", "sampling_params"]


@dataclass(frozen=True)
class SamplingParams:
    """verl's ``actor_rollout_ref.rollout`` settings that a short run's sampler uses."""

    n: int
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float


def sampling_params(cfg: DictConfig) -> SamplingParams:
    """verl's rollout keys as the sampler takes them (their ranges are the doctor's: agl_lab.config.constraints)."""
    rollout = cfg.actor_rollout_ref.rollout
    return SamplingParams(
        n=int(rollout.n),
        max_new_tokens=int(rollout.response_length),
        temperature=float(rollout.temperature),
        top_k=int(rollout.top_k),
        top_p=float(rollout.top_p),
    )


def collect_rollouts(
    policy: Policy,
    task: Task,
    *,
    step: int,
    items: list[int],
    sampling: SamplingParams,
    generator: torch.Generator,
    stop_event: StopEvent | None = None,
    on_done: Callable[[int], Any] | None = None,
    dialogues: list[list[dict[str, str]]] | None = None,
) -> tuple[list[Rollout], dict[str, Any]]:
    """Play ``sampling.n`` episodes of every item; return the rollouts and the task's ``lab/*`` metrics.

    Rollout ``k`` of item ``i`` gets ``data_id = "s<step>/p<i>"`` and ``rollout_id = "s<step>/p<i>/r<k>"``:
    the data id is the GRPO group, as Agent Lightning's trainer sets ``uid = data_id_list``. ``stop_event``: passed
    to the sampler (:func:`~agl_lab.training.policy.generate`); ``on_done(k)``: called after each round of calls with
    the number of episodes it finished; ``dialogues``: filled with each episode's messages as text (``role``:
    ``user`` for what the environment said, ``assistant`` for the policy's answers; ``rewrite: true`` on a user
    message that replaced the context, ``fresh: true`` on a workflow's next call, a prompt of its own).
    """
    # episode j plays item j // n: the n rollouts of an item sit next to each other, as verl repeats prompts
    episodes = [task.start(item, step=step, index=j) for j, item in enumerate(np.repeat(items, sampling.n))]
    contexts = [Conversation(policy.tokenizer, episode.prompt) for episode in episodes]
    messages = [[{"role": "user", "content": episode.prompt}] for episode in episodes]
    calls: list[list[LLMCall]] = [[] for _ in episodes]
    kv = [KVPrefix() for _ in episodes]  # each episode's keys and values: a turn prefills only its new tokens
    generated = 0
    while active := [j for j, episode in enumerate(episodes) if not episode.done]:
        responses = generate(
            policy,
            [contexts[j].ids for j in active],
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            generator=generator,
            stop_event=stop_event,
            prefixes=[kv[j] for j in active],
        )
        for j, response in zip(active, responses, strict=True):
            calls[j].append(LLMCall(prompt_ids=tuple(contexts[j].ids), response_ids=tuple(response)))
            generated += len(response)
            text = policy.decode(response)
            messages[j].append({"role": "assistant", "content": text})
            # cut off: the call ended at its token limit, not at the end-of-turn token (the task decides how to read it)
            turn = episodes[j].respond(text, cut_off=not response or response[-1] != policy.eos_token_id)
            if turn.rewrite is not None:
                contexts[j].restart(turn.rewrite)
                messages[j].append({"role": "user", "content": turn.rewrite, "rewrite": True})
            elif turn.next_prompt is not None:  # a workflow's next call: a fresh prompt, not a rewrite
                contexts[j].restart(turn.next_prompt)
                messages[j].append({"role": "user", "content": turn.next_prompt, "fresh": True})
            elif not turn.done:
                contexts[j].answer(response, turn.observation)
                messages[j].append({"role": "user", "content": turn.observation})
        if on_done is not None:
            on_done(sum(episodes[j].done for j in active))
    if dialogues is not None:
        dialogues.extend(messages)

    rollouts = []
    for j, episode in enumerate(episodes):
        data_id = f"s{step}/p{j // sampling.n}"
        rollouts.append(
            Rollout(
                rollout_id=f"{data_id}/r{j % sampling.n}",
                data_id=data_id,
                calls=tuple(calls[j]),
                reward=1.0 if episode.success else 0.0,
                step=step,
                sample_idx_in_step=j // sampling.n,
                turn_rewards=tuple(episode.turn_rewards) if task.turn_cost else None,  # lab.turn_cost: off when 0
            )
        )
    turns = np.array([episode.turns for episode in episodes])
    metrics = {
        SUCCESS_RATE: float(np.mean([episode.success for episode in episodes])),
        MEAN_TURNS: float(turns.mean()),
        NO_GUESS_RATE: sum(e.guesses.count(NO_GUESS) for e in episodes) / int(turns.sum()),
        CONTEXT_REWRITES: sum(episode.rewrites for episode in episodes),
        GENERATED_TOKENS: generated,
        **_response_lengths(episodes, calls),
    }
    return rollouts, metrics


def _response_lengths(episodes, calls: list[list[LLMCall]]) -> dict[str, float]:
    """Mean tokens per LLM call (EOS included) over the solved and over the failed rollouts (Dr. GRPO's length bias
    shows in the failed ones); a step without such rollouts logs none."""
    metrics = {}
    for name, solved in (("solved", True), ("failed", False)):
        lengths = [
            len(c.response_ids) for e, cs in zip(episodes, calls, strict=True) if e.success == solved for c in cs
        ]
        if lengths:
            metrics[f"lab/response_length_{name}"] = float(np.mean(lengths))
    return metrics
