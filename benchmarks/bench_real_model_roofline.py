"""A real-model step against its roofline floor: how far is the lab's step from what the machine can do at best?

The step is the pretrained preset's (``lab.model=smollm2-135m-instruct``, ``conf/pretrained.yaml``: retry_arith, 4
questions x 4 rollouts, up to 3 tries of 32 tokens, LoRA r16 on every linear layer), run by the lab trainer's own
step (:class:`agl_lab.training.train_step.RunState`). Its floor is counted from that step's own tokens (the rollouts'
calls and the rows the actor scored and trained), pass by pass, each pass at the larger of

* its FLOPs at the machine's fp32 matmul rate, measured here on the model's own shapes (the best of a few
  ``torch.mm`` of (tokens x hidden) by (hidden x intermediate), ... , by (hidden x vocabulary) on the threads used),
* its bytes at the machine's memory bandwidth, measured here (the best of a few copies of a 256 MiB tensor): the
  weights once per pass (the output head's only when the pass needs logits) and the KV cache it reads and writes.

The passes: per round of calls, one prefill of the tokens the previous call of each episode did not already encode
(its KV cache reused, :mod:`agl_lab.training.kv_reuse`), the output head at the last position only; one decode
forward per new token of the rows still answering; old log-probs, one forward per micro-batch (the output head where a
response token is predicted); the update, a forward and a backward per micro-batch of each PPO mini-batch and epoch
(LoRA: no gradient of the frozen base weights, so the backward is the activations' gradient only), and one AdamW step
per mini-batch over the adapter.

Side by side in one run, each from the same weights, optimizer state and seed (so the same tokens, whatever the
variant; the last column says so), each adding one change to the one before: ``before`` (the sampler as it was at
bfa9ba5: logits at every prompt position, each turn's whole conversation prefilled again, finished rows kept in the
batch), ``head`` (the output head at the last prompt position only), ``prune`` (a row that ended leaves the batch),
``reuse`` (the KV cache kept across turns: the lab's code), ``1-thread`` (``reuse`` on one torch thread).
Printed: the machine's rates, the floor part by part, then each variant's stages, its step, step / floor, and the load
average beside it. ``--load N`` runs N busy processes beside it.
The first step warms up (dequantized model load, allocator) and is not timed.

Run: ``.venv/bin/python benchmarks/bench_real_model_roofline.py [--load 0] [--variants before,head,reuse]
[key=value ...]``.
"""

from __future__ import annotations

import agl_lab  # noqa: F401  (first: its process settings reach torch only before torch loads)

# isort: split

import argparse
import copy
import functools
import os
import time
from dataclasses import dataclass

import torch
from busy_load import busy_processes

from agl_lab import short_run_config
from agl_lab.training import policy as policy_module
from agl_lab.training import rollout as rollout_module
from agl_lab.training import train_step
from agl_lab.training.preflight import check_trainable
from agl_lab.training.train_step import RunState

VARIANTS = ("before", "head", "prune", "reuse", "1-thread")


@dataclass(frozen=True)
class Shapes:
    """The model's sizes that its FLOPs and bytes follow from."""

    hidden: int
    vocab: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    body: int  # parameters of the layers' frozen linear weights and norms (everything but embedding and head)
    adapter: int  # the LoRA adapter's (trainable) parameters

    @classmethod
    def of(cls, model) -> Shapes:
        config = model.config
        named = list(model.named_parameters())
        adapter = sum(p.numel() for _, p in named if p.requires_grad)
        body = sum(p.numel() for name, p in named if ".layers." in name and not p.requires_grad)
        heads = config.num_attention_heads
        return cls(hidden=config.hidden_size, vocab=config.vocab_size, layers=config.num_hidden_layers, heads=heads,
                   kv_heads=config.num_key_value_heads,
                   head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads, body=body,
                   adapter=adapter)  # fmt: skip


@dataclass
class Rates:
    flops: float  # fp32 matmul FLOP/s, the best of the model's shapes
    bandwidth: float  # bytes/s of a large copy (read + write)


