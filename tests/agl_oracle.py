"""The released Agent Lightning 1.0.2 as the tests' oracle: importing it, driving it, comparing with agl_lab.

``make test`` installs ``agentlightning==1.0.2`` into ``.venv`` (``--no-deps --ignore-requires-python``, plus
``httpx-retries``; the Makefile's ``.oracle`` target). Nothing here skips: without the package, :func:`agl` raises
``ModuleNotFoundError`` and every differential test fails.

Importing ``agentlightning.verl.per_rollout_loss`` registers its two losses in verl's policy-loss registry (a plain
dict, last writer wins), which would silently replace agl_lab's for every later test in the session. :func:`agl`
therefore imports the package once, then puts the registry back as it found it; the tests call Agent Lightning's
functions directly, never through the registry.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import io
import math
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hypothesis import HealthCheck, settings
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo import core_algos

# Random batches per differential test: 2,000. CI's second, smaller job (`make test-core VERL=0.8.0`) sets
# AGL_LAB_ORACLE_EXAMPLES=500 to fit its time; `make test` at either verl runs the 2,000.
N_EXAMPLES = int(os.environ.get("AGL_LAB_ORACLE_EXAMPLES", "2000"))
# Derandomized: the same examples every run. Drawn anew each run, the check that every estimator had an agreeing
# example failed about one run in three at 500; an upgrade of Hypothesis changes the examples, and shows at once.
ORACLE_SETTINGS = settings(
    max_examples=N_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
REGISTERED = ("per_rollout_mean", "cispo_per_rollout_mean")
MODULES = {
    "loss": "agentlightning.verl.per_rollout_loss",
    "advantage": "agentlightning.verl.rollout_level_advantage",
    "adapter": "agentlightning.verl.rollout_adapter",
    "manager": "agentlightning.verl.agl_rollout_manager",
    "trainer": "agentlightning.verl.trainer",
}
# verl's outcome estimators: one scalar per row, which rollout-level advantage broadcasts. The token-level ones
# (GAE and the optimal-token baselines) give per-token values that both implementations refuse.
OUTCOME_ESTIMATORS = (
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "rloo",
    "rloo_vectorized",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "opo",
    "gpg",
    "gdpo",
)
TOKEN_LEVEL_ESTIMATORS = ("gae", "optimal_token_baseline", "tir_optimal_token_baseline")


@functools.cache
def agl() -> types.SimpleNamespace:
    """Agent Lightning 1.0.2's verl modules, imported once, with verl's loss registry restored afterwards."""
    saved = {name: core_algos.POLICY_LOSS_REGISTRY.get(name) for name in REGISTERED}
    try:
        modules = {key: importlib.import_module(name) for key, name in MODULES.items()}
    finally:
        for name, fn in saved.items():
            if fn is None:
                core_algos.POLICY_LOSS_REGISTRY.pop(name, None)
            else:
                core_algos.POLICY_LOSS_REGISTRY[name] = fn
    version = importlib.import_module("agentlightning").__version__
    assert version == "1.0.2", f"the oracle is agentlightning 1.0.2, found {version}"
    return types.SimpleNamespace(**modules)


def agl_config() -> DictConfig:
    """Agent Lightning's own composed config, as its example training scripts compose it: Hydra compose of its
    packaged ``config.yaml`` (verl's ``ppo_trainer`` under it), struct mode off, ready for their permissive merge."""
    agl()  # the oracle is installed (a missing one fails here, not with a skip)
    saved = copy.deepcopy(GlobalHydra.instance()) if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="agentlightning.verl", version_base=None):
            cfg = compose(config_name="config")
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved.hydra)
    OmegaConf.set_struct(cfg, False)
    return cfg


def examples(cases: Callable[[], None], minimum: int) -> int:
    """Run the hypothesis test ``cases`` (whose body calls :func:`count`); check it saw ``minimum`` random batches."""
    _SEEN[0] = 0
    cases()
    assert _SEEN[0] >= minimum, f"{cases.__name__} ran {_SEEN[0]} examples, fewer than {minimum}"
    return _SEEN[0]


def count() -> None:
    """One more example seen (called at the end of a differential example's body)."""
    _SEEN[0] += 1


_SEEN = [0]


