import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from verl.trainer.ppo.ray_trainer import compute_advantage

from agl_lab import compose_config, compute_rollout_level_advantage
from conftest import assert_unchanged, make_rows, plans, shuffled, snapshot, with_rewards

ALGO = compose_config().algorithm
OUTCOME_ESTIMATORS = [
    "grpo",
    "grpo_vectorized",
    "rloo",
    "rloo_vectorized",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "opo",
    "grpo_passk",
    "gpg",
]


def rollout_level(batch, estimator="grpo", **kwargs):
    args = dict(adv_estimator=estimator, gamma=1.0, lam=1.0, num_repeat=1, config=ALGO)
    args.update(kwargs)
    return compute_rollout_level_advantage(batch, **args)


def test_grpo_hand_worked_rollout_level_vs_per_row():
    # Prompt q, three rollouts: A (reward 1) split into rows of 2 and 1 tokens, B (0) one row of 3, C (0) one row of 1.
    rows = with_rewards(make_rows([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3]), ("q", "C", 0.0, [1])]))
    batch, metrics = rollout_level(rows)
    # One entry per rollout in the group: scores [1, 0, 0]; mean 1/3; unbiased std sqrt(((2/3)^2 + 2(1/3)^2)/2)
    # = sqrt(1/3) = 0.57735; A: (2/3)/0.57735 = 1.1547, B and C: (-1/3)/0.57735 = -0.57735.
    a, b = 2 / 3 / math.sqrt(1 / 3), -1 / 3 / math.sqrt(1 / 3)
    expected = torch.tensor([[a, a, 0], [a, 0, 0], [b, b, b], [b, 0, 0]])
    torch.testing.assert_close(batch.batch["advantages"], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batch.batch["returns"], expected, atol=1e-5, rtol=1e-5)
    assert metrics == {
        "training/rollout_level_advantage/n_rows": 4,
        "training/rollout_level_advantage/n_rollouts": 3,
        "training/rollout_level_advantage/n_multi_row_rollouts": 1,
        "training/rollout_level_advantage/max_rows_per_rollout": 2,
    }
    # Per-row GRPO counts A twice: scores [1, 1, 0, 0], mean 1/2, std 0.57735, A gets 0.866 not 1.1547.
    per_row = with_rewards(make_rows([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3]), ("q", "C", 0.0, [1])]))
    per_row.non_tensor_batch["uid"] = per_row.non_tensor_batch["data_id_list"]
    per_row = compute_advantage(per_row, adv_estimator="grpo")
    assert per_row.batch["advantages"][0, 0].item() == pytest.approx(0.5 / math.sqrt(1 / 3), rel=1e-5)


def test_returns_the_same_batch_and_sets_uid_from_data_id_list():
    rows = with_rewards(make_rows([("q", "A", 1.0, [1]), ("q", "B", 0.0, [1])]))
    assert "uid" not in rows.non_tensor_batch
    batch, _ = rollout_level(rows)
    assert batch is rows
    assert batch.non_tensor_batch["uid"].tolist() == ["q", "q"]


def test_uid_takes_precedence_over_data_id_list():
    rows = with_rewards(make_rows([("q", "A", 1.0, [1]), ("q", "B", 0.0, [1])]))
    rows.non_tensor_batch["uid"] = np.array(["g1", "g2"], dtype=object)  # two groups of one: advantage = score
    batch, _ = rollout_level(rows)
    assert batch.batch["advantages"][:, 0].tolist() == pytest.approx([1.0, 0.0])


@pytest.mark.parametrize("estimator", OUTCOME_ESTIMATORS)
def test_one_row_per_rollout_equals_verl_estimator_on_all_rows(estimator):
    plan = [
        (f"p{p}", f"p{p}/r{r}", float((p + r) % 2) + 0.25 * r, [1 + (p * r) % 3]) for p in range(3) for r in range(4)
    ]
    ours = shuffled(with_rewards(make_rows(plan)), seed=1)
    ours.non_tensor_batch["uid"] = ours.non_tensor_batch["data_id_list"]
    verl_rows = shuffled(with_rewards(make_rows(plan)), seed=1)
    verl_rows.non_tensor_batch["uid"] = verl_rows.non_tensor_batch["data_id_list"]
    ours, _ = rollout_level(ours, estimator)
    expected = compute_advantage(verl_rows, adv_estimator=estimator, gamma=1.0, lam=1.0, num_repeat=1, config=ALGO)
    torch.testing.assert_close(ours.batch["advantages"], expected.batch["advantages"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.batch["returns"], expected.batch["returns"], atol=1e-5, rtol=1e-5)


def test_estimator_sees_one_row_per_rollout_and_the_call_arguments():
    seen = {}

    def spy(data, **kwargs):
        seen["rollouts"] = data.non_tensor_batch["rollout_id_list"].tolist()
        seen["kwargs"] = kwargs
        data.batch["advantages"] = data.batch["response_mask"].float() * 2.0
        return data

    rows = with_rewards(make_rows([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3]), ("q", "A2", 1.0, [1, 1, 1])]))
    batch, _ = rollout_level(rows, compute_advantage_fn=spy, num_repeat=5, norm_adv_by_std_in_grpo=False)
    assert seen["rollouts"] == ["A", "B", "A2"]
    assert seen["kwargs"]["num_repeat"] == 5 and seen["kwargs"]["norm_adv_by_std_in_grpo"] is False
    assert "returns" not in batch.batch.keys()  # the estimator gave none, so none is broadcast
    assert torch.equal(batch.batch["advantages"], batch.batch["response_mask"].float() * 2.0)


