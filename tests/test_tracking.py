"""Tracking: verl's Tracking per backend, W&B offline by default inside the run, failures that never stop a run,
and secrets that never reach a tracker, the run directory or the console."""

import functools
import os
import sys

import numpy as np
import pytest
import torch

import agl_lab
from agl_lab import short_run_config, train
from agl_lab.config.secrets import redact_argv
from agl_lab.curves.wandb_offline import find_offline_runs, read_offline_run
from agl_lab.training.tracking import Tracker, TrackerWarning, open_tracker, plain_metrics, wandb_key_configured
from conftest import TINY_RUN, log_offline_run

SECRET = "sk-do-not-leak-4711"
SECRETS = (f"agentlightning.agl_key={SECRET}", f"+agentlightning.local.env_map.OPENAI_API_KEY={SECRET}")


def tiny_cfg(tmp_path, *dotlist):
    return short_run_config(dotlist=[*TINY_RUN, f"lab.run_dir={tmp_path / 'run'}", *dotlist])


class Recorder:
    """A stand-in for verl's Tracking that keeps what it was given."""

    instances: list["Recorder"] = []
    fail_on: dict[str, str] = {}  # backend -> "start" or "log"

    def __init__(self, project_name, experiment_name, default_backend, config):
        (self.backend,) = default_backend
        if self.fail_on.get(self.backend) == "start":
            raise ConnectionError("no route to the tracking server")
        self.config, self.logged, self.finished = config, [], None
        Recorder.instances.append(self)

    def log(self, data, step):
        if self.fail_on.get(self.backend) == "log":
            raise OSError("disk full")
        self.logged.append((step, data))

    def finish(self, exit_code=0):
        self.finished = exit_code


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(Recorder, "instances", [])
    monkeypatch.setattr(Recorder, "fail_on", {})
    monkeypatch.setattr(
        agl_lab.training.trainer, "open_tracker", functools.partial(open_tracker, tracking_cls=Recorder)
    )
    return Recorder


def own_environ():
    """The environment without WANDB_SERVICE, which wandb sets for its service process on its first start."""
    return {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}


def finished_offline_run(run_dir):
    """The run's W&B file, read at once: train() returns only after the exit record is on disk."""
    (run_file,) = find_offline_runs(run_dir / "wandb")
    return run_file, read_offline_run(run_file)


def test_wandb_is_offline_by_default_and_the_run_sits_in_the_run_directory(tmp_path, monkeypatch):
    for key in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc: no key configured
    monkeypatch.setattr(sys, "argv", ["agl-lab", "train", *SECRETS])
    environ = own_environ()
    result = train(tiny_cfg(tmp_path, "trainer.logger=[wandb]", *SECRETS), progress=False)
    run_file, run = finished_offline_run(result.run_dir)
    assert run_file.parent.name.startswith("offline-run-") and str(result.wandb_run) == str(run_file.parent)
    assert run.complete and run.project == "agl_lab" and run.name == "short_run"
    assert [row["_step"] for row in run.history] == [1, 2]
    assert [row["lab/success_rate"] for row in run.history] == list(result.history["lab/success_rate"])
    assert "timing_s/step" in run.history[0]  # timings go to the tracker, not to metrics.jsonl
    assert run.config["agentlightning"]["agl_key"] == "***"
    for path in result.run_dir.rglob("*"):  # config.yaml, metrics, policy, the W&B run (its command line too)
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), path
    assert own_environ() == environ and sys.argv[2:] == list(SECRETS)  # the caller's process is as it was


