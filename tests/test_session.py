"""A run's end: a full disk mid-run, or a failure while closing, never costs the finished steps, the policy or the
trackers' exit; a run stopped before its first step leaves nothing half-made."""

import errno
import os
import warnings

import pytest

import agl_lab.training.trainer
from agl_lab import short_run_config, train
from agl_lab.curves.history import read_run_dir
from agl_lab.files.jsonl import DamagedFileWarning
from agl_lab.training import tracking
from agl_lab.training.runs import RunFiles
from agl_lab.training.session import RunCloseWarning
from conftest import TINY_RUN


def tiny(tmp_path, *dotlist):
    return short_run_config(
        dotlist=[*TINY_RUN, "trainer.logger=[console]", f"lab.run_dir={tmp_path / 'run'}", *dotlist]
    )


def test_a_disk_that_fills_mid_run_keeps_every_finished_step_the_policy_and_the_tracker_exit(
    tmp_path, monkeypatch, finished
):
    write = RunFiles.write

    def filling_disk(self, step, metrics, timings, transcript=None):
        if step == 3:  # the disk fills while step 3's line is written: a torn line, then ENOSPC
            self._metrics.write('{"step": 3, "training/rew')
            self._metrics.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.run_dir / "metrics.jsonl"))
        write(self, step, metrics, timings, transcript)

    monkeypatch.setattr(RunFiles, "write", filling_disk)
    with pytest.raises(OSError, match="No space left on device"):
        train(tiny(tmp_path, "trainer.total_training_steps=4"), progress=False)
    run_dir = tmp_path / "run"
    assert (run_dir / "policy" / "model.safetensors").exists() and finished == [1]
    with pytest.warns(DamagedFileWarning, match=r"left out 1 torn line: its last line \(3\) is cut short"):
        table = read_run_dir(run_dir)
    assert sorted(set(table.step)) == [1, 2]  # both finished steps readable


@pytest.mark.parametrize("part", ["close", "save"])
def test_a_failure_while_closing_still_saves_the_policy_and_finishes_the_trackers(
    tmp_path, monkeypatch, finished, part
):
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if part == "close":
        monkeypatch.setattr(RunFiles, "close", disk_full)
    else:
        monkeypatch.setattr(agl_lab.training.policy.Policy, "save", disk_full)
    with pytest.warns(RunCloseWarning, match="could not (close metrics.jsonl/timings.jsonl|save the policy)"):
        with pytest.raises(OSError, match="No space left on device"):
            train(tiny(tmp_path), progress=False)
    assert finished == [0]  # the run itself finished; the trackers were told so
    assert (tmp_path / "run" / "policy" / "model.safetensors").exists() == (part == "close")
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("given", [True, False])
def test_ctrl_c_while_the_trackers_start_leaves_no_half_made_run_directory(tmp_path, monkeypatch, given):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(agl_lab.training.trainer, "open_tracker", interrupted)
    monkeypatch.chdir(tmp_path)
    cfg = tiny(tmp_path, "trainer.logger=[wandb]") if given else short_run_config(dotlist=[*TINY_RUN])
    monkeypatch.setenv("WANDB_MODE", "offline")  # so the run claims W&B, which must be released again
    with pytest.raises(KeyboardInterrupt):
        train(cfg, progress=False)
    assert list(tmp_path.iterdir()) == ([] if given else [tmp_path / "runs"])
    assert given or list((tmp_path / "runs").iterdir()) == []
    assert tracking._claims == {}


def test_a_run_that_fails_mid_step_still_closes_everything(tmp_path, monkeypatch, finished):
    step = agl_lab.training.train_step.RunState.step

    def failing(self, n, **kwargs):
        if n == 2:
            raise RuntimeError("a bug in step 2")
        return step(self, n, **kwargs)

    monkeypatch.setattr(agl_lab.training.train_step.RunState, "step", failing)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunCloseWarning)  # closing itself went fine
        with pytest.raises(RuntimeError, match="a bug in step 2"):
            train(tiny(tmp_path), progress=False)
    assert finished == [1] and (tmp_path / "run" / "policy" / "config.json").exists()
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1
