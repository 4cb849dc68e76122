"""retry_arith and guess_number: their questions, how an answer is read, what the environment answers, the rewrites,
and the items a seed draws."""

import pytest

from agl_lab.config.compose import ConfigError
from agl_lab.training.number_tasks import GuessNumberTask, RetryArithTask, last_number
from agl_lab.training.tasks import make_task
from conftest import play


@pytest.mark.parametrize(
    ("text", "number"),
    [("7 + 5 = 12.", "12"), ("The answer is 12", "12"), ("-3", "-3"), ("007", "7"), ("Twelve.", "12"), ("", None),
     ("5 and 6, so eleven!", "11"), ("someone threw it", None), ("twenty-one", None), ("no number here", None)],
)  # fmt: skip
def test_the_last_whole_number_is_the_answer(text, number):
    assert last_number(text) == number


def test_retry_arith_asks_a_plus_b_and_says_try_again_until_right_or_out_of_turns():
    task = RetryArithTask(10, max_turns=3, rewrite_prob=0.0, seed=0)
    episode, turns = play(task, 34, ["3 + 4 = 8", "I think it is small", "seven"])  # item 34: 3 + 4
    assert episode.prompt == "What is 3 + 4? Give your final answer as a single number."
    assert [t.observation for t in turns] == [
        "Incorrect, try again. Give your final answer as a single number.",
        "I could not find a number in your answer. Give your final answer as a single number.",
        None,
    ]
    assert episode.success and episode.done and episode.guesses == ["8", "none", "7"]
    failed, turns = play(task, 34, ["1", "2", "3", "4"])
    assert not failed.success and failed.turns == 3 and turns[-1].done  # the 4th answer is never asked for


def test_guess_number_answers_higher_or_lower_and_a_rewrite_sums_up_the_guesses():
    task = GuessNumberTask(10, max_turns=4, rewrite_prob=0.0, seed=0)
    episode, turns = play(task, 6, ["5", "My guess is 9", "7"])  # item 6: the secret 7
    assert "between 1 and 10" in episode.prompt
    assert [t.observation for t in turns[:2]] == [
        "Higher. Guess again. Reply with a single number.",
        "Lower. Guess again. Reply with a single number.",
    ]
    assert episode.success and episode.turns == 3
    rewriting = GuessNumberTask(10, max_turns=4, rewrite_prob=1.0, seed=0)
    episode, turns = play(rewriting, 6, ["5", "9", "7"])
    assert turns[0].observation is None and "(5: higher)" in turns[0].rewrite
    assert "(5: higher; 9: lower)" in turns[1].rewrite and episode.rewrites == 2 and episode.success


def test_items_cover_the_questions_and_a_seed_fixes_them():
    arith = RetryArithTask(4, max_turns=2, rewrite_prob=0.3, seed=5)
    items = arith.sample_items(step=1, batch_size=16)
    assert sorted(items) == list(range(16))  # 4 x 4 questions, all distinct while there are enough
    assert arith.sample_items(step=1, batch_size=16) == items != arith.sample_items(step=2, batch_size=16)
    assert {arith.start(i, step=1, index=0).a for i in items} == {0, 1, 2, 3}
    guess = GuessNumberTask(6, max_turns=2, rewrite_prob=0.3, seed=5)
    secrets = [guess.start(i, step=1, index=0).secret for i in guess.sample_items(step=1, batch_size=6)]
    assert sorted(secrets) == [1, 2, 3, 4, 5, 6]
    draws = [guess.start(0, step=1, index=j).rng.random() for j in range(3)]
    assert len(set(draws)) == 3 and draws == [guess.start(0, step=1, index=j).rng.random() for j in range(3)]


@pytest.mark.parametrize("name", ["retry_arith", "guess_number"])
def test_bad_knobs_are_refused_naming_the_key(name):
    with pytest.raises(ConfigError, match=r"lab.task_size must be an integer >= 2"):
        make_task(name, size=1, max_turns=2, rewrite_prob=0.0, seed=0)
    with pytest.raises(ConfigError, match=r"lab.rewrite_prob must be a probability"):
        make_task(name, size=5, max_turns=2, rewrite_prob=1.5, seed=0)


