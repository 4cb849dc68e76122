"""A real-model step against its floor, measured side by side in one run: is the lab's step as fast as what it does?

The step is the pretrained preset's (``lab.model=smollm2-135m-instruct``, ``conf/pretrained.yaml``: retry_arith, 4
questions x 4 rollouts, up to 3 tries of 32 tokens, LoRA r16 on every linear layer), run by the lab trainer's own
step (:class:`agl_lab.training.train_step.RunState`). Its floor is the work that step cannot avoid, timed right after
it on the same process, model and batch:

* **generating the same tokens**: each round of calls the step made (the prompts of the episodes still playing), again
  through transformers' own ``model.generate`` with its KV cache, for as many new tokens as that round's longest
  answer (``min_new_tokens`` = ``max_new_tokens``, sampling at the step's temperature);
* **one forward and backward of the trained rows**: the kept rows, each cut to its real tokens (no padding beyond the
  longest row of its micro-batch), through the model with its adapter, the summed log-likelihood of the responses as
  the loss, in the step's micro-batches;
* **one forward for old log-probs**: the same rows without gradients.

Printed: each part's seconds beside the step's own stage, the step over its floor (the target: at most 1.5x), and the
process's peak memory. ``--load N`` runs N busy processes beside it (a laptop running a notebook next to training).
The first step warms up (dequantized model load, allocator) and is not timed.

Run: ``.venv/bin/python benchmarks/bench_real_model.py [--steps 2] [--load 0] [key=value ...]``.
"""

from __future__ import annotations

import agl_lab  # noqa: F401  (first: its process settings reach torch only before torch loads)

# isort: split

import argparse
import resource
import time
from collections.abc import Callable

import torch
from busy_load import busy_processes, load_now

from agl_lab import short_run_config
from agl_lab.training import rollout as rollout_module
from agl_lab.training.preflight import check_trainable
from agl_lab.training.train_step import RunState


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2, help="timed steps after the warm-up step (default 2)")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside it (default 0)")
    parser.add_argument("dotlist", nargs="*", help="more overrides, e.g. lab.device=cuda")
    args = parser.parse_args()
    cfg = short_run_config(dotlist=["lab.model=smollm2-135m-instruct", "trainer.logger=[]", *args.dotlist])
    steps, actor = check_trainable(cfg, composed=True)
    run = RunState(cfg, actor=actor, total_steps=steps)
    rounds: list[tuple[list[list[int]], int]] = []
    generate = rollout_module.generate

    def recording(policy, prompts, **kwargs):
        out = generate(policy, prompts, **kwargs)
        rounds.append(([list(p) for p in prompts], max(len(o) for o in out)))
        return out

    rollout_module.generate = recording
    with busy_processes(args.load):
        run.step(1)  # warm-up
        rows = []
        for step in range(2, 2 + args.steps):
            rounds.clear()
            kept: list[torch.Tensor] = []
            captured = _capture_kept_rows(run, kept)
            _, timing, _ = run.step(step)
            captured()
            floor = _floor(run, rounds, kept, temperature=run.sampling.temperature)
            rows.append((step, timing, floor))
        load = load_now()
    lora = cfg.actor_rollout_ref.model.lora_rank
    threads = torch.get_num_threads()
    print(f"real-model step ({cfg.lab.model}, {cfg.lab.task}, LoRA r{lora}) against its floor; "
          f"{threads} torch threads, {args.load} busy processes beside it, load {load:.1f}")  # fmt: skip
    print(f"{'step':>4} {'gen':>8} {'floor':>8} {'old lp':>8} {'floor':>8} {'update':>8} {'floor':>8} "
          f"{'step':>8} {'floor':>8} {'ratio':>6}")  # fmt: skip
    for step, timing, floor in rows:
        ours = [timing["timing_s/gen"], timing["timing_s/old_log_prob"], timing["timing_s/update_actor"]]
        total, bound = timing["timing_s/step"], sum(floor.values())
        print(f"{step:>4} {ours[0]:8.2f} {floor['gen']:8.2f} {ours[1]:8.2f} {floor['forward']:8.2f} {ours[2]:8.2f} "
              f"{floor['backward']:8.2f} {total:8.2f} {bound:8.2f} {total / bound:6.2f}")  # fmt: skip
    ratio = sum(t["timing_s/step"] for _, t, _ in rows) / sum(sum(f.values()) for _, _, f in rows)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"real model: step / floor {ratio:.2f}x over {len(rows)} steps (target <= 1.5x); peak memory {peak:.0f} MiB")


def _capture_kept_rows(run: RunState, kept: list) -> Callable[[], None]:
    """Keep the rows each update trains (the backend's update is handed them): each row's real tokens and how many of
    them are its prompt, for the floor's passes. Returns what puts the update back."""
    update = run.backend.update

    def keeping(batch, **kwargs):
        data, prompt_width = batch.batch, batch.batch["prompts"].shape[1]
        for row in range(len(batch)):
            used = data["attention_mask"][row].bool()
            kept.append((data["input_ids"][row][used], int(used[:prompt_width].sum())))
        return update(batch, **kwargs)

    run.backend.update = keeping

    def restore() -> None:
        run.backend.update = update

    return restore


def _floor(run: RunState, rounds, kept, *, temperature: float) -> dict[str, float]:
    policy, model = run.policy, run.policy.model
    pad = policy.pad_token_id
    start = time.perf_counter()
    with torch.no_grad():
        for prompts, new_tokens in rounds:
            width = max(len(p) for p in prompts)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # (n, P) left-padded
            mask = (ids != pad) | (
                torch.arange(width)[None] >= width - torch.tensor([len(p) for p in prompts])[:, None]
            )
            model.generate(input_ids=ids, attention_mask=mask.long(), max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=temperature > 0, temperature=temperature or None,
                           top_k=0, pad_token_id=pad, eos_token_id=policy.eos_token_id)  # fmt: skip
    gen = time.perf_counter() - start
    micro = int(run.actor.ppo_micro_batch_size_per_gpu)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # the adapter stays in its layers
    times = {}
    for name, grad in (("forward", False), ("backward", True)):
        start = time.perf_counter()
        for first in range(0, len(kept), micro):
            part = kept[first : first + micro]
            width = max(len(ids) for ids, _ in part)
            ids = torch.stack([torch.cat([ids, ids.new_full((width - len(ids),), pad)]) for ids, _ in part])  # (m, T)
            mask = torch.stack([torch.arange(width) < len(row) for row, _ in part]).long()  # (m, T)
            with torch.set_grad_enabled(grad):
                hidden = base.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (m, T, H)
                # the output head only where a response token is predicted: position t predicts token t + 1
                where = [(k, t) for k, (row, n_prompt) in enumerate(part) for t in range(n_prompt - 1, len(row) - 1)]
                rows_at, positions = torch.tensor(where).T  # (2, tokens)
                log_probs = base.lm_head(hidden[rows_at, positions]).float().log_softmax(-1)  # (tokens, V)
                loss = log_probs.gather(-1, ids[rows_at, positions + 1][:, None]).sum()
                if grad:
                    loss.backward()
        times[name] = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    return {"gen": gen, **times}


if __name__ == "__main__":
    main()
