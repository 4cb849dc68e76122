"""The numpy GRPO the run diagnostics use, against verl's own ``compute_advantage`` (row level) and the lab's
``compute_rollout_level_advantage`` (Agent Lightning's rollout level, verl's estimator inside) on random batches,
both estimators, both ``norm_adv_by_std_in_grpo``, the scores' dtypes: ``grpo`` bit for bit where the rewards are sums
exact in float32 (0/1, quarters: verifiable tasks' rewards), ``grpo_vectorized`` to two ulps of float32 (torch's
square root), both within float32's rounding of a group's sum on arbitrary rewards."""

import zlib

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab import compute_rollout_level_advantage
from agl_lab.core.groups import group_rows
from agl_lab.lab.grpo_numpy import grpo_advantages, rounded

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def random_batch(rng, *, dyadic: bool, dtype: str):
    """Groups of 1–6 rollouts of 1–4 rows (a rollout's rows share its reward), rows of 1–4 trainable tokens of 4."""
    uid, rollout, reward = [], [], []
    for g in range(rng.integers(1, 9)):
        for r in range(rng.integers(1, 7)):
            value = rng.choice([0.0, 0.25, 0.5, 1.0]) if dyadic else rng.random()
            for _ in range(rng.integers(1, 5)):
                uid.append(f"g{g}")
                rollout.append(f"g{g}/r{r}")
                reward.append(value)
    n, width = len(uid), 4
    order = rng.permutation(n)  # rows of a rollout need not be adjacent
    uid, rollout, reward = (np.asarray(x, dtype=object)[order] for x in (uid, rollout, reward))
    reward = reward.astype(np.float64)
    lengths = rng.integers(1, width + 1, n)
    mask = torch.from_numpy((np.arange(width)[None, :] < lengths[:, None]).astype(np.int64))  # (rows, 4)
    scores = torch.zeros(n, width, dtype=DTYPES[dtype])
    scores[torch.arange(n), torch.from_numpy(lengths - 1)] = torch.tensor(reward, dtype=DTYPES[dtype])  # last token
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": mask},
        non_tensors={"uid": uid, "rollout_id_list": rollout},
    )
    return batch, reward, lengths


def verl_scalars(batch, *, estimator, by_std, rollout_level):
    kwargs = dict(
        adv_estimator=estimator,
        gamma=1.0,
        lam=1.0,
        num_repeat=1,
        norm_adv_by_std_in_grpo=by_std,
        config=OmegaConf.create({}),
    )
    if rollout_level:
        out, _ = compute_rollout_level_advantage(batch, **kwargs)
    else:
        out = compute_advantage(batch, **kwargs)
    return out.batch["advantages"][:, 0].double().numpy()  # every row has its first token trainable


def fast_scalars(batch, reward, lengths, *, estimator, by_std, rollout_level, dtype):
    uid = group_rows(batch.non_tensor_batch["uid"], field="uid").codes
    rollouts = group_rows(batch.non_tensor_batch["rollout_id_list"], field="rollout_id_list") if rollout_level else None
    return grpo_advantages(
        reward,
        uid,
        rollouts=rollouts,
        estimator=estimator,
        norm_adv_by_std_in_grpo=by_std,
        score_dtype=dtype,
        tokens=lengths,
    )