# --- how an answer is read (agl_lab.training.number_tasks' docstring): one case per rule, with the exact texts ---


@pytest.mark.parametrize(
    ("text", "number"),
    [("7.0", "7"), ("7.5", "7.5"), ("The answer is 7.50", "7.5"), ("12.", "12"), ("It is 12. Done.", "12"),
     ("-0", "0"), ("3.0.", "3")],
)  # fmt: skip
def test_decimals_read_as_numbers_and_a_full_stop_is_no_decimal_point(text, number):
    assert last_number(text) == number


@pytest.mark.parametrize(
    ("text", "guess"),
    [("What is 0 + 7?", None), ("What is 0 + 7? Give your final answer as a single number.", None),
     ("0 + 7", None), ("0+7", None), ("0 plus 7", None), ("0 + 7 = 7", "7"), ("0+7=7.", "7"), ("What is 0 + 7? 7", "7"),
     ("10 + 7 = 17", "17"), ("0 + 70", "70")],
)  # fmt: skip
def test_the_questions_own_numbers_are_never_the_answer(text, guess):
    task = RetryArithTask(10, max_turns=3, rewrite_prob=0.0, seed=0)
    assert task.start(7, step=0, index=0).read(text) == guess  # item 7: 0 + 7


@pytest.mark.parametrize(
    ("text", "guess"),
    [("Guess my secret number. It is between 1 and 5. Answer with just the number.", None), ("1 to 5", None),
     ("1-5", None), ("Between 1 and 5, I pick 3.", "3"), ("5", "5"), ("1 and 50", "50")],
)  # fmt: skip
def test_the_ranges_bounds_are_never_a_guess(text, guess):
    task = GuessNumberTask(5, max_turns=3, rewrite_prob=0.0, seed=0)
    assert task.start(4, step=0, index=0).read(text) == guess  # item 4: the secret 5


def test_a_decimal_is_wrong_unless_it_is_the_whole_number():
    task = RetryArithTask(10, max_turns=3, rewrite_prob=0.0, seed=0)
    episode, turns = play(task, 34, ["7.5", "7.0"])  # 3 + 4
    assert episode.guesses == ["7.5", "7"] and episode.success
    assert turns[0].observation.startswith("Incorrect, try again.")
    guess, turns = play(GuessNumberTask(10, max_turns=3, rewrite_prob=0.0, seed=0), 6, ["6.5", "7.5"])  # secret 7
    assert [t.observation.split(".")[0] for t in turns[:2]] == ["Higher", "Lower"]


@pytest.mark.parametrize("name", ["retry_arith", "guess_number"])
def test_a_cut_off_answer_is_unreadable(name):
    task = make_task(name, size=10, max_turns=2, rewrite_prob=0.0, seed=0)
    episode = task.start(6, step=0, index=0)  # 0 + 6, or the secret 7
    right = "6" if name == "retry_arith" else "7"
    turn = episode.respond(f"The answer is {right}", cut_off=True)  # no end-of-turn token: it was still writing
    assert episode.guesses == ["none"] and not turn.done
    assert turn.observation.startswith("I could not find a number")
    assert episode.respond(f"The answer is {right}").success  # finished, the same text reads


def test_only_the_last_300_characters_are_read_as_verls_gsm8k_reward_does():
    task = RetryArithTask(10, max_turns=1, rewrite_prob=0.0, seed=0)
    assert task.start(34, step=0, index=0).read("7 " + "blah " * 60) is None  # 302 characters: the 7 is outside
    assert task.start(34, step=0, index=0).read("7 " + "blah " * 59) == "7"


def test_the_lock_game_still_reads_a_cut_off_answer():
    from agl_lab.training.lock_task import LockTask

    task = LockTask(n_locks=4, max_turns=2, rewrite_prob=0.0, seed=1)
    episode = task.start(0, step=0, index=0)
    episode.respond(f"c{task.codes[0]}", cut_off=True)
    assert episode.success  # the tiny policy's 3-token answers are read by their first word, finished or not
