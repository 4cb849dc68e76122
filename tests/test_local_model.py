"""A policy from a local Hugging Face folder: a small Qwen2 with a real BPE tokenizer and a chat template trains from
it, its prompts go through that tokenizer and template, and folders that are no causal LM or lack a tokenizer are
refused naming the key and the fix."""

import json

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

import agl_lab
from agl_lab.config.model_source import TOKENIZER_FILES
from agl_lab.training.conversation import Conversation
from agl_lab.training.policy import build_policy
from agl_lab.training.step_batch import sample_step_batch
from conftest import TINY_RUN

# ChatML, as Qwen2's chat models render messages
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Room for chat-rendered prompts in the BPE's tokens (the preset's limits count the tiny policy's words)
LIMITS = (
    "lab.max_turns=2",
    "data.max_prompt_length=64",
    "agentlightning.trace_aggregator.trajectory_max_prompt_length=64",
    "agentlightning.trace_aggregator.trajectory_max_response_length=64",
)


def bpe_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE trained here on the lock task's chat text, wrapped as transformers wraps Qwen2's."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = [f"<|im_start|>user\nlock L{i} try<|im_end|>\n<|im_start|>assistant\nc{i}<|im_end|>\n" for i in range(8)]
    backend.train_from_iterator(corpus * 4 + ["no try", "tried none"], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    return tokenizer


def save_model(folder, *, cls=Qwen2ForCausalLM, tokenizer=True):
    """A 1-layer Qwen2 (width 32) saved with save_pretrained, with its tokenizer unless told otherwise."""
    tok = bpe_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    cls(config).save_pretrained(folder)
    if tokenizer:
        tok.save_pretrained(folder)
    return folder


def test_a_qwen2_folder_with_a_bpe_tokenizer_trains_three_steps(tmp_path):
    folder = save_model(tmp_path / "qwen2")
    run = (f"lab.model_path={folder}", "trainer.total_training_steps=3", f"lab.run_dir={tmp_path / 'run'}")
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, *LIMITS, *run])
    result = agl_lab.train(cfg, progress=False)
    assert not result.stopped and list(result.history["step"]) == [1, 2, 3]
    assert (result.history["training/n_sample_trained"] > 0).all()
    saved = json.loads((result.run_dir / "policy" / "config.json").read_text())
    assert saved["architectures"] == ["Qwen2ForCausalLM"]  # the trained policy is the Qwen2, saved whole
    assert (result.run_dir / "policy" / "tokenizer.json").is_file()
    with torch.no_grad():  # the update moved the weights
        before = Qwen2ForCausalLM.from_pretrained(folder).model.embed_tokens.weight
        after = Qwen2ForCausalLM.from_pretrained(result.run_dir / "policy").model.embed_tokens.weight
    assert not torch.equal(before, after)


def test_prompts_go_through_the_models_tokenizer_and_chat_template(tmp_path):
    folder = save_model(tmp_path / "qwen2")
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, *LIMITS, f"lab.model_path={folder}"])
    batch, policy = sample_step_batch(cfg)
    assert type(policy.model).__name__ == "Qwen2ForCausalLM" and policy.source == str(folder)
    assert len(policy.tokenizer) == len(bpe_tokenizer())  # the folder's BPE, not the lab's word vocabulary
    ids = batch.batch["prompts"][0]
    text = policy.tokenizer.decode(ids[ids != policy.pad_token_id])
    assert text.startswith("<|im_start|>user\nlock L") and text.endswith("<|im_start|>assistant\n")


def test_a_conversation_renders_turns_with_the_template_and_appends_tokens_without_one():
    tok = bpe_tokenizer()
    chat = Conversation(tok, "lock L1 try")
    assert tok.decode(chat.ids) == "<|im_start|>user\nlock L1 try<|im_end|>\n<|im_start|>assistant\n"
    chat.answer(tok.encode("c3<|im_end|>", add_special_tokens=False), "no try")
    assert tok.decode(chat.ids) == (
        "<|im_start|>user\nlock L1 try<|im_end|>\n<|im_start|>assistant\nc3<|im_end|>\n"
        "<|im_start|>user\nno try<|im_end|>\n<|im_start|>assistant\n"
    )
    chat.restart("lock L1 tried c3 try")  # a rewrite starts a new conversation
    assert tok.decode(chat.ids) == "<|im_start|>user\nlock L1 tried c3 try<|im_end|>\n<|im_start|>assistant\n"
    tok.chat_template = None  # plain text: each turn appends its tokens to the last
    plain = Conversation(tok, "lock L1 try")
    first = list(plain.ids)
    plain.answer([5, 6], "no try")
    assert plain.ids == [*first, 5, 6, *tok.encode("no try", add_special_tokens=False)]


