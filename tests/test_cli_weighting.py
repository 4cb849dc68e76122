"""``agl-lab weighting PATH``: the table in verl PR #7580's column order, its numbers against a count by hand from
data/sample_batch's rollouts, and bad input as one line with a documented exit code."""

import re
import subprocess
import sys

import pandas as pd
import pytest
from test_diagnostics import hand_table

from agl_lab.cli import main
from agl_lab.files.batch_io import sample_batch_path
from agl_lab.lab.diagnostics import COLUMNS


def printed_table(text: str) -> dict[str, dict[str, str]]:
    """The first table the command prints: mode -> column -> cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["mode", "trajectories"])
    header = lines[start].split()
    table = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = line.split()
        table[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return header, table


def test_the_sample_batchs_table_is_the_count_by_hand(capsys):
    # the hand count (tests/test_diagnostics.hand_table): data/sample_batch's 48 rollouts and 81 rows counted with
    # plain loops: 23 solved (30 rows), 25 failed (51 rows); unweighted by row 30/81; session_equal's ESS 48²/Σ1/k
    assert main(["weighting", str(sample_batch_path())]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("Base: short-run")
    header, table = printed_table(out)
    assert header == COLUMNS
    expected = hand_table()
    for mode in ("seq-mean-token-mean", "session_equal"):
        line = table[mode]
        assert (line["trajectories"], line["rows"]) == ("48", "81")
        for key in ("solve_by_trajectory", "mean_rows_solved", "mean_rows_failed"):
            assert line[key] == f"{expected[key]:.3f}", (mode, key)
        for key, value in expected[mode].items():
            assert line[key] == f"{round(value, 3) + 0.0:.3f}", (mode, key)
    assert table["seq-mean-token-mean"]["gap"] == "0.109" and table["session_equal"]["ess_fraction"] == "0.828"
    assert "Influence by rows per rollout under session_equal" in out


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["weighting", "{tmp}"], 5, "is neither a batch (no batch.json"),
        (["weighting", "{tmp}/nothing"], 5, "no batch or run at"),
        (["weighting", "{sample}", "--modes", "session-equal"], 2, "unknown loss modes ['session-equal']: choose from"),
    ],
)
def test_bad_input_is_one_line_with_its_exit_code(args, code, text, tmp_path, capsys):
    args = [a.format(tmp=tmp_path, sample=sample_batch_path()) for a in args]
    assert main(args) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and text in err[0]


def test_a_batch_lacking_rollout_ids_names_the_field(tmp_path, capsys):
    from agl_lab.files.batch_io import load_batch, save_batch

    rows = load_batch(sample_batch_path())
    del rows.non_tensor_batch["rollout_id_list"]
    save_batch(rows, tmp_path / "batch")
    assert main(["weighting", str(tmp_path / "batch")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "needs fields this batch lacks: rollout_id_list" in line


def test_a_verl_run_by_step_with_steps_and_out(tmp_path, capsys):
    from agl_lab.files.verl_dump import write_verl_dump
    from agl_lab.lab.run_diagnostics import STEP_COLUMNS
    from agl_lab.lab.synthetic import SyntheticKnobs, synthetic_rows

    for step in (1, 2, 3):
        rows, _ = synthetic_rows(SyntheticKnobs(n_prompts=4, level="transition", fail_extra_calls=9, seed=step))
        write_verl_dump(rows, tmp_path / "dump", step=step)
    out = tmp_path / "out"
    assert main(["weighting", str(tmp_path / "dump"), "--steps", "2-3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    header, table = printed_table(text)
    assert header == [*COLUMNS, "missing"] and table["token-mean"]["missing"] == "response_tokens"
    assert "(2 steps;" in text and table["session_equal"]["gap"] == "0.000"
    steps = pd.read_csv(out / "weighting_steps.csv")
    assert list(steps.columns) == STEP_COLUMNS and sorted(steps["step"].unique()) == [2, 3]
    whole = pd.read_csv(out / "weighting_run.csv").set_index("mode")
    assert whole.loc["session_equal", "rows"] == steps[steps["mode"] == "session_equal"]["rows"].sum()
    influence = pd.read_csv(out / "weighting_influence.csv")
    assert influence["rows_per_rollout"].max() >= 10  # failures make 10+ calls: a class of their own
    for name in ("weighting_steps.png", "weighting_influence.png"):
        assert (out / name).stat().st_size > 10_000 and f"wrote {out / name}" in text


def test_out_that_is_a_file_writes_nothing(tmp_path, capsys):
    (tmp_path / "taken").write_text("x")
    assert main(["weighting", str(sample_batch_path()), "--out", str(tmp_path / "taken")]) == 2
    assert "is a file: give a folder" in capsys.readouterr().err
    assert (tmp_path / "taken").read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_the_command_on_a_batch_file_loads_no_torch_verl_ray_tensordict_or_hydra():
    probe = (
        "import sys\n"
        "from agl_lab.cli import main\n"
        "from agl_lab.files.batch_io import sample_batch_path\n"
        "code = main(['weighting', str(sample_batch_path())])\n"
        "print(code, sorted(m for m in ('torch', 'verl', 'ray', 'tensordict', 'hydra') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        out.stdout.strip().splitlines()[-1] == "0 []"
    )  # each costs seconds to import (benchmarks/bench_weighting_cli)


def test_a_dump_with_each_sessions_outcome_on_its_last_row_prints_the_table_of_its_outcomes(tmp_path, capsys):
    # issue 50: verl's dump of a multi-output agent loop, the outcome on a session's last row and zeros before it,
    # ended with exit 70; now it reads as the same rollouts with the outcome on every row (Agent Lightning's shape)
    from test_run_readers import agent_rows
    from test_run_sessions import outcome_on_last_row

    from agl_lab.files.verl_dump import write_verl_dump

    for step, n_prompts in ((1, 70), (2, 5), (3, 5)):
        rows = agent_rows(step, n_prompts=n_prompts, calls="uniform", min_calls=1, max_calls=12)
        write_verl_dump(rows, tmp_path / "agreeing", step=step)
        outcome_on_last_row(rows)
        write_verl_dump(rows, tmp_path / "last", step=step)
    out = tmp_path / "out"
    assert main(["weighting", str(tmp_path / "last"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    said = next(line for line in text.splitlines() if line.startswith("Outcome of a session"))
    assert said.startswith("Outcome of a session (--outcome last, the default): the score of the session's last row")
    assert re.search(r"the rows of [1-9]\d* of \d+ sessions carried different scores", said)
    assert main(["weighting", str(tmp_path / "agreeing")]) == 0
    agreeing = capsys.readouterr().out
    assert "the rows of each of the" in agreeing
    assert printed_table(text) == printed_table(agreeing)
    assert pd.read_csv(out / "weighting_steps.csv")["step"].unique().tolist() == [1, 2, 3]
    assert main(["weighting", str(tmp_path / "last"), "--outcome", "max"]) == 0
    assert "(--outcome max): the highest score among the session's rows" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:
        main(["weighting", str(tmp_path / "last"), "--outcome", "first"])
    assert usage.value.code == 2
    assert "argument --outcome: invalid choice: 'first'" in capsys.readouterr().err


def refused_shapes(tmp_path) -> dict:
    """A file of each shape the reader refuses, by verl's own writer or the lab's: its name -> what the line says."""
    import json

    from test_run_readers import agent_rows

    from agl_lab.files.batch_header import META_FILE, header_digest
    from agl_lab.files.batch_io import load_batch, save_batch
    from agl_lab.files.verl_dump import write_verl_dump

    rows = agent_rows(40, n_prompts=3)
    write_verl_dump(rows, tmp_path / "turns", step=1, request_ids=None)
    groups = [f"g{i % 2}" for i in range(len(rows))]
    write_verl_dump(rows, tmp_path / "groups", step=1, reward_extra={"uid": groups})
    write_verl_dump(rows, tmp_path / "renamed", step=1)
    (tmp_path / "renamed" / "1.jsonl").rename(tmp_path / "renamed" / "7.jsonl")
    batch = save_batch(load_batch(sample_batch_path()), tmp_path / "batch")
    header = json.loads((batch / META_FILE).read_text())
    header["rows"] = 80
    header["sha256"]["header"] = header_digest(header)
    (batch / META_FILE).write_text(json.dumps(header))
    return {
        "turns": r"turns/1\.jsonl: line \d+'s prompt continues line \d+'s .*\(--trajectory-column",
        "groups": r"groups/1\.jsonl: session 'p\d/r\d' has rows in 2 GRPO groups .*\(--group-column",
        "renamed": r"renamed/7\.jsonl is step 7 by its name, but \d+ of its rows say step \[1\]",
        "batch": r"batch is corrupt, its header disagreeing with what it stores: batch\.json says 80 rows where",
    }


def test_every_refused_shape_is_one_line_with_exit_5(tmp_path, capsys):
    for name, text in refused_shapes(tmp_path).items():
        assert main(["weighting", str(tmp_path / name), "--out", str(tmp_path / "out")]) == 5, name
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("agl-lab: file error: ") and re.search(text, line), (name, line)
        assert not (tmp_path / "out").exists()  # nothing partial