@pytest.mark.parametrize("rollout_level", [False, True], ids=["row_level", "rollout_level"])
@pytest.mark.parametrize("estimator", ["grpo", "grpo_vectorized"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_equal_to_verls_estimator_on_exact_rewards(dtype, estimator, rollout_level):
    rng = np.random.default_rng(zlib.crc32(f"{dtype} {estimator} {rollout_level}".encode()))
    for _ in range(60):
        for by_std in (True, False):
            batch, reward, lengths = random_batch(rng, dyadic=True, dtype=dtype)
            expected = verl_scalars(batch, estimator=estimator, by_std=by_std, rollout_level=rollout_level)
            got = fast_scalars(
                batch, reward, lengths, estimator=estimator, by_std=by_std, rollout_level=rollout_level, dtype=dtype
            )
            if estimator == "grpo":
                np.testing.assert_array_equal(got, expected)
            else:  # torch's float32 square root is not always correctly rounded (on a 2-core AMD EPYC 1 value in 5
                # is an ulp off, with its AVX-512, AVX2 and default kernels alike): the std an ulp off, the quotient 2
                np.testing.assert_array_max_ulp(got.astype(np.float32), expected.astype(np.float32), maxulp=2)


@pytest.mark.parametrize("estimator", ["grpo", "grpo_vectorized"])
def test_within_float32_rounding_on_any_rewards(estimator):
    # verl's grpo sums a group in torch's own order (vectorized lanes), so its float32 mean may differ from the
    # correctly rounded one by an ulp of the sum; the advantage then differs by about that ÷ the group's std
    rng = np.random.default_rng(7)
    for _ in range(200):
        batch, reward, lengths = random_batch(rng, dyadic=False, dtype="float32")
        expected = verl_scalars(batch, estimator=estimator, by_std=True, rollout_level=False)
        got = fast_scalars(
            batch, reward, lengths, estimator=estimator, by_std=True, rollout_level=False, dtype="float32"
        )
        scores = rounded(reward, "float32")
        groups = group_rows(batch.non_tensor_batch["uid"], field="uid")
        std = np.array(
            [scores[groups.codes == g].std(ddof=1) if groups.sizes[g] > 1 else 1.0 for g in range(groups.n_groups)]
        )[groups.codes]
        bound = 8 * np.spacing(np.float32(np.abs(scores).max() * 8)) / (std + 1e-6) + 4 * np.spacing(np.float32(1))
        assert (np.abs(got - expected) <= bound * np.maximum(1, np.abs(expected))).all()


def test_grpo_vectorized_always_divides_by_the_std_as_verl_calls_it():
    # verl 0.9.1's compute_advantage passes no norm_adv_by_std_in_grpo to grpo_vectorized: it keeps its default
    batch, reward, lengths = random_batch(np.random.default_rng(3), dyadic=True, dtype="float32")
    off = fast_scalars(
        batch, reward, lengths, estimator="grpo_vectorized", by_std=False, rollout_level=False, dtype="float32"
    )
    on = fast_scalars(
        batch, reward, lengths, estimator="grpo_vectorized", by_std=True, rollout_level=False, dtype="float32"
    )
    np.testing.assert_array_equal(off, on)
    verl = verl_scalars(batch, estimator="grpo_vectorized", by_std=False, rollout_level=False)
    np.testing.assert_array_max_ulp(off.astype(np.float32), verl.astype(np.float32), maxulp=2)  # divided, as above
    divided_by_one = fast_scalars(
        batch, reward, lengths, estimator="grpo", by_std=False, rollout_level=False, dtype="float32"
    )
    assert np.abs(verl - divided_by_one).max() > 0.1  # not within rounding of the undivided differences


def agl_error(batch):
    with pytest.raises(RuntimeError) as raised:
        verl_scalars(batch, estimator="grpo", by_std=True, rollout_level=True)
    return str(raised.value)


def test_rollout_level_refusals_in_agent_lightnings_words():
    batch, reward, lengths = random_batch(np.random.default_rng(5), dyadic=True, dtype="float32")
    ids = batch.non_tensor_batch
    first = ids["rollout_id_list"][0]
    cases = {}
    rows = np.flatnonzero(ids["rollout_id_list"] == first)
    assert len(rows) >= 2  # this seed's first rollout has several rows: each refusal below can happen
    uid = ids["uid"].copy()
    uid[rows[-1]] = "other"
    cases["uid"] = (dict(ids, uid=uid), reward, lengths)
    other_reward = reward.copy()
    other_reward[rows[-1]] += 1.0
    cases["reward"] = (ids, other_reward, lengths)
    empty = lengths.copy()
    empty[rows[0]] = 0
    cases["empty"] = (ids, reward, empty)
    for name, (non_tensors, values, tokens) in cases.items():
        scores = torch.zeros(len(values), 4)
        scores[torch.arange(len(values)), torch.from_numpy(np.maximum(tokens, 1) - 1)] = torch.tensor(values).float()
        mask = torch.from_numpy((np.arange(4)[None, :] < tokens[:, None]).astype(np.int64))
        verl_batch = DataProto.from_dict(
            tensors={"token_level_rewards": scores, "response_mask": mask}, non_tensors=dict(non_tensors)
        )
        expected = agl_error(verl_batch)
        uid_codes = group_rows(non_tensors["uid"], field="uid").codes
        rollouts = group_rows(non_tensors["rollout_id_list"], field="rollout_id_list")
        with pytest.raises(RuntimeError) as raised:
            grpo_advantages(values, uid_codes, rollouts=rollouts, tokens=tokens)
        assert str(raised.value) == expected, name


def test_only_grpo_has_a_numpy_path_and_missing_rewards_are_refused():
    with pytest.raises(ValueError, match=r"no numpy path for estimator 'rloo': it has one for \['grpo'"):
        grpo_advantages(np.zeros(2), np.zeros(2, int), estimator="rloo")
    with pytest.raises(ValueError, match=r"reward has NaN or inf values in rows \[1\]: fill missing rewards first"):
        grpo_advantages(np.array([0.0, np.nan]), np.zeros(2, int))