def outcome(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``(result, None)`` or ``(None, exception)``; Agent Lightning's prints are swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return fn(), None
        except Exception as exc:  # the oracle decides what raising means; the caller compares
            return None, exc


def assert_same_error(theirs: BaseException, ours: BaseException | None) -> None:
    """Where Agent Lightning raises, agl_lab raises the same type with the same text."""
    assert ours is not None, f"Agent Lightning raised {type(theirs).__name__}: {theirs}; agl_lab did not"
    assert type(ours) is type(theirs) and str(ours) == str(theirs), (
        f"Agent Lightning: {type(theirs).__name__}: {theirs}\nagl_lab: {type(ours).__name__}: {ours}"
    )


def assert_same_tensor(ours: torch.Tensor, theirs: torch.Tensor, name: str) -> None:
    """Bit-equal values (NaN where NaN) and the same dtype and shape."""
    assert ours.dtype == theirs.dtype, f"{name}: dtype {ours.dtype} vs Agent Lightning's {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{name}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}"
    same = (ours == theirs) | (ours.isnan() & theirs.isnan()) if ours.is_floating_point() else ours == theirs
    assert bool(same.all()), f"{name} differs:\nagl_lab {ours}\nAgent Lightning {theirs}"


# The response-mask dtypes real batches carry: verl's own compute_response_mask (int64), Agent Lightning's adapter
# (int64), hand-built and dumped batches (bool, float32), and bf16 where a pipeline casts every float field.
MASK_DTYPES = (torch.long, torch.bool, torch.float32, torch.bfloat16)


def snapshot(batch: DataProto) -> dict[str, Any]:
    """Copies of every field of ``batch`` now, for :func:`assert_unchanged` after a call."""
    tensors = {key: batch.batch[key].clone() for key in batch.batch.keys()} if batch.batch is not None else {}
    fields = {key: copy.deepcopy(values) for key, values in batch.non_tensor_batch.items()}
    return {"tensors": tensors, "fields": fields}


def assert_unchanged(batch: DataProto, before: dict[str, Any], *, added: tuple[str, ...] = ()) -> None:
    """Every field ``batch`` had at :func:`snapshot` time is still there with the same values and dtype; only the
    fields named in ``added`` may have been added (what the function documents it writes)."""
    now = set(batch.batch.keys()) if batch.batch is not None else set()
    assert now - set(before["tensors"]) <= set(added), sorted(now - set(before["tensors"]))
    for key, value in before["tensors"].items():
        assert key in now, f"input field {key} was removed"
        assert_same_tensor(batch.batch[key], value, f"input {key} (after the call)")
    new_fields = set(batch.non_tensor_batch) - set(before["fields"])
    assert new_fields <= set(added), sorted(new_fields)
    for key, values in before["fields"].items():
        assert list(batch.non_tensor_batch[key]) == list(values), f"input non-tensor {key} was changed"


def assert_same_metrics(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert set(ours) == set(theirs), (sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours)))
    for key, value in theirs.items():
        mine = ours[key]
        both_nan = isinstance(value, float) and math.isnan(value) and isinstance(mine, float) and math.isnan(mine)
        assert both_nan or (mine == value and type(mine) is type(value)), f"{key}: {mine!r} vs {value!r}"


def assert_same_batch(ours: DataProto, theirs: DataProto, *, skip: tuple[str, ...] = ()) -> None:
    """Every tensor and non-tensor field equal (values, dtype, shape), except the names in ``skip``."""
    tensors = set(theirs.batch.keys()) - set(skip)
    assert set(ours.batch.keys()) - set(skip) == tensors, (sorted(ours.batch.keys()), sorted(theirs.batch.keys()))
    for key in tensors:
        assert_same_tensor(ours.batch[key], theirs.batch[key], key)
    fields = set(theirs.non_tensor_batch) - set(skip)
    assert set(ours.non_tensor_batch) - set(skip) == fields, (sorted(ours.non_tensor_batch), sorted(fields))
    for key in fields:
        mine, agl_values = ours.non_tensor_batch[key], theirs.non_tensor_batch[key]
        assert mine.dtype == agl_values.dtype, f"{key}: dtype {mine.dtype} vs {agl_values.dtype}"
        assert mine.tolist() == agl_values.tolist(), key


