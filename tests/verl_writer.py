"""verl's own rollout dump, written by verl: ``RayPPOTrainer._log_rollout_data`` on a bare trainer (no Ray, no workers).

The method decodes each row's prompt and response with the trainer's tokenizer, sums its ``token_level_scores``,
adds ``request_id`` from the batch and every reward-extra field, and hands them to ``_dump_generations``, whose
background executor writes ``<global_steps>.jsonl`` with ``_write_generations``: the file a real run leaves in
``trainer.rollout_data_dir``. Only what those methods read is set on the trainer (as ``tests/agl_oracle.py`` drives
Agent Lightning's ``_train_step``); the tokenizer is a real Hugging Face fast tokenizer over a word vocabulary.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Token id i decodes to the word ``w<i>``; id 0 is the pad token (skipped when decoding)."""
    vocab = {"<pad>": 0, **{f"w{i}": i for i in range(1, vocab_size)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>")


def write_verl_dump(
    rows: DataProto, folder: str | Path, *, step: int, reward_extra: dict[str, Any] | None = None
) -> Path:
    """``rows`` dumped by verl as step ``step`` into ``folder``; returns the file. ``rows`` needs ``prompts``,
    ``responses`` and ``token_level_scores``; its ``request_id`` (if any) is written, as verl writes it."""
    trainer = object.__new__(RayPPOTrainer)
    trainer.tokenizer = word_tokenizer(int(max(rows.batch["prompts"].max(), rows.batch["responses"].max())) + 1)
    trainer.global_steps = step
    trainer._init_dump_executor()
    with contextlib.redirect_stdout(io.StringIO()):  # "Dumped generations to ..."
        trainer._log_rollout_data(rows, dict(reward_extra or {}), {}, str(folder))
        trainer._shutdown_dump_executor()
    return Path(folder) / f"{step}.jsonl"


def with_request_ids(rows: DataProto) -> DataProto:
    """``rows`` with verl's ``request_id`` set to each row's rollout id (a multi-output agent loop's trajectory)."""
    out = DataProto(batch=rows.batch, non_tensor_batch=dict(rows.non_tensor_batch), meta_info=dict(rows.meta_info))
    out.non_tensor_batch["request_id"] = np.asarray(rows.non_tensor_batch["rollout_id_list"], dtype=object)
    return out