def test_a_folder_without_a_tokenizer_is_refused_naming_the_key_and_the_fix(tmp_path):
    folder = save_model(tmp_path / "bare", tokenizer=False)
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, f"lab.model_path={folder}"])
    expected = (
        f"lab.model_path='{folder}' has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): the task's prompts go "
        "through the model's own tokenizer; save it beside the model (tokenizer.save_pretrained(folder)), or give a "
        "folder that has one"
    )
    with pytest.raises(FileNotFoundError) as raised:
        build_policy(cfg, words=[])
    assert str(raised.value) == expected
    with pytest.raises(FileNotFoundError, match="has no tokenizer"):  # a run refuses it before writing anything
        run_dir = f"lab.run_dir={tmp_path / 'run'}"
        agl_lab.train(
            agl_lab.short_run_config(dotlist=[*TINY_RUN, f"lab.model_path={folder}", run_dir]), progress=False
        )
    assert not (tmp_path / "run").exists()


def test_a_folder_that_is_no_causal_lm_is_refused_naming_the_key_and_the_fix(tmp_path):
    folder = save_model(tmp_path / "classifier", cls=Qwen2ForSequenceClassification)
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, f"actor_rollout_ref.model.path={folder}"])
    with pytest.raises(ValueError) as raised:
        build_policy(cfg, words=[])
    assert str(raised.value) == (
        f"actor_rollout_ref.model.path='{folder}' holds a Qwen2ForSequenceClassification (model_type qwen2), not a "
        "causal language model: the policy is loaded with AutoModelForCausalLM; give the folder of a ...ForCausalLM "
        "model (its config.json 'architectures' names one, e.g. Qwen2ForCausalLM or LlamaForCausalLM)"
    )
    (folder / "config.json").write_text(json.dumps({"model_type": "t5", "architectures": ["T5Model"]}))
    with pytest.raises(ValueError, match=r"holds a T5Model \(model_type t5\), not a causal language model"):
        build_policy(cfg, words=[])


def test_a_folder_without_config_json_is_no_model_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    cfg = agl_lab.short_run_config(dotlist=[*TINY_RUN, f"lab.model_path={tmp_path / 'empty'}"])
    with pytest.raises(FileNotFoundError, match=r"lab.model_path='.*empty' has no config.json, so it is no Hugging"):
        build_policy(cfg, words=[])


@pytest.fixture(scope="module")
def gguf_cache(tmp_path_factory):
    """SmolLM2's GGUF file dequantized once (~16 s) into a cache of this module's own ($AGL_LAB_CACHE)."""
    from agl_lab.config.model_source import packaged_file
    from agl_lab.training.local_model import _dequantized

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGL_LAB_CACHE", str(tmp_path_factory.mktemp("cache")))
        file = packaged_file("smollm2-135m-instruct")
        yield file, _dequantized(file)


def test_the_gguf_cache_is_named_by_the_files_content_and_the_converters_versions(gguf_cache, tmp_path, monkeypatch):
    import hashlib
    import shutil
    from importlib.metadata import version

    import agl_lab.training.local_model as local_model

    file, folder = gguf_cache
    sha = hashlib.sha256(file.read_bytes()).hexdigest()
    versions = f"transformers{version('transformers')}-gguf{version('gguf')}"
    assert folder.name == f"SmolLM2-135M-Instruct.Q4_1-{sha[:16]}-{versions}"
    sidecar = json.loads((local_model.cache_dir() / "gguf" / "sha256.json").read_text())
    stat = file.stat()
    assert sidecar == {f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}": sha}
    copy = tmp_path / file.name
    shutil.copyfile(file, copy)  # the same bytes, another path and time: the same cached folder
    assert local_model._dequantized(copy) == folder
    monkeypatch.setattr(local_model.hashlib, "sha256", None)  # remembered per path, size and time: no hash again
    assert local_model._dequantized(file) == local_model._dequantized(copy) == folder


def test_a_damaged_gguf_cache_is_made_again_once(gguf_cache):
    from agl_lab.config.model_source import check_model_source
    from agl_lab.training.local_model import load_model

    file, folder = gguf_cache
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as handle:
        handle.truncate(size // 2)
    cfg = agl_lab.short_run_config(dotlist=["lab.model=smollm2-135m-instruct"])
    with pytest.warns(UserWarning, match=f"in {folder} does not load .*: making it again"):
        model, _ = load_model(cfg, check_model_source(cfg))
    assert weights.stat().st_size == size and model.config.num_hidden_layers == 30


def test_a_gguf_cache_that_cannot_be_made_whole_names_the_folder_to_delete(tmp_path, monkeypatch):
    import agl_lab.training.local_model as local_model
    from agl_lab.config.model_source import check_model_source

    monkeypatch.setenv("AGL_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(
        local_model, "_convert", lambda file, folder: (folder.mkdir(), (folder / "config.json").write_text("{"))
    )
    cfg = agl_lab.short_run_config(dotlist=["lab.model=smollm2-135m-instruct"])
    source = check_model_source(cfg)
    with pytest.warns(UserWarning, match="making it again"), pytest.raises(OSError) as caught:
        local_model.load_model(cfg, source)
    (folder,) = (tmp_path / "gguf").glob("SmolLM2-*")
    assert str(caught.value).startswith(
        f"lab.model='smollm2-135m-instruct': its cached copy {folder} does not load even when made again ("
    )
    assert str(caught.value).endswith("): delete that folder and run again")