def test_the_estimator_groups_integer_codes_and_its_errors_name_the_batchs_own_uids():
    # verl's vectorized grouping sorts string uids (2 ms for 7,200); codes form the same groups. A failing estimator
    # runs again on the uids themselves, so its error names them as Agent Lightning's would
    seen = []

    def estimator(data, **kwargs):
        uid = data.non_tensor_batch["uid"]
        seen.append(uid.tolist())
        raise ValueError(f"group {uid[-1]} has one sample")

    rows = with_rewards(make_rows([("q", "A", 1.0, [2, 1]), ("r", "B", 0.0, [3]), ("q", "C", 1.0, [1])]))
    snap = snapshot(rows)
    with pytest.raises(ValueError, match="^group q has one sample$"):
        rollout_level(rows, compute_advantage_fn=estimator)
    assert seen == [[0, 1, 0], ["q", "r", "q"]]
    assert_unchanged(rows, snap)


def test_gae_is_refused_not_broadcast():
    rows = with_rewards(make_rows([("q", "A", 1.0, [3, 2]), ("q", "B", 0.0, [3])]))
    rows.batch["values"] = torch.linspace(0, 1, 9).reshape(3, 3)
    snap = snapshot(rows)
    with pytest.raises(RuntimeError) as err:
        rollout_level(rows, "gae", gamma=0.9, lam=0.95)
    shown = repr(rows.non_tensor_batch["rollout_id_list"][0])  # np.str_('A') on numpy 2, 'A' on numpy 1
    assert str(err.value) == (
        f"rollout-level advantage requires scalar outcome-style advantages; got non-constant token values for "
        f"rollout_id={shown}"
    )
    assert_unchanged(rows, snap)


def _bad(kind):
    rows = with_rewards(make_rows([("q", "A", 1.0, [2, 1]), ("q", "B", 0.0, [3])]))
    if kind == "no_rollout_ids":
        del rows.non_tensor_batch["rollout_id_list"]
    elif kind == "short_rollout_ids":
        rows.non_tensor_batch["rollout_id_list"] = np.array(["A", "A"], dtype=object)
    elif kind == "no_uid":
        del rows.non_tensor_batch["data_id_list"]
    elif kind in ("response_mask", "token_level_rewards"):
        rows.batch.pop(kind)
    elif kind == "two_uids":
        rows.non_tensor_batch["data_id_list"] = np.array(["q", "other", "q"], dtype=object)
    elif kind == "two_rewards":
        rows.batch["token_level_rewards"][1, 0] = 0.0
    elif kind == "empty_rollout":
        rows.batch["response_mask"][2] = 0
    elif kind == "nan_reward":
        rows.batch["token_level_rewards"][2, 2] = float("nan")
    elif kind == "wide_rewards":
        rows.batch["token_level_rewards"] = torch.zeros(3, 4)
    elif kind == "int_rewards":
        rows.batch["token_level_rewards"] = rows.batch["token_level_rewards"].long()
    elif kind == "ragged_ids":
        rows.non_tensor_batch["rollout_id_list"] = np.array([["A", 0], ["A", 1], ["B", 0]], dtype=object)
    elif kind == "missing_id":
        rows.non_tensor_batch["rollout_id_list"] = np.array(["A", None, "B"], dtype=object)
    elif kind == "empty":
        rows = rows[np.zeros(0, dtype=np.int64)]
    return rows