def test_every_run_of_a_process_gets_its_own_wandb_run_in_its_own_directory(tmp_path, monkeypatch):
    """W&B reads WANDB_* once per process: the demo's second and third runs must not land in the first's folder."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    runs = [train(tiny_cfg(tmp_path / name, "trainer.logger=[wandb]"), progress=False) for name in ("a", "b")]
    for result in runs:
        run_file, run = finished_offline_run(result.run_dir)
        assert run.complete and [row["_step"] for row in run.history] == [1, 2]
        assert str(result.wandb_run) == str(run_file.parent)
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the caller's setting applies to the next run again
    assert train(tiny_cfg(tmp_path / "c", "trainer.logger=[wandb]"), progress=False).wandb_run is None


def test_a_configured_wandb_mode_is_respected(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    result = train(tiny_cfg(tmp_path, "trainer.logger=[wandb]"), progress=False)
    assert result.wandb_run is None and not (result.run_dir / "wandb").exists()


def test_lab_wandb_mode_sets_the_mode_for_that_run_and_leaves_the_environment_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    environ = own_environ()
    result = train(tiny_cfg(tmp_path / "a", "trainer.logger=[wandb]", "lab.wandb_mode=offline"), progress=False)
    _, run = finished_offline_run(result.run_dir)
    assert run.complete and [row["_step"] for row in run.history] == [1, 2]
    assert own_environ() == environ  # WANDB_MODE is still the caller's "disabled"
    assert train(tiny_cfg(tmp_path / "b", "trainer.logger=[wandb]"), progress=False).wandb_run is None  # auto
    monkeypatch.delenv("WANDB_MODE")
    disabled = train(tiny_cfg(tmp_path / "c", "trainer.logger=[wandb]", "lab.wandb_mode=disabled"), progress=False)
    assert disabled.wandb_run is None and not (disabled.run_dir / "wandb").exists()


def test_a_backend_that_fails_to_start_warns_once_and_the_run_goes_on(tmp_path, recorder, capsys):
    recorder.fail_on["wandb"] = "start"
    with pytest.warns(TrackerWarning, match="'wandb' failed to start .*ConnectionError") as caught:
        result = train(tiny_cfg(tmp_path, "trainer.logger=[wandb,file]"), progress=False)
    assert len([w for w in caught if issubclass(w.category, TrackerWarning)]) == 1
    assert len(result.history) == 2 and not result.stopped
    (file_backend,) = recorder.instances
    assert file_backend.backend == "file" and [step for step, _ in file_backend.logged] == [1, 2]
    assert file_backend.finished == 0


def test_a_backend_that_fails_to_log_is_dropped_after_one_warning(tmp_path, recorder):
    recorder.fail_on["console"] = "log"
    with pytest.warns(TrackerWarning, match="'console' failed to log step 1 .*disk full") as caught:
        result = train(tiny_cfg(tmp_path, "trainer.logger=[console,file]"), progress=False)
    assert len([w for w in caught if issubclass(w.category, TrackerWarning)]) == 1
    assert len(result.history) == 2
    console, file_backend = recorder.instances
    assert console.finished is None  # dropped: never logged to or finished again
    assert [step for step, _ in file_backend.logged] == [1, 2] and file_backend.finished == 0


def test_an_unknown_backend_is_verls_assertion_turned_into_a_warning(tmp_path):
    with pytest.warns(TrackerWarning, match="'nosuchtracker' failed to start .*not supported"):
        result = train(tiny_cfg(tmp_path, "trainer.logger=[nosuchtracker]"), progress=False)
    assert len(result.history) == 2


def test_secrets_are_masked_in_tracker_inputs_config_yaml_and_the_console(tmp_path, recorder, capsys):
    result = train(tiny_cfg(tmp_path, "trainer.logger=[console]", *SECRETS), progress=False)
    (tracker,) = recorder.instances
    assert tracker.config["agentlightning"]["agl_key"] == "***"
    assert tracker.config["agentlightning"]["local"]["env_map"]["OPENAI_API_KEY"] == "***"
    assert SECRET not in repr(tracker.config) + repr(tracker.logged)
    config_yaml = (result.run_dir / "config.yaml").read_text()
    assert "agl_key: '***'" in config_yaml and SECRET not in config_yaml
    assert result.config.agentlightning.agl_key == SECRET  # the run itself still has it
    # the real console backend
    train(tiny_cfg(tmp_path / "b", "trainer.logger=[console]", *SECRETS), progress=False)
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err


def test_console_backend_prints_every_step(tmp_path, capsys):
    train(tiny_cfg(tmp_path, "trainer.logger=[console]"), progress=False)
    out = capsys.readouterr().out
    assert "step:1 - " in out and "step:2 - " in out and "lab/success_rate:" in out


def test_plain_metrics_turns_numpy_and_torch_scalars_into_python_numbers():
    plain = plain_metrics({"a": np.float32(0.5), "b": np.int64(3), "c": torch.tensor(2.0), "d": "x", "e": 1})
    assert plain == {"a": 0.5, "b": 3, "c": 2.0, "d": "x", "e": 1}
    assert all(type(v) in (float, int, str) for v in plain.values())


def test_a_wandb_key_counts_from_the_environment_or_netrc(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not wandb_key_configured()
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password abc\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert wandb_key_configured()
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "abc")
    assert wandb_key_configured()


def test_redact_argv_masks_secret_dotlist_items_and_flags():
    argv = ["agl-lab", "train", "agentlightning.agl_key=abc", "++x.api_key=q", "--agl-key", "zz", "--hf-token=yy"]
    argv += [
        "lab.seed=1",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=5",
        "--out",
        "d",
        "agentlightning.agl_key=",
    ]
    assert redact_argv(argv) == [
        "agl-lab",
        "train",
        "agentlightning.agl_key=***",
        "++x.api_key=***",
        "--agl-key",
        "***",
        "--hf-token=***",
        "lab.seed=1",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=5",
        "--out",
        "d",
        "agentlightning.agl_key=",  # empty: nothing to hide, and a reader sees none was set
    ]


def test_finish_warns_when_an_offline_wandb_run_never_gets_its_exit_record(tmp_path, monkeypatch, recorder):
    log_offline_run(tmp_path, monkeypatch, steps=3)
    (run_file,) = find_offline_runs(tmp_path)
    data = run_file.read_bytes()
    run_file.write_bytes(data[: len(data) * 2 // 3])  # as a killed wandb service leaves it: no exit record
    monkeypatch.setattr(agl_lab.training.tracking, "EXIT_RECORD_TIMEOUT_S", 0.3)
    backend = recorder("p", "e", ["wandb"], {})  # a backend that finishes without writing anything
    tracker = Tracker({"wandb": backend}, wandb_run=str(run_file.parent))
    with pytest.warns(TrackerWarning, match=f"the offline W&B run {run_file.parent} has no exit record 0.3 s after"):
        tracker.finish()
    assert backend.finished == 0 and tracker.backends == {}
