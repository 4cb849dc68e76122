"""The policy: the tiny default built in code, a local model folder through the same path, sampling and scoring."""

import pytest
import torch

from agl_lab.config.compose import compose_config
from agl_lab.config.model_source import model_source
from agl_lab.training.policy import build_policy, generate, resolve_device, score
from agl_lab.training.tasks import make_task
from agl_lab.training.tiny_model import SPECIAL_TOKENS

WORDS = make_task("lock", size=4, max_turns=4, rewrite_prob=0.3, seed=0).words()


def tiny(*dotlist):
    return build_policy(compose_config(dotlist=["lab.model_hidden=32", *dotlist]), words=WORDS)


def sample(policy, prompts, *, seed=0, **kwargs):
    params = {"max_new_tokens": 4, "temperature": 1.0, "top_k": -1, "top_p": 1.0, **kwargs}
    return generate(policy, prompts, generator=torch.Generator().manual_seed(seed), **params)


def test_tiny_policy_is_a_real_llama_with_a_word_tokenizer_built_from_the_seed():
    policy = tiny("lab.seed=3", "lab.model_layers=1")
    assert type(policy.model).__name__ == "LlamaForCausalLM"
    assert policy.model.config.num_hidden_layers == 1 and policy.model.config.hidden_size == 32
    assert policy.tokenizer.convert_ids_to_tokens([0, 1, 2]) == list(SPECIAL_TOKENS)
    assert len(policy.tokenizer) == len(SPECIAL_TOKENS) + len(WORDS)
    assert policy.decode(policy.encode("lock L3 try")) == "lock L3 try"
    assert policy.encode("lock L3") + policy.encode("try") == policy.encode("lock L3 try")  # prefix-stable
    assert policy.device == torch.device("cpu") and "tiny LlamaForCausalLM" in policy.source
    same, other = tiny("lab.seed=3", "lab.model_layers=1"), tiny("lab.seed=4", "lab.model_layers=1")
    weights = [p.model.model.embed_tokens.weight for p in (policy, same, other)]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])


def test_generation_stops_at_eos_and_max_tokens_and_is_seeded():
    policy = tiny()
    prompts = [policy.encode("lock L1 try"), policy.encode("lock L2 try no try lock")]
    first, again, other = sample(policy, prompts), sample(policy, prompts), sample(policy, prompts, seed=1)
    assert first == again and first != other
    many = sample(policy, prompts * 20, seed=2)
    for response in many:  # any token may be sampled (the policy must learn what to say), EOS ends the response
        assert 1 <= len(response) <= 4 and policy.eos_token_id not in response[:-1]
    assert any(r[-1] == policy.eos_token_id for r in many) and any(len(r) == 4 for r in many)


def test_temperature_zero_is_greedy_and_top_k_one_is_too():
    policy = tiny()
    prompts = [policy.encode("lock L0 try")] * 3
    greedy = sample(policy, prompts, temperature=0.0)
    assert greedy[0] == greedy[1] == greedy[2]
    assert sample(policy, prompts, top_k=1, seed=5) == greedy
    assert sample(policy, prompts, top_p=1e-6, seed=6) == greedy  # nucleus of one token


def test_score_gives_the_log_probs_the_sampler_drew_from():
    """Scoring a sampled row in verl's layout (left-padded prompt, right-padded response) must reproduce the
    sampler's per-token log-probs: otherwise old/new log-probs and PPO ratios are off."""
    policy = tiny()
    prompt = policy.encode("lock L2 try")
    response = sample(policy, [prompt], max_new_tokens=4, seed=3)[0]
    # the sampler's log-probs, recomputed step by step from full forwards (no KV cache)
    expected = []
    with torch.no_grad():
        for t, token in enumerate(response):
            logits = policy.model(input_ids=torch.tensor([prompt + response[:t]])).logits[0, -1] / 0.7
            expected.append(torch.log_softmax(logits, -1)[token].item())
    pad = policy.pad_token_id
    input_ids = torch.tensor([[pad, pad, *prompt, *response, pad]])  # (1, P + R): 2 left pads, 1 right pad
    # from the lengths, not from the ids: the tiny policy may itself sample <pad> (it learns not to)
    attention_mask = torch.tensor([[0, 0] + [1] * (len(prompt) + len(response)) + [0]])
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        log_prob, entropy = score(
            policy,
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            response_length=len(response) + 1,
            temperature=0.7,
            with_entropy=True,
        )
    assert log_prob.shape == entropy.shape == (1, len(response) + 1)
    assert log_prob[0, : len(response)].tolist() == pytest.approx(expected, abs=1e-5)
    assert (entropy[0, : len(response)] > 0).all()
    # the right pad is padding in every row: cut before the forward pass, its columns are 0
    assert log_prob[0, -1].item() == entropy[0, -1].item() == 0.0


