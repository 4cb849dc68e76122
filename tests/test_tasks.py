"""The lock task: episode rules, outcome-dependent turns, context rewrites, seeding; and its rollouts → rows."""

import numpy as np
import pytest
import torch

from agl_lab.config.compose import compose_config
from agl_lab.config.lab_config import TASKS, LabConfig
from agl_lab.config.task_rows import lock_row_lengths
from agl_lab.core.aggregation import aggregate
from agl_lab.training.lock_task import LockTask
from agl_lab.training.policy import build_policy
from agl_lab.training.rollout import SamplingParams, collect_rollouts
from agl_lab.training.tasks import make_task
from conftest import play


def lock_task(**kwargs):
    """A LockTask with the lab: section's defaults (agl_lab.LabConfig) for whatever kwargs leave out."""
    lab = LabConfig()
    defaults = {
        "n_locks": lab.task_size,
        "max_turns": lab.max_turns,
        "rewrite_prob": lab.rewrite_prob,
        "seed": lab.seed,
    }
    return LockTask(**{**defaults, **kwargs})


@pytest.mark.parametrize("name", TASKS)
def test_every_task_name_of_the_config_has_a_class(name):
    task = make_task(name, size=5, max_turns=2, rewrite_prob=0.0, seed=0)
    episode = task.start(task.sample_items(step=1, batch_size=1)[0], step=1, index=0)
    assert episode.prompt and not episode.done


def test_the_right_code_opens_the_lock_at_once():
    task = lock_task(n_locks=4, max_turns=3, seed=1)
    code = f"c{task.codes[2]}"
    episode, turns = play(task, 2, [f"{code} L0"])
    assert episode.prompt == "lock L2 try"
    assert episode.success and episode.done and episode.turns == 1
    assert turns == [turns[0]] and turns[0].success and turns[0].observation is None


def test_a_failing_episode_takes_every_turn_and_gets_no_try():
    task = lock_task(n_locks=4, max_turns=3, rewrite_prob=0.0, seed=1)
    wrong = f"c{(task.codes[0] + 1) % 4}"
    episode, turns = play(task, 0, [wrong, "L3 c0", "nonsense", wrong])
    assert episode.turns == 3 and episode.done and not episode.success  # the 4th answer is never asked for
    assert [t.observation for t in turns] == ["no try", "no try", None]
    # only the first word counts: "L3 c0" is no guess even though c0 comes later
    assert episode.guesses == [wrong, "none", "none"]
    with pytest.raises(RuntimeError, match="the episode is over"):
        episode.respond(wrong)


def test_a_rewrite_replaces_the_context_with_a_summary_that_does_not_continue_it():
    task = lock_task(n_locks=4, max_turns=3, rewrite_prob=1.0, seed=1)
    wrong = f"c{(task.codes[1] + 1) % 4}"
    episode, turns = play(task, 1, [wrong, "L2"])
    assert turns[0].rewrite == f"lock L1 tried {wrong} try" and turns[0].observation is None
    assert turns[1].rewrite == f"lock L1 tried {wrong} none try"
    assert episode.rewrites == 2
    # the summary never begins with the previous context (prompt + response), so the aggregator must split
    previous = f"{episode.prompt} {wrong}".split()
    assert turns[0].rewrite.split()[: len(previous)] != previous


def test_codes_items_and_rewrites_are_fixed_by_the_seed():
    a, b, other = lock_task(seed=5), lock_task(seed=5), lock_task(seed=6)
    assert sorted(a.codes) == list(range(a.n_locks))  # a permutation: every lock has its own code
    assert (a.codes == b.codes).all() and not (a.codes == other.codes).all()
    assert a.sample_items(step=3, batch_size=5) == b.sample_items(step=3, batch_size=5)
    assert len(set(a.sample_items(step=3, batch_size=8))) == 8  # distinct while there are enough locks
    draws = [lock_task(seed=5, rewrite_prob=0.5).start(0, step=2, index=i).rng.random() for i in range(2)]
    again = [lock_task(seed=5, rewrite_prob=0.5).start(0, step=2, index=i).rng.random() for i in range(2)]
    assert draws == again and draws[0] != draws[1]