@pytest.mark.parametrize(
    ("kind", "error", "text"),
    [
        ("no_rollout_ids", RuntimeError, "rollout-level advantage requires rollout_id_list in non_tensor_batch"),
        ("short_rollout_ids", RuntimeError, "rollout_id_list length (2) must match batch length (3)"),
        ("no_uid", RuntimeError, "rollout-level advantage requires uid or data_id_list in non_tensor_batch"),
        ("response_mask", RuntimeError, "rollout-level advantage requires response_mask in batch"),
        ("token_level_rewards", RuntimeError, "rollout-level advantage requires token_level_rewards in batch"),
        ("two_uids", RuntimeError, "rollout-level advantage found multiple uid values for rollout_id={A}"),
        (
            "two_rewards",
            RuntimeError,
            "rollout-level advantage requires all triplets for the same rollout_id to share the same scalar "
            "token_level_rewards sum; got rollout_id={A}",
        ),
        ("empty_rollout", RuntimeError, "rollout-level advantage cannot extract advantages for empty rollout_id={B}"),
        ("nan_reward", ValueError, "batch['token_level_rewards'] has NaN or inf values in rows [2]"),
        ("wide_rewards", ValueError, "batch['token_level_rewards'] has shape (3, 4) but response_mask has (3, 3)"),
        ("int_rewards", ValueError, "batch['token_level_rewards'] must be a floating-point tensor"),
        ("ragged_ids", ValueError, "non_tensor_batch['rollout_id_list'] must hold one hashable id per row (1-D)"),
        ("missing_id", ValueError, "rollout_id_list has missing values (None/NaN) at rows [1]"),
        ("empty", ValueError, "rollout-level advantage got an empty batch (0 rows)"),
    ],
)
def test_bad_batches_raise_the_exact_text_and_change_nothing(kind, error, text):
    rows = _bad(kind)
    ids = rows.non_tensor_batch.get("rollout_id_list", [])
    # an id shows as the code shows it, the repr of the id object: np.str_('A') on numpy 2, 'A' on numpy 1
    text = text.format(**{str(i): repr(i) for i in ids}) if "{" in text else text
    snap = snapshot(rows)
    with pytest.raises(error, match=re.escape(text)):
        rollout_level(rows)
    assert_unchanged(rows, snap)


def test_errors_follow_agent_lightnings_rollout_order():
    # Rollout A (first) has two rewards, rollout B (second) two uids: A is reported, as AGL checks rollout by rollout.
    rows = with_rewards(make_rows([("q", "A", 1.0, [1, 1]), ("q", "B", 0.0, [1, 1])]))
    rows.batch["token_level_rewards"][1, 0] = 0.5
    rows.non_tensor_batch["data_id_list"] = np.array(["q", "q", "q", "x"], dtype=object)
    # ids come as numpy '<U' arrays (what np.array(list_of_str) gives): messages show them as Agent Lightning's do,
    # by the id object's repr (np.str_('A') on numpy 2, 'A' on numpy 1)
    text = f"same scalar token_level_rewards sum; got rollout_id={rows.non_tensor_batch['rollout_id_list'][0]!r}"
    with pytest.raises(RuntimeError, match=re.escape(text)):
        rollout_level(rows)


def reference_rollout_level_grpo(batch, *, norm_by_std, eps=1e-6):
    """Agent Lightning v1.0 semantics with plain loops: first row per rollout, GRPO over rollouts, broadcast."""
    rollout_ids = list(batch.non_tensor_batch["rollout_id_list"])
    uids = list(batch.non_tensor_batch["data_id_list"])
    scores = batch.batch["token_level_rewards"].sum(-1).tolist()
    mask = batch.batch["response_mask"].tolist()
    first = {}
    for i, rollout in enumerate(rollout_ids):
        first.setdefault(rollout, i)
    group_scores = {}
    for i in first.values():
        group_scores.setdefault(uids[i], []).append(scores[i])
    advantage_of = {}
    for rollout, i in first.items():
        group = group_scores[uids[i]]
        if len(group) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(group) / len(group)
            std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1))
        centred = scores[i] - mean
        advantage_of[rollout] = centred / (std + eps) if norm_by_std else centred
    out = []
    for i, rollout in enumerate(rollout_ids):
        out.append([advantage_of[rollout] * m for m in mask[i]])
    return torch.tensor(out)


@settings(max_examples=300, deadline=None)
@given(plan=plans(rewards=(0.0, 0.5, 1.0)), seed=st.integers(0, 2**16), norm_by_std=st.booleans())
def test_matches_plain_loop_reference(plan, seed, norm_by_std):
    rows = shuffled(with_rewards(make_rows(plan)), seed)
    expected = reference_rollout_level_grpo(rows, norm_by_std=norm_by_std)
    batch, metrics = rollout_level(rows, norm_adv_by_std_in_grpo=norm_by_std)
    torch.testing.assert_close(batch.batch["advantages"], expected, atol=1e-5, rtol=1e-4)
    sizes = [len(lengths) for *_, lengths in plan]
    assert metrics["training/rollout_level_advantage/n_rows"] == sum(sizes)
    assert metrics["training/rollout_level_advantage/n_rollouts"] == len(plan)
    assert metrics["training/rollout_level_advantage/n_multi_row_rollouts"] == sum(s > 1 for s in sizes)
    assert metrics["training/rollout_level_advantage/max_rows_per_rollout"] == max(sizes)