class Floor:
    """Passes of a step, each at max(FLOPs / rate, bytes / bandwidth), summed per part."""

    def __init__(self, shapes: Shapes, rates: Rates) -> None:
        self.s, self.rates = shapes, rates
        self.parts: dict[str, list[float]] = {}  # part -> [seconds, passes, tokens, flops, bytes]

    def forward(self, part: str, rows: list[tuple[int, int]], *, head: int, backward: bool = False) -> None:
        """One batched pass over ``rows`` = [(new tokens, tokens already in its cache)], the output head at ``head``
        positions; ``backward``: the backward of that forward (activations' gradients only: the base is frozen)."""
        s = self.s
        tokens = sum(new for new, _ in rows)
        kv_per_token = 2 * s.kv_heads * s.head_dim * s.layers * 4  # bytes of one token's keys and values, fp32
        # q.k and p.v: 4 * heads * head_dim flops per (query, key) pair per layer, causal within the new tokens
        pairs = sum(new * cached + new * (new + 1) // 2 for new, cached in rows)
        attention = 4 * s.heads * s.head_dim * s.layers * pairs
        linear = 2 * (s.body + s.adapter) * tokens
        output = 2 * s.hidden * s.vocab * head
        if backward:  # dx of every matmul (the frozen weights get no dW), dW of the adapter; attention twice
            linear, attention = 2 * s.body * tokens + 2 * 2 * s.adapter * tokens, 2 * attention
        flops = linear + attention + output
        weights = 4 * (s.body + s.adapter + (s.hidden * s.vocab if head else 0))
        kv = kv_per_token * sum(new + cached for new, cached in rows) + kv_per_token * tokens  # read all, write new
        self._add(part, flops, weights + kv, tokens)

    def optimizer_step(self, part: str) -> None:
        # AdamW over the adapter: read param, grad, two moments; write param and moments (fp32)
        self._add(part, 10 * self.s.adapter, 7 * 4 * self.s.adapter, 0)

    def _add(self, part: str, flops: float, nbytes: float, tokens: int) -> None:
        seconds = max(flops / self.rates.flops, nbytes / self.rates.bandwidth)
        row = self.parts.setdefault(part, [0.0, 0, 0, 0.0, 0.0])
        row[0] += seconds
        row[1] += 1
        row[2] += tokens
        row[3] += flops
        row[4] += nbytes

    def total(self) -> float:
        return sum(row[0] for row in self.parts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", type=int, default=0, help="busy processes beside it (default 0)")
    parser.add_argument("--variants", default=",".join(VARIANTS[:4]), help=f"of {','.join(VARIANTS)}")
    parser.add_argument("--step", type=int, default=2, help="the step number every variant plays (default 2)")
    parser.add_argument("dotlist", nargs="*", help="more overrides, e.g. lab.task=guess_number")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; use some of {','.join(VARIANTS)}")
    cfg = short_run_config(dotlist=["lab.model=smollm2-135m-instruct", "trainer.logger=[]", *args.dotlist])
    steps, actor = check_trainable(cfg, composed=True)
    run = RunState(cfg, actor=actor, total_steps=steps)
    threads = torch.get_num_threads()
    shapes = Shapes.of(run.policy.model)
    print(f"real-model step ({cfg.lab.model}, {cfg.lab.task}, LoRA r{cfg.actor_rollout_ref.model.lora_rank}, "
          f"{cfg.data.train_batch_size} x {cfg.actor_rollout_ref.rollout.n} rollouts) against its roofline floor; "
          f"{threads} torch threads, {args.load} busy processes beside it")  # fmt: skip
    with busy_processes(args.load):
        run.step(1)  # warm-up
        state = _trainable_state(run)
        results = []
        for variant in variants:
            _restore(run, state)
            rates = measure_rates(shapes)  # right before the step: the load moves on a shared machine
            cpu = time.process_time()
            timing, captured = _timed_step(run, variant, step=args.step)
            results.append((variant, timing, captured, rates, time.process_time() - cpu, _load()))
        _restore(run, state)
    floors = [_count_floor(Floor(shapes, rates), run, captured) for _, _, captured, rates, _, _ in results]
    _print_floor(floors[-1])
    print(f"{'variant':<9} {'gen':>7} {'old lp':>7} {'update':>7} {'step':>7} {'cpu s':>7} {'GFLOP/s':>7} {'GB/s':>5} "
          f"{'floor':>7} {'ratio':>6}  load 1/5 min  tokens")  # fmt: skip
    for (variant, timing, captured, rates, cpu, load), floor in zip(results, floors, strict=True):
        step = timing["timing_s/step"]
        same = "same" if captured["calls"] == results[-1][2]["calls"] else "differ"
        print(f"{variant:<9} {timing['timing_s/gen']:7.2f} {timing['timing_s/old_log_prob']:7.2f} "
              f"{timing['timing_s/update_actor']:7.2f} {step:7.2f} {cpu:7.1f} {rates.flops / 1e9:7.1f} "
              f"{rates.bandwidth / 1e9:5.1f} {floor.total():7.2f} {step / floor.total():5.2f}x  {load:<12}  "
              f"{same}")  # fmt: skip


def measure_rates(shapes: Shapes, *, repeats: int = 3) -> Rates:
    """The best fp32 matmul rate over the model's shapes, and the best copy bandwidth, on this process's threads."""
    h, inter, v = shapes.hidden, 4 * shapes.hidden, shapes.vocab
    best = 0.0
    for m, k, n in ((2048, h, inter), (2048, inter, h), (2048, h, h), (256, h, v)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)
        seconds = min(_seconds(lambda a=a, b=b: torch.mm(a, b)) for _ in range(repeats))
        best = max(best, 2 * m * k * n / seconds)
    source = torch.empty(64 * 2**20)  # 256 MiB of fp32, far beyond the caches
    target = torch.empty_like(source)
    target.copy_(source)
    seconds = min(_seconds(lambda: target.copy_(source)) for _ in range(repeats))
    return Rates(flops=best, bandwidth=2 * source.numel() * 4 / seconds)


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _timed_step(run: RunState, variant: str, *, step: int):
    """One step of ``variant``; returns its timings and what it did (the calls per episode, the scored rows)."""
    captured: dict = {"calls": None, "scored": None, "trained": None}
    collect, update, log_probs = train_step.collect_rollouts, run.backend.update, run.backend.compute_log_probs
    generate, threads = rollout_module.generate, torch.get_num_threads()

    def collecting(*args, **kwargs):
        rollouts, metrics = collect(*args, **kwargs)
        captured["calls"] = [[(list(c.prompt_ids), list(c.response_ids)) for c in r.calls] for r in rollouts]
        return rollouts, metrics

    def scoring(batch, **kwargs):
        captured["scored"] = _rows(batch)
        return log_probs(batch, **kwargs)

    def updating(batch, **kwargs):
        captured["trained"] = _rows(batch)
        return update(batch, **kwargs)

    def without_reuse(policy, prompts, **kwargs):
        return generate(policy, prompts, **{**kwargs, "prefixes": None})

    train_step.collect_rollouts = collecting
    run.backend.compute_log_probs, run.backend.update = scoring, updating
    if variant in ("before", "head"):
        rollout_module.generate = functools.partial(generate_as_before, every_logit=variant == "before")
    if variant == "prune":
        rollout_module.generate = without_reuse
    if variant == "1-thread":
        torch.set_num_threads(1)
    try:
        _, timing, _ = run.step(step)
    finally:
        train_step.collect_rollouts, rollout_module.generate = collect, generate
        run.backend.compute_log_probs, run.backend.update = log_probs, update
        torch.set_num_threads(threads)
    return timing, captured


@torch.no_grad()
def generate_as_before(policy, prompts, *, max_new_tokens, temperature, top_k, top_p, generator, stop_event=None,
                       prefixes=None, every_logit: bool):  # fmt: skip
    """The lab's ``generate`` before these changes (commit bfa9ba5): each prompt prefilled whole, the output head at
    every prompt position (``every_logit``) or the last only, finished rows kept in the batch until all end."""
    model, device, pad = policy.model, policy.device, policy.pad_token_id
    model.eval()
    lengths = torch.tensor([len(p) for p in prompts])
    width = int(lengths.max())
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)  # (n, P), left-padded
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
    attention_mask = (torch.arange(width)[None, :] >= (width - lengths)[:, None]).long().to(device)  # (n, P)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)  # (n, P)
    out = model(input_ids=input_ids.to(device), attention_mask=attention_mask, position_ids=position_ids,
                use_cache=True, logits_to_keep=0 if every_logit else 1)  # fmt: skip
    next_position = position_ids[:, -1:] + 1  # (n, 1)
    finished = torch.zeros(len(prompts), dtype=torch.bool, device=device)  # (n,)
    tokens = []
    for t in range(max_new_tokens):
        alive = ~finished  # (n,)
        token = policy_module._sample(out.logits[:, -1], temperature=temperature, top_k=top_k, top_p=top_p,
                                      generator=generator)  # fmt: skip
        token = torch.where(alive, token, pad)  # (n,)
        tokens.append(token)
        finished |= token == policy.eos_token_id
        if bool(finished.all()) or t == max_new_tokens - 1:
            break
        attention_mask = torch.cat([attention_mask, alive.long()[:, None]], dim=-1)  # (n, P + t + 1)
        out = model(input_ids=token[:, None], attention_mask=attention_mask, position_ids=next_position,
                    past_key_values=out.past_key_values, use_cache=True)  # fmt: skip
        next_position = next_position + 1
    sampled = torch.stack(tokens, dim=-1).cpu()  # (n, new)
    return [policy_module._until_eos(row, policy.eos_token_id) for row in sampled.tolist()]


def _rows(batch) -> list[tuple[int, int]]:
    """Each row's real tokens and response tokens (the positions whose logits the loss reads)."""
    data = batch.batch
    return list(zip(data["attention_mask"].sum(-1).tolist(), data["response_mask"].sum(-1).tolist(), strict=True))


def _count_floor(floor: Floor, run: RunState, captured: dict) -> Floor:
    """The passes of the step as the floor counts them (module docstring), from its own tokens."""
    episodes = captured["calls"]
    for round_ in range(max(len(calls) for calls in episodes)):
        playing = [calls for calls in episodes if len(calls) > round_]
        rows = []
        for calls in playing:
            prompt = calls[round_][0]
            held = [*calls[round_ - 1][0], *calls[round_ - 1][1]][:-1] if round_ else []  # what the last call fed
            common = 0
            while common < min(len(held), len(prompt) - 1) and held[common] == prompt[common]:
                common += 1
            rows.append((len(prompt) - common, common))
        floor.forward("prefill", rows, head=len(rows))
        answers = [(len(calls[round_][0]), len(calls[round_][1])) for calls in playing]
        for t in range(1, max(length for _, length in answers)):  # token t is fed to sample token t + 1
            alive = [(1, prompt + t - 1) for prompt, length in answers if length > t]
            floor.forward("decode", alive, head=len(alive))
    micro = run.log_prob_micro
    scored = captured["scored"]
    for first in range(0, len(scored), micro):
        part = scored[first : first + micro]
        floor.forward("old log-probs", [(tokens, 0) for tokens, _ in part], head=sum(r for _, r in part))
    trained, mini = captured["trained"], run.mini_batch_rows
    micro = int(run.actor.ppo_micro_batch_size_per_gpu or mini)
    for _ in range(int(run.actor.ppo_epochs)):
        for start in range(0, len(trained), mini):
            rows = trained[start : start + mini]
            for first in range(0, len(rows), micro):
                part = rows[first : first + micro]
                for backward in (False, True):
                    name = "update backward" if backward else "update forward"
                    floor.forward(name, [(t, 0) for t, _ in part], head=sum(r for _, r in part), backward=backward)
            floor.optimizer_step("optimizer")
    return floor


def _print_floor(floor: Floor) -> None:
    rates = floor.rates
    print(f"floor from the step's tokens: {floor.total():.2f} s at fp32 matmul {rates.flops / 1e9:.1f} GFLOP/s and "
          f"copy {rates.bandwidth / 1e9:.1f} GB/s (measured before the last variant)")  # fmt: skip
    print(f"  {'part':<16} {'passes':>6} {'tokens':>7} {'GFLOP':>8} {'GB':>7} {'floor s':>8}  (compute / memory)")
    for part, (seconds, passes, tokens, flops, nbytes) in floor.parts.items():
        compute, memory = flops / floor.rates.flops, nbytes / floor.rates.bandwidth
        print(
            f"  {part:<16} {passes:>6} {tokens:>7} {flops / 1e9:8.1f} {nbytes / 1e9:7.2f} {seconds:8.2f}  "
            f"({compute:.2f} / {memory:.2f})"
        )


def _trainable_state(run: RunState) -> dict:
    """What an update changes: the adapter's weights, the optimizer's moments, the LR schedule's position."""
    backend = run.backend
    return {
        "weights": {name: p.detach().clone() for name, p in run.policy.model.named_parameters() if p.requires_grad},
        "optimizer": copy.deepcopy(backend.optimizer.state_dict()),
        "scheduler": copy.deepcopy(backend.scheduler.state_dict()),
    }


def _restore(run: RunState, state: dict) -> None:
    with torch.no_grad():
        for name, p in run.policy.model.named_parameters():
            if name in state["weights"]:
                p.copy_(state["weights"][name])
    run.backend.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
    run.backend.scheduler.load_state_dict(copy.deepcopy(state["scheduler"]))


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


if __name__ == "__main__":
    main()
