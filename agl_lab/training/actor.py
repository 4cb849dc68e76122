"""The actor side of a short run: old/reference log-probs, and the PPO update in mini- and micro-batches.

verl 0.9.1 no longer ships the single-process ``DataParallelPPOActor`` (``verl.workers.actor.dp_actor``);
its actor runs inside the FSDP/Megatron engine workers, which need ``torch.distributed`` process groups and
an engine per model. So this is a small loop of verl's own parts, in the order verl's engine applies them:

* the settings are verl's ``ActorConfig`` (built by verl from ``actor_rollout_ref.actor``, with its checks);
* the policy loss is ``get_policy_loss_fn(policy_loss.loss_mode)`` from verl's registry (``per_rollout_mean``
  is registered there by ``import agl_lab``), called with ``config.global_batch_info`` set per mini-batch to
  the mini-batch's rows and tokens, so summing the micro-batch losses gives the mini-batch loss;
* entropy and KL terms use verl's ``entropy_from_logits``, ``kl_penalty`` and ``agg_loss``; a row's
  ``loss_weight`` (verl PR #7580's modes, :mod:`agl_lab.core.row_weights`) multiplies its entropy and KL too;
* the optimizer and LR schedule are verl's ``build_optimizer`` and warmup schedules; gradients are clipped at
  ``optim.clip_grad`` and a step with a non-finite gradient norm is skipped, as verl does.

Mini-batches hold ``ppo_mini_batch_size × rollout.n`` rows (``agl_lab.core.pipeline.mini_batch_rows``; the last may
be short after whole-rollout drops, ``lab.cap_drop_unit=rollout``), micro-batches
``ppo_micro_batch_size_per_gpu`` rows; ``ppo_epochs`` passes, reshuffled per epoch when ``actor.shuffle``.
As in Agent Lightning, nothing keeps one rollout's rows in the same mini-batch.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.utils.metric import reduce_metrics
from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup
from verl.workers.config import ActorConfig
from verl.workers.config.optimizer import build_optimizer

from agl_lab.core.keys import ACTOR_GRAD_NORM, ACTOR_LR, ACTOR_PG_LOSS, LR_SCHEDULER
from agl_lab.core.row_sums import trainable_tokens
from agl_lab.core.row_weights import LOSS_WEIGHT, weighted_terms
from agl_lab.training.policy import Policy, score

__all__ = ["LabActor", "build_optimizer_and_scheduler", "compute_log_probs", "update_actor"]

_SCORE_FIELDS = ("input_ids", "attention_mask", "position_ids")


class LabActor:
    """``lab.actor=lab``: this module's loop on the lab's ``Policy``, trained in place, with verl's optimizer and
    LR schedule (stepped once per update, as verl's trainer does).

    The interface :class:`agl_lab.training.verl_actor.VerlActor` shares: :meth:`compute_log_probs`, :meth:`update`,
    :meth:`close`.
    """

    def __init__(
        self, policy: Policy, actor: ActorConfig, *, mini_batch_rows: int, log_prob_micro: int, total_steps: int
    ) -> None:
        self.policy, self.actor = policy, actor
        self.mini_batch_rows, self.log_prob_micro = mini_batch_rows, log_prob_micro
        self.optimizer, self.scheduler = build_optimizer_and_scheduler(policy, actor, total_steps=total_steps)

    def compute_log_probs(
        self, batch: DataProto, *, temperature: float, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return compute_log_probs(
            self.policy, batch, micro_batch_size=self.log_prob_micro, temperature=temperature, with_entropy=with_entropy
        )

    def update(self, batch: DataProto, *, temperature: float, step: int) -> dict[str, float]:
        """:func:`update_actor`, then one LR-schedule step; ``actor/lr`` is the LR this update trained with."""
        metrics = update_actor(
            self.policy,
            self.optimizer,
            batch,
            actor=self.actor,
            mini_batch_rows=self.mini_batch_rows,
            temperature=temperature,
            step=step,
        )
        metrics[ACTOR_LR] = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        return metrics

    def close(self) -> None:
        pass  # nothing outside the policy, which the run keeps

    def __enter__(self) -> LabActor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def update_actor(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    batch: DataProto,
    *,
    actor: ActorConfig,
    mini_batch_rows: int,
    temperature: float,
    step: int,
) -> dict[str, float]:
    """PPO epochs over ``batch`` in mini-batches of ``mini_batch_rows`` rows; one optimizer step per mini-batch.

    ``batch`` needs ``old_log_probs``, ``advantages``, ``response_mask`` (and ``ref_log_prob`` with
    ``use_kl_loss``). The last mini-batch may be short (``lab.cap_drop_unit=rollout`` keeps whole rollouts): a
    seq-mean loss still divides by ``mini_batch_rows`` (verl's configured ``global_batch_size``), so its rows weigh what
    rows in a full one weigh. Returns verl's ``actor/*`` metrics, averaged over mini-batches.
    """
    n = len(batch)
    if n == 0:
        raise ValueError("the actor update got no rows: the trainer skips a step the drops leave empty")
    fields = [*_SCORE_FIELDS, "response_mask", "old_log_probs", "advantages"]
    fields += ["ref_log_prob"] if actor.use_kl_loss else []
    fields += [key for key in ("rollout_is_weights", LOSS_WEIGHT) if key in batch.batch.keys()]
    data = batch.batch.select(*fields).to(policy.device)
    loss_fn = get_policy_loss_fn(actor.policy_loss.loss_mode)
    micro = int(actor.ppo_micro_batch_size_per_gpu or mini_batch_rows)
    policy.model.train()

    collected: dict[str, list[float]] = {}
    for epoch in range(actor.ppo_epochs):
        order = np.arange(n)
        if actor.shuffle:
            order = np.random.default_rng([actor.data_loader_seed, step, epoch]).permutation(n)
        for start in range(0, n, mini_batch_rows):
            mini = data[torch.from_numpy(order[start : start + mini_batch_rows])]
            metrics = _mini_batch(
                policy, optimizer, mini, actor=actor, loss_fn=loss_fn, micro=micro, temperature=temperature,
                rows=mini_batch_rows,
            )  # fmt: skip
            for key, value in metrics.items():
                collected.setdefault(key, []).append(value)
    return {key: float(value) for key, value in reduce_metrics(collected).items()}


@torch.no_grad()
def compute_log_probs(
    policy: Policy, batch: DataProto, *, micro_batch_size: int, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (rows, R) of every row's response under ``policy``, and entropies when asked; on the CPU."""
    policy.model.eval()
    data = batch.batch.select(*_SCORE_FIELDS, "responses")
    width = data["responses"].shape[-1]
    log_probs, entropies = [], []
    for part in data.split(micro_batch_size):
        part = part.to(policy.device)
        log_prob, entropy = score(
            policy,
            input_ids=part["input_ids"],
            attention_mask=part["attention_mask"],
            position_ids=part["position_ids"],
            response_length=width,
            temperature=temperature,
            with_entropy=with_entropy,
        )
        log_probs.append(log_prob.cpu())
        entropies.append(entropy.cpu() if entropy is not None else None)
    return torch.cat(log_probs), (torch.cat(entropies) if with_entropy else None)


def build_optimizer_and_scheduler(
    policy: Policy, actor: ActorConfig, *, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """verl's optimizer from ``actor.optim`` and its LR schedule, stepped once per training step as verl does."""
    optim = actor.optim
    # only what trains: with a LoRA adapter (agl_lab.training.lora) the base weights are frozen
    optimizer = build_optimizer([p for p in policy.model.parameters() if p.requires_grad], optim)
    warmup = optim.lr_warmup_steps if optim.lr_warmup_steps and optim.lr_warmup_steps > 0 else None
    warmup = warmup if warmup is not None else int(optim.lr_warmup_steps_ratio * total_steps)
    if optim.lr_scheduler_type == "constant":
        return optimizer, get_constant_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=warmup)
    if optim.lr_scheduler_type == "cosine":
        scheduler = get_cosine_schedule_with_warmup(
            optimizer=optimizer,
            num_warmup_steps=warmup,
            num_training_steps=total_steps,
            min_lr_ratio=optim.min_lr_ratio,
            num_cycles=optim.num_cycles,
            zero_indexed_step=optim.zero_indexed_step,
        )
        return optimizer, scheduler
    raise ValueError(
        f"{LR_SCHEDULER}={optim.lr_scheduler_type!r} is not supported by verl's "
        "FSDP engine or the lab trainer: use constant or cosine"
    )


def _mini_batch(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    mini: TensorDict,
    *,
    actor: ActorConfig,
    loss_fn,
    micro: int,
    temperature: float,
    rows: int,
) -> dict[str, Any]:
    mask = mini["response_mask"]  # (mini, R)
    # What verl's engine puts in global_batch_info: the loss of each micro-batch is scaled to the whole mini-batch.
    # global_batch_size is the configured mini-batch (verl's engine passes its config's), so a short last one's rows
    # weigh in a seq-mean loss what they weigh in a full one
    actor.global_batch_info.update(
        dp_size=1,
        batch_num_tokens=int(trainable_tokens(mask).sum()),
        global_batch_size=rows,
        loss_scale_factor=actor.loss_scale_factor,
    )
    with_entropy = actor.entropy_coeff != 0
    optimizer.zero_grad(set_to_none=True)
    metrics: dict[str, list[float]] = {}
    for part in mini.split(micro):
        response_mask = part["response_mask"].bool()  # (micro, R)
        log_prob, entropy = score(
            policy,
            input_ids=part["input_ids"],
            attention_mask=part["attention_mask"],
            position_ids=part["position_ids"],
            response_length=response_mask.shape[-1],
            temperature=temperature,
            with_entropy=with_entropy,
        )
        pg_loss, pg_metrics = loss_fn(
            old_log_prob=part["old_log_probs"],
            log_prob=log_prob,
            advantages=part["advantages"],
            response_mask=response_mask,
            loss_agg_mode=actor.loss_agg_mode,
            config=actor,
            rollout_is_weights=part.get("rollout_is_weights", None),
        )
        policy_loss = pg_loss
        terms = {ACTOR_PG_LOSS: pg_loss.item()}
        row_weight = part.get(LOSS_WEIGHT, None)  # (micro,): verl PR #7580's weight is on every term, not only the pg
        if with_entropy:
            (entropy,) = weighted_terms(row_weight, entropy)  # (micro, R)
            entropy_loss = agg_loss(entropy, response_mask, actor.loss_agg_mode, **actor.global_batch_info)
            policy_loss = policy_loss - actor.entropy_coeff * entropy_loss
            terms["actor/entropy_loss"] = entropy_loss.item()
        if actor.use_kl_loss:
            kld = kl_penalty(logprob=log_prob, ref_logprob=part["ref_log_prob"], kl_penalty=actor.kl_loss_type)
            (kld,) = weighted_terms(row_weight, kld)  # (micro, R)
            kl_loss = agg_loss(kld, response_mask, actor.loss_agg_mode, **actor.global_batch_info)
            policy_loss = policy_loss + actor.kl_loss_coef * kl_loss
            terms["actor/kl_loss"] = kl_loss.item()
        policy_loss.backward()
        for key, value in {**terms, **pg_metrics}.items():
            metrics.setdefault(key, []).append(float(value))

    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.model.parameters(), max_norm=actor.optim.clip_grad))
    if math.isfinite(grad_norm):
        optimizer.step()
    else:
        warnings.warn(f"grad_norm is not finite ({grad_norm}): skipping this optimizer step", stacklevel=2)
        optimizer.zero_grad(set_to_none=True)
    # losses add up over micro-batches (each is already a share of the mini-batch loss); ratios are averaged
    out: dict[str, Any] = {key: sum(v) if key.endswith("_loss") else float(np.mean(v)) for key, v in metrics.items()}
    out[ACTOR_GRAD_NORM] = grad_norm
    if actor.use_kl_loss:
        out["actor/kl_coef"] = actor.kl_loss_coef
    return out
