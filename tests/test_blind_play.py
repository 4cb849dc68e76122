"""Blind players through the real Episode API: the exact success of sweeps and echoes at given knobs, worked by hand."""

import pytest

from agl_lab.training.blind_play import PLAYERS, blind_players, blind_results, likeliest_answers, play
from agl_lab.training.tasks import make_task


def task(name, size, max_turns, **kwargs):
    return make_task(name, size=size, max_turns=max_turns, rewrite_prob=kwargs.pop("rewrite_prob", 0.3), seed=0,
                     **kwargs)  # fmt: skip


def test_the_likeliest_sums_come_from_the_middle_out():
    # operands 0-9: sum 9 in 10 of 100 questions, 8 and 10 in 9 each, 7 and 11 in 8 each
    assert likeliest_answers(task("retry_arith", 10, 3))[:5] == [9, 8, 10, 7, 11]
    assert likeliest_answers(task("guess_number", 5, 2)) == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="no blind players for LockTask"):
        likeliest_answers(task("lock", 4, 2))


@pytest.mark.parametrize(
    ("name", "size", "max_turns", "sweep", "repeat"),
    [("retry_arith", 10, 3, (10 + 9 + 9) / 100, 10 / 100),  # the old preset: 28% by answering 9, 8, 10 unread
     ("retry_arith", 20, 2, (20 + 19) / 400, 20 / 400),
     ("guess_number", 5, 5, 1.0, 1 / 5),  # the old preset: 1, 2, 3, 4, 5 always wins
     ("guess_number", 20, 3, 3 / 20, 1 / 20),
     ("arith_workflow", 10, 3, 9 / 100, 10 / 100),  # only the final proposal counts: 9, then 10 after the check
     # 5 calls: solve 9, check "8" (unreadable: no), revise 10, check "7" (no), revise 11: sum 11 is in 8 of 100
     ("arith_workflow", 10, 5, 8 / 100, 10 / 100)],
)  # fmt: skip
def test_the_blind_success_is_exact_over_every_item(name, size, max_turns, sweep, repeat):
    results = blind_results(task(name, size, max_turns))
    assert results["sweep"].success == pytest.approx(sweep)
    assert results["repeat"].success == pytest.approx(repeat)
    assert set(results) == set(PLAYERS)


@pytest.mark.parametrize("name", ["retry_arith", "guess_number", "arith_workflow"])
def test_echoing_the_prompt_or_the_feedback_wins_nothing(name):
    results = blind_results(task(name, 5, 3, rewrite_prob=1.0))  # rewrites too: the echo reads each summary
    assert results["echo_prompt"].success == 0.0 and results["echo_feedback"].success == 0.0
    assert results["echo_prompt"].mean_turns == 3.0


def test_players_answer_through_the_episode_api_and_turn_costs_price_the_guesses():
    guess = task("guess_number", 20, 5, turn_cost=0.1)
    episode = play(guess.start(2, step=0, index=0), blind_players(guess)["sweep"])  # the secret 3: won at the 3rd
    assert episode.guesses == ["1", "2", "3"] and episode.success and episode.turn_rewards == [-0.1, -0.1]
    result = blind_results(guess)["sweep"]
    # secrets 1-5 are won at guess 1-5, each returning 1 - 0.1·(k - 1); the other 15 lose, costing 0.1·4 each
    assert result.success == pytest.approx(5 / 20)
    assert result.mean_return == pytest.approx((5 - 0.1 * (0 + 1 + 2 + 3 + 4) - 15 * 0.4) / 20)
