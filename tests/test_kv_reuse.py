"""Keys and values kept from one call to the next: the same greedy tokens and log-probs as a full prefill, on the tiny
policy (its context appended as tokens) and on SmolLM2 (its chat template re-rendered every turn)."""

import pytest
import torch

import agl_lab
from agl_lab.config.compose import compose_config
from agl_lab.training.conversation import Conversation
from agl_lab.training.kv_reuse import KVPrefix, prefill, reusable
from agl_lab.training.policy import build_policy, generate
from agl_lab.training.tasks import make_task

OBSERVATION = {"chat": "Incorrect, try again.", "plain": "no try"}


def held(ids):
    return KVPrefix(ids=ids, layers=[(torch.zeros(1, len(ids), 2), torch.zeros(1, len(ids), 2))])


def test_the_reusable_prefix_is_the_common_one_and_leaves_a_token_to_feed():
    assert reusable(None, [1, 2, 3]) == 0
    assert reusable(KVPrefix(), [1, 2, 3]) == 0  # a first call holds nothing
    assert reusable(held([1, 2, 3, 4]), [1, 2, 3, 4, 5, 6]) == 4  # the next turn extends the last context
    assert reusable(held([1, 2, 9, 4]), [1, 2, 3, 4, 5]) == 2  # re-rendered differently from token 2 on
    assert reusable(held([1, 2, 3]), [1, 2, 3]) == 2  # the same prompt again: its last token is fed for its logits
    assert reusable(held([7, 8]), [1, 2]) == 0  # a rewritten context that shares nothing


def play(policy, prompts, *, reuse, turns, observation):
    """Greedy turns of a batch of episodes of different lengths; each turn's responses."""
    contexts = [Conversation(policy.tokenizer, prompt) for prompt in prompts]
    prefixes = [KVPrefix() for _ in prompts] if reuse else None
    played = []
    for _ in range(turns):
        responses = generate(policy, [c.ids for c in contexts], max_new_tokens=6, temperature=0.0, top_k=-1,
                             top_p=1.0, generator=torch.Generator(), prefixes=prefixes)  # fmt: skip
        played.append(responses)
        for context, response in zip(contexts, responses, strict=True):
            context.answer(response, observation)
    return played, contexts, prefixes


def check_same_tokens_and_log_probs(policy, prompts, *, observation, atol):
    full, _, _ = play(policy, prompts, reuse=False, turns=3, observation=observation)
    kept, contexts, prefixes = play(policy, prompts, reuse=True, turns=3, observation=observation)
    assert kept == full
    ids = [c.ids for c in contexts]
    assert all(reusable(prefix, prompt) > 0 for prefix, prompt in zip(prefixes, ids, strict=True))
    with torch.no_grad():
        whole, _, _ = prefill(policy.model, ids, [None] * len(ids), pad=policy.pad_token_id, device=policy.device)
        reused, mask, _ = prefill(policy.model, ids, prefixes, pad=policy.pad_token_id, device=policy.device)
    assert mask.shape[1] < max(map(len, ids)) + max(map(len, ids))  # the reused part is not prefilled again
    # the next token's log-probs after the 4th prompt (n, 1, V)
    assert torch.allclose(whole.logits.log_softmax(-1), reused.logits.log_softmax(-1), atol=atol)


def test_the_tiny_policy_answers_the_same_with_its_keys_and_values_kept():
    words = make_task("lock", size=4, max_turns=4, rewrite_prob=0.3, seed=0).words()
    policy = build_policy(compose_config(dotlist=["lab.model_hidden=32", "lab.model_layers=2"]), words=words)
    prompts = [policy.decode(policy.encode(text)) for text in ("lock L1 try", "lock L2 try no try lock", "lock L0")]
    check_same_tokens_and_log_probs(policy, prompts, observation=OBSERVATION["plain"], atol=1e-5)


@pytest.mark.xdist_group("real_model")
def test_smollm2_answers_the_same_with_its_keys_and_values_kept_across_chat_turns():
    cfg = agl_lab.short_run_config(dotlist=["lab.model=smollm2-135m-instruct", "actor_rollout_ref.model.lora_rank=0"])
    policy = build_policy(cfg, words=[])
    prompts = ["What is 3 + 4? Give your final answer as a single number.", "What is 12 + 9?", "Name a colour."]
    check_same_tokens_and_log_probs(policy, prompts, observation=OBSERVATION["chat"], atol=1e-4)