def test_a_local_model_folder_goes_through_the_same_code_path(tmp_path):
    policy = tiny("lab.seed=7")
    policy.save(tmp_path / "policy")
    loaded = build_policy(compose_config(dotlist=[f"lab.model_path={tmp_path / 'policy'}"]), words=["ignored"])
    assert loaded.source == str(tmp_path / "policy")
    assert loaded.encode("lock L1 try") == policy.encode("lock L1 try")
    prompts = [policy.encode("lock L1 try")]
    assert sample(loaded, prompts, seed=4) == sample(policy, prompts, seed=4)
    # verl's own key works too when it names a local folder
    verl_key = compose_config(dotlist=[f"actor_rollout_ref.model.path={tmp_path / 'policy'}"])
    assert model_source(verl_key).path == tmp_path / "policy"
    assert model_source(compose_config()).kind == "tiny"  # verl's default path is no local folder here


def test_a_missing_model_folder_is_an_error_naming_the_key(tmp_path):
    cfg = compose_config(dotlist=[f"lab.model_path={tmp_path / 'nope'}"])
    with pytest.raises(FileNotFoundError, match="lab.model_path=.* is not a directory"):
        build_policy(cfg, words=WORDS)


def test_device_auto_is_cpu_without_a_gpu_and_cuda_is_refused_then():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="is not a torch device"):
        resolve_device("tpu-ish")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device: use lab.device=auto or cpu"):
            resolve_device("cuda")


@pytest.mark.parametrize(("layers", "hidden", "seed"), [(1, 32, 0), (2, 64, 3), (3, 48, 2**32 - 1)])
def test_the_tiny_policy_has_transformers_own_init_drawn_from_its_own_generator(layers, hidden, seed):
    """The oracle: transformers' LlamaForCausalLM(config) after torch.manual_seed(seed), as the lab built it before."""
    from transformers import LlamaForCausalLM

    before = torch.random.get_rng_state()
    policy = tiny(f"lab.seed={seed}", f"lab.model_layers={layers}", f"lab.model_hidden={hidden}")
    assert torch.equal(torch.random.get_rng_state(), before)  # torch's process-wide generator was not touched
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reference = LlamaForCausalLM(policy.model.config)
    ours, theirs = policy.model.state_dict(), reference.state_dict()
    assert sorted(ours) == sorted(theirs)
    assert [key for key in theirs if not torch.equal(ours[key], theirs[key])] == []
    assert policy.model.lm_head.weight is policy.model.model.embed_tokens.weight  # still tied


def test_policies_built_in_threads_do_not_disturb_each_other():
    import threading

    solo = {seed: tiny(f"lab.seed={seed}").model.state_dict() for seed in (1, 2)}
    built, errors = {}, []

    def build(seed):
        try:
            for _ in range(3):
                built[seed] = tiny(f"lab.seed={seed}").model.state_dict()
                torch.rand(1000)  # other work on the process-wide generator meanwhile
        except Exception as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for seed in (1, 2):
        assert all(torch.equal(built[seed][key], solo[seed][key]) for key in solo[seed])


def test_sampling_draws_every_rows_tokens_as_a_plain_loop_does_while_ended_rows_leave_the_batch():
    """The reference: every row through the whole model at every token (no cache, no row dropped), sampled over all
    rows with the same generator. generate drops a row from its forward passes once it ends (EOS) and keeps keys and
    values: the same tokens, because the sampler still draws for every row."""
    from agl_lab.training.policy import _sample, _until_eos

    policy = tiny("lab.seed=1")
    prompts = [policy.encode(text) for text in ("lock L1 try", "lock L2 try no try lock", "lock L0", "try")] * 3
    pad, eos = policy.pad_token_id, policy.eos_token_id
    lengths = set()
    for seed in range(4):
        generator = torch.Generator().manual_seed(seed)
        rows, finished, tokens = [list(p) for p in prompts], torch.zeros(len(prompts), dtype=torch.bool), []
        with torch.no_grad():
            for _ in range(6):
                last = torch.stack([policy.model(input_ids=torch.tensor([r])).logits[0, -1] for r in rows])  # (n, V)
                token = torch.where(finished, pad, _sample(last, temperature=1.0, top_k=-1, top_p=1.0,
                                                           generator=generator))  # fmt: skip
                tokens.append(token)
                finished |= token == eos
                rows = [[*row, int(t)] for row, t in zip(rows, token, strict=True)]
                if finished.all():
                    break
        expected = [_until_eos(row, eos) for row in torch.stack(tokens, -1).tolist()]
        got = sample(policy, prompts, seed=seed, max_new_tokens=6)
        assert got == expected
        lengths |= {len(r) for r in got}
    assert len(lengths) > 1  # rows ended at different tokens: some left the batch early
