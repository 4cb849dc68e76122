"""A run's sessions as each dump shape writes them, every dump written by verl's own ``_write_generations``: the outcome
on a session's last row only (zeros before it, as a multi-output agent loop can write), rows that agree read exactly
as they are, sessions without a ``request_id``, the same session id in two step files, and sessions in two groups."""

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_run_readers import agent_rows

import agl_lab
from agl_lab.files.batch_io import BatchFileError, save_batch
from agl_lab.files.outcome_rules import DEFAULT_OUTCOME, OUTCOMES, check_outcome
from agl_lab.files.run_readers import iter_run_steps
from agl_lab.files.verl_dump import read_verl_step, write_verl_dump
from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows


def last_rows(rows) -> np.ndarray:
    """(rows,) bool: each rollout's last row (the rows of a rollout in the order the batch holds them)."""
    return ~pd.Series(rows.non_tensor_batch["rollout_id_list"]).duplicated(keep="last").to_numpy()


def outcome_on_last_row(rows, *, failure=0.0):
    """``rows`` (every row carrying its rollout's reward, as Agent Lightning writes them) rewritten as a multi-output
    agent loop can leave them: the outcome on each rollout's last row (``failure`` for a reward of 0), 0 on the others.
    Returns each row's true outcome, what a reader should give every row of the rollout."""
    scores = rows.batch["token_level_scores"]  # (rows, R): the reward on each row's last response token
    truth = scores.float().sum(-1)  # (rows,)
    truth = torch.where(truth > 0, truth, torch.full_like(truth, failure))
    last = torch.as_tensor(last_rows(rows))  # (rows,)
    ends = rows.batch["response_mask"].long().cumsum(-1).argmax(-1)  # (rows,) each row's last trainable token
    placed = torch.zeros_like(scores, dtype=torch.float32)  # (rows, R)
    placed[torch.arange(len(rows)), ends] = torch.where(last, truth, torch.zeros_like(truth))
    rows.batch["token_level_scores"] = placed.to(scores.dtype)
    return truth.tolist()


def test_the_outcome_on_each_sessions_last_row_is_read_as_the_sessions_outcome(tmp_path):
    truths = {}
    for step, n_prompts in ((1, 72), (2, 6), (3, 6)):
        rows = agent_rows(step, n_prompts=n_prompts, calls="uniform", min_calls=1, max_calls=14)
        truths[step] = outcome_on_last_row(rows)
        write_verl_dump(rows, tmp_path, step=step)
    raw = read_verl_step(tmp_path / "1.jsonl", step=1)  # the file as written: scores on the last rows only
    assert len(raw) > 2000 and raw.groupby("trajectory").size().max() >= 10
    assert (raw["reward"] == 0).sum() > len(raw) // 2 and raw["reward"].tolist() != truths[1]
    table = agl_lab.read_run(tmp_path)
    for step, truth in truths.items():
        assert table[table["step"] == step]["reward"].tolist() == truth, step
    sizes = raw.groupby("trajectory", sort=False).size()
    solved_multi = raw.groupby("trajectory", sort=False)["reward"].max().gt(0) & sizes.gt(1)
    counts = agl_lab.read_run(tmp_path, steps=1).attrs["sessions"]
    assert counts == {
        "outcome": "last",
        "sessions": len(sizes),
        "disagreeing": int(solved_multi.sum()),
        "unnamed_rows": 0,
    }
    # the maximum reads the same here: the scores are not negative
    assert agl_lab.read_run(tmp_path, outcome="max")["reward"].tolist() == table["reward"].tolist()


def test_a_negative_failure_after_zeros_is_the_last_rows_not_the_maximum(tmp_path):
    rows = agent_rows(8, n_prompts=4, calls="uniform", min_calls=2, max_calls=11)
    truth = outcome_on_last_row(rows, failure=-1.0)
    write_verl_dump(rows, tmp_path, step=1)
    assert agl_lab.read_run(tmp_path)["reward"].tolist() == truth
    highest = agl_lab.read_run(tmp_path, outcome="max")["reward"]
    assert (highest.to_numpy() == np.maximum(truth, 0.0)).all() and -1.0 in truth  # -1 after zeros reads as 0
    with pytest.raises(ValueError, match=r"outcome='lsat' is not a rule \(did you mean 'last'\?\): choose from"):
        agl_lab.read_run(tmp_path, outcome="lsat")


