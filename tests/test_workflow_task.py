"""arith_workflow: solve, check and revise in separate calls with fresh prompts; the final proposal decides the reward;
every call a row of its own (a SmolLM2 rollout through the trainer's sampler)."""

import pytest
import torch

from agl_lab.config.compose import ConfigError
from agl_lab.training.tasks import make_task
from agl_lab.training.workflow_task import ArithWorkflowTask, read_verdict
from conftest import play

QUESTION = "What is 3 + 4? Give your final answer as a single number."  # item 34 at task_size 10


def workflow(max_turns=3, **kwargs):
    return ArithWorkflowTask(10, max_turns=max_turns, rewrite_prob=0.0, seed=0, **kwargs)


def test_a_right_answer_the_checker_accepts_takes_two_calls_with_different_prompts():
    episode, turns = play(workflow(), 34, ["3 + 4 = 7", "Yes."])
    assert episode.prompt == QUESTION and episode.steps == ["solve", "check"]
    assert turns[0].next_prompt == "A student says that 3 + 4 = 7. Is this true? Answer yes or no."
    assert turns[0].observation is None and turns[0].rewrite is None  # a fresh prompt, not a rewrite
    assert episode.done and episode.success and episode.guesses == ["7", "yes"] and episode.rewrites == 0


def test_a_rejected_answer_is_revised_in_a_prompt_that_shows_it():
    episode, turns = play(workflow(), 34, ["8", "No, it is 7.", "7"])
    assert episode.steps == ["solve", "check", "revise"] and episode.success
    assert turns[1].next_prompt == (
        "What is 3 + 4? The answer 8 was checked and found wrong. Give your final answer as a single number."
    )
    assert episode.guesses == ["8", "no", "7"]


@pytest.mark.parametrize(
    ("answers", "success"),
    [(["7", "No.", "8"], False),  # a right answer talked out of: the final proposal counts
     (["8", "Yes."], False),  # a wrong answer accepted
     (["8", "Hmm", "7"], True)],  # an unreadable verdict is a no
)  # fmt: skip
def test_the_final_proposal_decides_whatever_the_checker_said(answers, success):
    episode, _ = play(workflow(), 34, answers)
    assert episode.done and episode.turns == len(answers) and episode.success is success


def test_an_unreadable_answer_is_revised_without_a_check_and_checks_go_on_up_to_max_turns():
    episode, turns = play(workflow(max_turns=5), 34, ["What is 3 + 4?", "8", "no", "7", "yes"])
    assert episode.steps == ["solve", "revise", "check", "revise", "check"]
    assert "An earlier answer could not be read." in turns[0].next_prompt
    assert episode.guesses == ["none", "8", "no", "7", "yes"] and episode.success
    # the rejected answer echoed back is no new answer
    again, _ = play(workflow(), 34, ["8", "no", "The answer 8 was checked and found wrong."])
    assert again.guesses == ["8", "no", "none"] and not again.success


def test_turn_costs_and_the_knobs():
    episode, _ = play(workflow(turn_cost=0.25), 34, ["8", "no", "7"])
    assert episode.turn_rewards == [-0.25, -0.25] and episode.success
    with pytest.raises(ConfigError, match=r"lab.max_turns must be >= 2 for arith_workflow"):
        make_task("arith_workflow", size=10, max_turns=1, rewrite_prob=0.0, seed=0)


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [("Yes.", "yes"), ("yes, 3 + 4 = 7", "yes"), ("Correct!", "yes"), ("No, it is 7.", "no"), ("Incorrect.", "no"),
     ("That is not correct.", "no"), ("It is wrong", "no"), ("Answer yes or no.", None), ("I think so", None),
     ("Nothing to add", None)],
)  # fmt: skip
def test_a_verdict_is_the_first_yes_or_no_word_and_an_echo_of_the_question_is_none(reply, verdict):
    assert read_verdict(reply) == verdict
    assert read_verdict(reply, cut_off=True) is None


@pytest.mark.xdist_group("real_model")
def test_every_call_of_a_smollm2_workflow_rollout_is_its_own_row():
    import agl_lab
    from agl_lab.core.aggregation import aggregate
    from agl_lab.training.policy import build_policy
    from agl_lab.training.rollout import SamplingParams, collect_rollouts

    cfg = agl_lab.short_run_config(dotlist=["lab.model=smollm2-135m-instruct", "lab.task=arith_workflow",
                                            "actor_rollout_ref.model.lora_rank=0"])  # fmt: skip
    policy = build_policy(cfg, words=[])
    task = make_task("arith_workflow", size=10, max_turns=2, rewrite_prob=0.0, seed=0)
    # a few tokens a call: the rows are checked here, not the answers
    sampling = SamplingParams(n=2, max_new_tokens=4, temperature=1.0, top_k=-1, top_p=1.0)
    dialogues = []
    rollouts, metrics = collect_rollouts(policy, task, step=1, items=[34], sampling=sampling,
                                         generator=torch.Generator().manual_seed(0), dialogues=dialogues)  # fmt: skip
    assert [len(r.calls) for r in rollouts] == [2, 2] and metrics["lab/context_rewrites"] == 0
    assert all(d[2]["fresh"] and "rewrite" not in d[2] for d in dialogues)  # the 2nd call's prompt: a fresh one
    for level in ("trajectory", "transition"):
        rows, _ = aggregate(rollouts, level=level, max_prompt_length=320, max_response_length=320)
        assert list(rows.non_tensor_batch["rollout_id_list"]) == ["s1/p0/r0", "s1/p0/r0", "s1/p0/r1", "s1/p0/r1"]


def test_the_doctor_refuses_the_workflow_on_the_tiny_policy():
    import agl_lab
    from agl_lab.config.doctor import diagnose

    errors = {f.key: f for f in diagnose(agl_lab.short_run_config(dotlist=["lab.task=arith_workflow"]))}
    assert "lab.task" in errors and "lab.model=smollm2-135m-instruct" in errors["lab.task"].fix
    preset = agl_lab.short_run_config(dotlist=["lab.model=smollm2-135m-instruct", "lab.task=arith_workflow"])
    assert (preset.lab.task_size, preset.lab.max_turns) == (10, 3)  # conf/pretrained_arith_workflow.yaml