def test_words_cover_everything_the_environment_says():
    task = lock_task(n_locks=3)
    words = set(task.words())
    episode, turns = play(lock_task(n_locks=3, rewrite_prob=1.0), 0, ["c9", "x"])
    said = episode.prompt.split() + [w for t in turns if t.rewrite for w in t.rewrite.split()]
    assert set(said) - {"c9"} <= words and {"c0", "c2", "L2"} <= words


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_locks": 1}, "lab.task_size must be an integer >= 2"),
        ({"max_turns": 0}, "lab.max_turns must be an integer >= 1"),
        ({"rewrite_prob": 1.5}, r"lab.rewrite_prob must be a probability in \[0, 1\]"),
    ],
)
def test_bad_knobs_are_refused_naming_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lock_task(**kwargs)


def test_make_task_names_the_known_tasks():
    assert isinstance(make_task("lock", size=3, max_turns=2, rewrite_prob=0.1, seed=0), LockTask)
    with pytest.raises(ValueError, match=r"lab.task: unknown task 'lok' \(did you mean 'lock'\?\); use one of: lock"):
        make_task("lok", size=3, max_turns=2, rewrite_prob=0.1, seed=0)


def rollouts_of(*, rewrite_prob, max_turns=3, n=4, seed=0):
    cfg = compose_config(dotlist=[f"lab.seed={seed}"])
    task = lock_task(n_locks=4, max_turns=max_turns, rewrite_prob=rewrite_prob, seed=seed)
    policy = build_policy(cfg, words=task.words())
    sampling = SamplingParams(n=n, max_new_tokens=3, temperature=1.0, top_k=-1, top_p=1.0)
    generator = torch.Generator().manual_seed(seed)
    return collect_rollouts(policy, task, step=1, items=[0, 1, 2, 3], sampling=sampling, generator=generator)


def test_failing_rollouts_make_the_most_calls_and_ids_follow_agent_lightning():
    rollouts, metrics = rollouts_of(rewrite_prob=0.3)
    assert len(rollouts) == 16
    assert rollouts[5].data_id == "s1/p1" and rollouts[5].rollout_id == "s1/p1/r1"
    calls = np.array([len(r.calls) for r in rollouts])
    failed = np.array([r.reward == 0.0 for r in rollouts])
    assert (calls[failed] == 3).all() and (calls[~failed] <= 3).all()
    assert metrics["lab/success_rate"] == pytest.approx(1 - failed.mean())
    assert metrics["lab/mean_turns"] == pytest.approx(calls.mean())
    assert metrics["lab/generated_tokens"] == sum(len(c.response_ids) for r in rollouts for c in r.calls)


def test_response_lengths_per_call_of_the_solved_and_the_failed_rollouts():
    rollouts, metrics = rollouts_of(rewrite_prob=0.3, seed=1)
    for name, reward in (("solved", 1.0), ("failed", 0.0)):
        lengths = [len(c.response_ids) for r in rollouts if r.reward == reward for c in r.calls]
        assert lengths and metrics[f"lab/response_length_{name}"] == pytest.approx(np.mean(lengths))
    # a step without a failed rollout logs no failed length (absent, not 0)
    _, none_failed = rollouts_of(rewrite_prob=0.3, max_turns=1, n=1, seed=1)
    assert ("lab/response_length_failed" in none_failed) == (none_failed["lab/success_rate"] < 1)


