"""Run directories: claimed atomically, so two runs started into one lab.run_dir never mix; a refused run touches
nothing of the other; a run that never started leaves nothing behind."""

import json

import pytest

from agl_lab import short_run_config
from agl_lab.training.runs import RunFiles, create_run_dir
from conftest import TINY_RUN, start_gated

TINY = (*TINY_RUN, "trainer.logger=[]")


def test_two_runs_racing_into_one_directory_one_wins_the_other_touches_nothing(tmp_path):
    run_dir = tmp_path / "run"
    steps = 3
    procs = start_gated(
        tmp_path,
        2,
        setup="from agl_lab.cli import main",
        body="sys.exit(main(sys.argv[2:]))",
        args=["train", *TINY, f"trainer.total_training_steps={steps}", f"lab.run_dir={run_dir}"],
    )
    results = [(proc.wait(timeout=300), proc.stdout.read(), proc.stderr.read()) for proc in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 4], [err[-2000:] for _, _, err in results]
    (loser,) = [err for code, _, err in results if code == 4]
    assert [line for line in loser.splitlines() if line.startswith("agl-lab:")] == [
        f"agl-lab: directory taken: lab.run_dir='{run_dir}' already holds a run (or another run is writing to it): "
        "choose another directory, delete it, or leave lab.run_dir null for a fresh one"
    ]
    # the winner's run is whole: every line one JSON record, steps 1..3 once each, nothing glued
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [json.loads(line)["step"] for line in (run_dir / "timings.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.yaml",
        "metrics.jsonl",
        "policy",
        "status.json",
        "timings.jsonl",
        "transcripts.jsonl",
    ]


def test_the_claim_is_the_exclusive_creation_of_config_yaml(tmp_path):
    cfg = short_run_config(dotlist=[*TINY, f"lab.run_dir={tmp_path / 'run'}"])
    first = RunFiles(create_run_dir(cfg), cfg)  # a run between claiming and its first step
    with pytest.raises(FileExistsError, match="already holds a run"):
        create_run_dir(cfg)  # the quick check: config.yaml is there
    with pytest.raises(FileExistsError, match="already holds a run"):
        RunFiles(tmp_path / "run", cfg)  # the claim itself, for a run that passed the check a moment earlier
    first.write(1, {"a": 1}, {"t": 0.1})
    first.close()
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == '{"step": 1, "a": 1}\n'


@pytest.mark.parametrize("given", [True, False])
def test_discard_removes_what_a_run_made_and_nothing_else(tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)
    cfg = short_run_config(dotlist=[*TINY, f"lab.run_dir={tmp_path / 'cell'}" if given else "lab.run_dir=null"])
    if given:  # a sweep's cell directory: its cell.json was there before the run
        (tmp_path / "cell").mkdir()
        (tmp_path / "cell" / "cell.json").write_text("{}")
    files = RunFiles(create_run_dir(cfg), cfg)
    (files.run_dir / "wandb").mkdir()  # what a tracker had begun
    files.discard()
    if given:
        assert [p.name for p in (tmp_path / "cell").iterdir()] == ["cell.json"]
    else:
        assert list((tmp_path / "runs").iterdir()) == []