def test_rows_that_agree_are_read_exactly_as_they_are(tmp_path):
    # Agent Lightning's shape: every row carries its rollout's reward; either rule changes nothing, not a bit
    rows = agent_rows(9, n_prompts=8, calls="uniform", min_calls=1, max_calls=12)
    write_verl_dump(rows, tmp_path, step=4)
    raw = read_verl_step(tmp_path / "4.jsonl", step=4)
    for outcome in OUTCOMES:
        (step, frame), *_ = iter_run_steps(tmp_path, outcome=outcome)
        pd.testing.assert_frame_equal(frame, raw)
        assert frame.attrs["sessions"]["disagreeing"] == 0
    assert check_outcome(DEFAULT_OUTCOME) == "last"


def test_last_is_the_highest_row_then_the_order_held_and_max_keeps_a_nan(tmp_path):
    # a table whose rows come out of order: its row column says which is the session's last
    table = pd.DataFrame(
        {
            "step": 1,
            "group": ["g", "g", "g", "g", "g"],
            "trajectory": ["a", "a", "a", "b", "b"],
            "row": [2, 0, 1, 0, 1],
            "reward": [1.0, 0.0, 0.5, np.nan, 0.0],
        }
    )
    table.to_csv(tmp_path / "rows.csv", index=False)
    assert agl_lab.read_run(tmp_path / "rows.csv")["reward"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    highest = agl_lab.read_run(tmp_path / "rows.csv", outcome="max")["reward"].tolist()
    assert highest[:3] == [1.0] * 3 and np.isnan(highest[3:]).all()  # no maximum over a NaN: never guessed


def test_sessions_without_request_id_are_one_row_each_unless_a_row_continues_another(tmp_path):
    # verl's own agent loops make one row per sample (a whole multi-turn conversation) and write no request_id
    whole = agent_rows(10, n_prompts=6, min_calls=1, max_calls=4)
    single, _ = synthetic_rows(SyntheticKnobs(n_prompts=6, rollouts_per_prompt=4, level="trajectory", break_prob=0.0))
    assert len(single) == len(set(single.non_tensor_batch["rollout_id_list"]))  # one row per rollout
    write_verl_dump(single, tmp_path / "single", step=1, request_ids=None)
    table = agl_lab.read_run(tmp_path / "single")
    assert table["trajectory"].tolist() == [f"1.jsonl:{line}" for line in range(1, len(single) + 1)]
    groups = single.non_tensor_batch["data_id_list"]  # the group: the prompt, which a dataset item's rollouts share
    assert pd.factorize(table["group"])[0].tolist() == pd.factorize(groups)[0].tolist()
    assert table.attrs["sessions"]["unnamed_rows"] == len(single)
    # a multi-output loop's turns without their session id: refused, naming the lines and the fix
    write_verl_dump(whole, tmp_path / "turns", step=2, request_ids=None)
    with pytest.raises(BatchFileError, match=r"2\.jsonl: line \d+'s prompt continues line \d+'s prompt and response"):
        agl_lab.read_run(tmp_path / "turns")
    # rows of one loop with request_id beside rows of another without (verl fills a field a loop leaves out with None)
    ids = np.asarray(whole.non_tensor_batch["rollout_id_list"], dtype=object).copy()
    singles = pd.Series(ids).map(pd.Series(ids).value_counts()).to_numpy() == 1
    assert singles.any() and not singles.all()
    ids[singles] = None
    whole.non_tensor_batch["rid"] = ids
    write_verl_dump(whole, tmp_path / "mixed", step=3, request_ids="rid")
    mixed = agl_lab.read_run(tmp_path / "mixed")
    lines = np.flatnonzero(singles) + 1
    assert mixed["trajectory"][singles].tolist() == [f"3.jsonl:{line}" for line in lines]
    assert mixed["trajectory"][~singles].tolist() == ids[~singles].tolist()
    ids[np.flatnonzero(~singles)[1]] = None  # a turn of a multi-row session loses its id
    whole.non_tensor_batch["rid"] = ids
    write_verl_dump(whole, tmp_path / "torn", step=3, request_ids="rid")
    with pytest.raises(BatchFileError, match=r"prompt continues line .* of its rows carry no session id"):
        agl_lab.read_run(tmp_path / "torn")


def test_the_same_session_id_in_two_step_files_is_two_sessions(tmp_path):
    # rollout ids p{prompt}/r{k} come back every step, as verl v1's uid keys do every epoch
    truths = {}
    for step in (1, 2):
        rows = agent_rows(20 + step, n_prompts=4, calls="uniform", min_calls=1, max_calls=10)
        truths[step] = outcome_on_last_row(rows)
        write_verl_dump(rows, tmp_path, step=step)
    table = agl_lab.read_run(tmp_path)
    per_step = table.groupby("step")["trajectory"].nunique()
    assert set(table[table["step"] == 1]["trajectory"]) & set(table[table["step"] == 2]["trajectory"])
    for step, truth in truths.items():  # each step's rows carry that step's outcome, row numbers restart
        part = table[table["step"] == step]
        assert part["reward"].tolist() == truth and (part.groupby("trajectory")["row"].min() == 0).all()
    assert table.attrs["sessions"]["sessions"] == per_step.sum()
    whole = agl_lab.weighting_diagnostics(tmp_path, modes=["session_equal"])
    assert whole["trajectories"].item() == per_step.sum()


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
def test_a_session_in_two_groups_is_refused_in_a_dump_and_in_a_batch_file(tmp_path, mask_dtype):
    rows = agent_rows(30, n_prompts=4)
    groups = np.asarray(rows.non_tensor_batch["data_id_list"], dtype=object).copy()
    session = rows.non_tensor_batch["rollout_id_list"]
    multi = pd.Series(session).duplicated(keep="first").to_numpy()  # a later row of a multi-row session
    groups[np.flatnonzero(multi)[0]] = "elsewhere"
    write_verl_dump(rows, tmp_path / "dump", step=1, reward_extra={"uid": groups.tolist()})
    message = r"1\.jsonl: session '(p\d+/r\d+)' has rows in 2 GRPO groups \('p\d+', 'elsewhere'\); .*--group-column"
    with pytest.raises(BatchFileError, match=message):
        agl_lab.read_run(tmp_path / "dump")
    rows.non_tensor_batch["data_id_list"] = groups
    rows.batch["response_mask"] = rows.batch["response_mask"].to(mask_dtype)
    save_batch(rows, tmp_path / "batch")
    with pytest.raises(BatchFileError, match=r"batch: session 'p\d+/r\d+' has rows in 2 GRPO groups"):
        agl_lab.read_run(tmp_path / "batch")


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])
def test_a_batch_file_with_the_outcome_on_the_last_row_reads_its_sessions_outcomes(tmp_path, mask_dtype):
    rows = agent_rows(31, n_prompts=6, calls="uniform", min_calls=2, max_calls=10)
    agreeing = agl_lab.weighting_diagnostics(save_batch(rows, tmp_path / "agreeing"))
    truth = outcome_on_last_row(rows)
    rows.batch["response_mask"] = rows.batch["response_mask"].to(mask_dtype)
    save_batch(rows, tmp_path / "last")
    assert agl_lab.read_run(tmp_path / "last")["reward"].tolist() == truth
    table = agl_lab.weighting_diagnostics(tmp_path / "last")
    pd.testing.assert_frame_equal(table, agreeing, check_like=False)
    assert table.attrs["sessions"]["disagreeing"] > 0 == agreeing.attrs["sessions"]["disagreeing"]