@pytest.mark.parametrize("rewrite_prob", [0.0, 1.0])
def test_rows_per_rollout_follow_the_rewrites_at_the_trajectory_level(rewrite_prob):
    rollouts, metrics = rollouts_of(rewrite_prob=rewrite_prob)
    rows, adapter = aggregate(rollouts, level="trajectory", max_prompt_length=64, max_response_length=64)
    per_rollout = {r.rollout_id: 0 for r in rollouts}
    for rollout_id in rows.non_tensor_batch["rollout_id_list"]:
        per_rollout[rollout_id] += 1
    calls = {r.rollout_id: len(r.calls) for r in rollouts}
    if rewrite_prob == 0.0:  # every turn continues the context: one row per rollout
        assert set(per_rollout.values()) == {1} and adapter["training/n_trace_merge_mismatch_rows"] == 0
    else:  # every turn after the first is rewritten: one row per call
        assert per_rollout == calls
        assert adapter["training/n_trace_merge_mismatch_rows"] == metrics["lab/context_rewrites"] > 0
    transition, _ = aggregate(rollouts, level="transition", max_prompt_length=64, max_response_length=64)
    assert len(transition) == sum(calls.values())


@pytest.mark.parametrize("rewrite_prob", [0.0, 1.0])
def test_the_longest_rows_are_what_the_config_doctor_assumes(rewrite_prob):
    # agl_lab.config.task_rows sizes the short-run limits (rows are padded to them) from these bounds
    rollouts, _ = rollouts_of(rewrite_prob=rewrite_prob, max_turns=3)
    bounds = lock_row_lengths(max_turns=3, call_tokens=3)  # rollouts_of samples 3 tokens per call
    for level in ("trajectory", "transition"):
        rows, _ = aggregate(rollouts, level=level, max_prompt_length=999, max_response_length=999, pad_to="longest")
        prompt, response = rows.batch["prompts"].shape[1], rows.batch["responses"].shape[1]
        assert prompt <= bounds[f"{level}_prompt"] and response <= bounds[f"{level}_response"]
        if level == "trajectory" and rewrite_prob == 0.0:  # every failing call merged into one row
            assert response == bounds["trajectory_response"]
        if level == "trajectory" and rewrite_prob == 1.0:  # the context rewritten after the second wrong guess
            assert prompt == bounds["trajectory_prompt"]
        if level == "transition" and rewrite_prob == 0.0:  # the last call sees the whole context
            assert prompt == bounds["transition_prompt"] and response == bounds["transition_response"]


def test_a_wrong_guess_that_earns_another_try_costs_lab_turn_cost():
    task = lock_task(n_locks=4, max_turns=3, rewrite_prob=0.0, seed=1, turn_cost=0.25)
    wrong, right = f"c{(task.codes[0] + 1) % 4}", f"c{task.codes[0]}"
    failed, _ = play(task, 0, [wrong, wrong, wrong])
    assert failed.turn_rewards == [-0.25, -0.25]  # the last call earns no try: the outcome 0 is its reward
    solved, _ = play(task, 0, [wrong, right])
    assert solved.turn_rewards == [-0.25] and solved.success  # return 1 - 0.25
    assert play(lock_task(n_locks=4, max_turns=3, seed=1), 0, [wrong, right])[0].turn_rewards == [-0.0]
    with pytest.raises(ValueError, match=r"lab.turn_cost must be a number in \[0, 1\] \(0: off\), got 2"):
        lock_task(turn_cost=2)


def test_rollouts_carry_the_turn_costs_only_when_they_are_on():
    plain, _ = rollouts_of(rewrite_prob=0.3)
    assert all(r.turn_rewards is None for r in plain)  # lab.turn_cost=0: Agent Lightning's one reward per rollout
    cfg = compose_config()
    task = lock_task(n_locks=4, max_turns=3, rewrite_prob=0.3, seed=0, turn_cost=0.5)
    sampling = SamplingParams(n=4, max_new_tokens=3, temperature=1.0, top_k=-1, top_p=1.0)
    costly, _ = collect_rollouts(build_policy(cfg, words=task.words()), task, step=1, items=[0, 1, 2, 3],
                                 sampling=sampling, generator=torch.Generator().manual_seed(0))  # fmt: skip
    for with_cost, without in zip(costly, plain, strict=True):  # the same episodes, now with their costs
        assert with_cost.calls == without.calls and with_cost.reward == without.reward
        assert with_cost.turn_rewards == (-0.5,) * (len(with_cost.calls) - 1)
    assert make_task("lock", size=3, max_turns=2, rewrite_prob=0.1, seed=0, turn_cost=0.1).turn_cost == 0.1