def make_rows(
    *,
    lengths: list[int],
    width: int,
    rollout_ids: Any,
    data_ids: Any | None,
    rewards: list[float],
    score_dtype: torch.dtype = torch.bfloat16,
    prompt_width: int = 2,
    extra: dict[str, torch.Tensor] | None = None,
    non_tensor: dict[str, np.ndarray] | None = None,
    mask_dtype: torch.dtype = torch.long,
) -> DataProto:
    """A fresh DataProto in Agent Lightning's row layout: row i has ``lengths[i]`` trainable response tokens
    (left-aligned, some may be 0), its reward on its last one (on column 0 when empty); ``response_mask`` in
    ``mask_dtype`` (the attention mask stays int64, as verl's is)."""
    n = len(lengths)
    cols = torch.arange(width)
    lens = torch.tensor(lengths, dtype=torch.long).reshape(n)
    response_mask = (cols[None, :] < lens[:, None]).long()  # (rows, R)
    scores = torch.zeros(n, width, dtype=score_dtype)
    scores[torch.arange(n), (lens - 1).clamp_min(0)] = torch.tensor(rewards, dtype=score_dtype)
    attention = torch.cat([torch.ones(n, prompt_width, dtype=torch.long), response_mask], dim=-1)
    tensors = {
        "prompts": torch.ones(n, prompt_width, dtype=torch.long),
        "responses": torch.arange(n * width, dtype=torch.long).reshape(n, width),
        "input_ids": torch.ones(n, prompt_width + width, dtype=torch.long),
        "attention_mask": attention,
        "position_ids": torch.clamp(torch.cumsum(attention, dim=-1) - 1, min=0),
        "response_mask": response_mask.to(mask_dtype),
        "token_level_scores": scores,
        **(extra or {}),
    }
    batch = DataProto(batch=TensorDict(tensors, batch_size=n))
    batch.non_tensor_batch["rollout_id_list"] = rollout_ids
    if data_ids is not None:
        batch.non_tensor_batch["data_id_list"] = data_ids
    batch.non_tensor_batch.update(non_tensor or {})
    return batch


class _Checkpoints:
    def sleep_replicas(self) -> None:
        pass

    def update_weights(self, step: int) -> None:
        pass


def agl_train_step(cfg: Any, rows: DataProto) -> types.SimpleNamespace:
    """Agent Lightning's own ``_train_step`` on a bare trainer (no Ray, no workers): ``rows`` is what its rollout
    returned. Seed ``random`` first: the drops draw from it.

    Old log-probs are zeros; that stub also records which rows survived the drops (``kept``: their ``row`` tags),
    so they are known even when a later step raises. The actor update only records the batch it was given, and
    its meta_info then (the trainer rewrites ``global_token_num`` afterwards). Returns ``metrics`` (None when the
    step was skipped), ``batch``, ``meta``, ``kept`` and ``error`` (the exception a step raised, else None).
    """
    trainer = object.__new__(agl().trainer.AgentLightningRayPPOTrainer)
    trainer.config = cfg
    trainer.global_steps = 1
    trainer.is_async = False
    trainer.use_reference_policy = False
    trainer.use_critic = False
    trainer.checkpoint_manager = _Checkpoints()
    seen = types.SimpleNamespace(metrics=None, batch=None, meta=None, kept=None, error=None)
    trainer._next_train_batch_dict_for_rollout = lambda: {"dummy": np.zeros(1)}
    trainer._get_gen_batch = lambda batch: batch
    trainer._rollout = lambda gen_batch, is_train: (rows, {})

    def old_log_prob(batch: DataProto) -> tuple[DataProto, float]:
        seen.kept = batch.non_tensor_batch["row"].tolist() if "row" in batch.non_tensor_batch else None
        zeros = torch.zeros(batch.batch["responses"].shape)
        return DataProto(batch=TensorDict({"old_log_probs": zeros}, batch_size=len(batch))), 0.0

    def update_actor(batch: DataProto) -> DataProto:
        seen.batch, seen.meta = batch, dict(batch.meta_info)
        return DataProto(batch=None, meta_info={"metrics": {}})

    trainer._compute_old_log_prob = old_log_prob
    trainer._update_actor = update_actor
    result, seen.error = outcome(lambda: trainer._train_step(timing_raw={}, curr_step_profile=False))
    if result is not None:
        seen.metrics = {
            k: v for k, v in result[0].items() if not k.startswith("timing/") and k != "perf/mfu/actor_infer"
        }
    return seen