def continued_by_whole_texts(prompts, responses, unnamed):
    """The continuation search squeezing every prompt and response whole: what the reader finds must be this."""
    import bisect

    squeezed = ["".join(str(text).split()) for text in prompts]
    keyed = sorted((text, row) for row, text in enumerate(squeezed))
    keys = [key for key, _ in keyed]
    for i, (prompt, response) in enumerate(zip(squeezed, responses, strict=True)):
        turn = prompt + "".join(str(response or "").split())
        if len(turn) == len(prompt):
            continue
        at = bisect.bisect_left(keys, turn)
        if at < len(keys) and keys[at].startswith(turn) and (unnamed[i] or unnamed[keyed[at][1]]):
            return i, keyed[at][1]
    return None


TEXT = st.text(alphabet="ab \n\t", max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(TEXT, st.one_of(st.none(), st.just(np.nan), TEXT), st.booleans()), max_size=8))
def test_a_turn_is_found_as_squeezing_whole_texts_finds_it(rows):
    # responses squeezed only as far as the longest prompt reaches: the same pair, or none, as squeezing them whole
    from agl_lab.files.verl_dump import _continued

    prompts = [p for p, _, _ in rows]
    responses = [r for _, r, _ in rows]
    unnamed = np.array([u for _, _, u in rows], dtype=bool)
    assert _continued(prompts, responses, unnamed) == continued_by_whole_texts(prompts, responses, unnamed)
