"""Every failure of ``agl-lab`` reaches the user as one line on stderr and a documented exit code; bad configs are
refused before anything is created. In-process through ``agl_lab.cli.main`` (the console script's function)."""

import errno
import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import agl_lab.training.train_step
from agl_lab.cli import main
from agl_lab.exit_codes import EXIT_CODES, report_errors
from conftest import TINY_RUN, torn_model

TINY = (*TINY_RUN, "trainer.logger=[]")


def cli(capsys, *argv):
    """Exit code, stdout, and stderr's lines without the progress bar's."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A fresh working directory: whatever a refused command created would show up in it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        (["check", "~algorithm"], 2, "agl-lab: config error: algorithm: cannot delete it"),
        (["check", "lab.seed=0,1,2"], 2, "agl-lab: config error: lab.seed=0,1,2: several values (a sweep)"),
        (["train", "trainer.total_training_steps=abc"], 2, "total_training_steps must be an integer, got 'abc'"),
        (["check", "actor_rollout_ref.rollout.top_p=0"], 1, "top_p: must be in (0, 1], got 0.0"),
        (["check", "lab.seed=-1"], 1, "lab.seed: must be in [0, 4294967295], got -1"),
        (["check", "actor_rollout_ref.actor.optim.lr=nan"], 1, "optim.lr: must be a finite number, got nan"),
        (["check", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=0"], 1, "must be null or a positive integer"),
        (["train", *TINY, "actor_rollout_ref.actor.ppo_epochs=0"], 1, "ppo_epochs: must be a positive integer, got 0"),
        (
            ["train", *TINY, "algorithm.enable_rollout_level_advantage=false", "algorithm.adv_estimator=gae"],
            2,
            "algorithm.adv_estimator=gae needs a critic's values",
        ),
        (
            [
                "train",
                *TINY,
                "algorithm.enable_rollout_level_advantage=false",
                "algorithm.adv_estimator=optimal_token_baseline",
                "actor_rollout_ref.actor.calculate_sum_pi_squared=true",
            ],
            2,
            "optimal_token_baseline needs sum_pi_squared",
        ),
        (["train", *TINY, "lab.model_path=/no/such/model"], 5, "agl-lab: file error: lab.model_path='/no/such/model'"),
        (["launch", "algorithm.adv_estimator=grpo", "--name", "a/b"], 2, "agl-lab: error: name 'a/b' must be"),
    ],
)
def test_refused_in_one_line_with_a_documented_code_before_anything_is_created(capsys, here, argv, code, line):
    extra = [f"lab.run_dir={here / 'run'}"] if argv[0] == "train" else []
    result, _, err = cli(capsys, *argv, *extra)
    errors = [e for e in err if "error" in e]
    assert result == code and code in EXIT_CODES
    assert len(errors) == 1 and line in errors[0], err
    if argv[0] == "train":
        assert list(here.iterdir()) == []


def test_debug_adds_the_traceback_above_the_line(capsys, here):
    code, _, err = cli(capsys, "--debug", "check", "~algorithm")
    assert code == 2 and err[0] == "Traceback (most recent call last):"
    assert err[-1].startswith("agl-lab: config error: algorithm: cannot delete it")
    code, _, err = cli(capsys, "check", "~algorithm")
    assert code == 2 and len(err) == 1  # without --debug: the line alone


def test_an_existing_run_directory_is_refused_and_left_as_it_was(capsys, here):
    run_dir = here / "run"
    assert cli(capsys, "train", *TINY, f"lab.run_dir={run_dir}")[0] == 0
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    code, _, err = cli(capsys, "train", *TINY, f"lab.run_dir={run_dir}")
    assert code == 4 and err == [
        f"agl-lab: directory taken: lab.run_dir='{run_dir}' already holds a run (or another run is writing to it): "
        "choose another directory, delete it, or leave lab.run_dir null for a fresh one"
    ]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_run_directory_that_cannot_be_made_is_a_file_error(capsys, here):
    (here / "a_file").write_text("not a folder")
    code, _, err = cli(capsys, "train", *TINY, f"lab.run_dir={here / 'a_file' / 'run'}")
    assert code == 5 and len(err) == 1 and err[0].startswith("agl-lab: file error: [Errno 20] Not a directory")


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_full_or_read_only_disk_is_one_line_and_keeps_the_finished_steps(capsys, here, monkeypatch, fault):
    from agl_lab.training.runs import RunFiles

    write = RunFiles.write

    def failing_write(self, step, metrics, timings, transcript=None):
        if step == 2 and fault == "full":  # the kernel's full device: every write to it fails with ENOSPC
            self._metrics = open("/dev/full", "w")  # noqa: SIM115 — the run closes it
        elif step == 2:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.run_dir / "metrics.jsonl"))
        write(self, step, metrics, timings, transcript)

    monkeypatch.setattr(RunFiles, "write", failing_write)
    code, _, err = cli(capsys, "train", *TINY, f"lab.run_dir={here / 'run'}")
    expected = "No space left on device: '/dev/full'" if fault == "full" else "Read-only file system: "
    errors = [line for line in err if not line.startswith("agl-lab: warning: ")]  # a full disk fails the close too
    assert (
        code == 5 and len(errors) == 1 and errors[0].startswith("agl-lab: file error: [Errno") and expected in errors[0]
    )
    assert all(line.startswith("agl-lab: ") for line in err)  # each warning one line too
    assert len((here / "run" / "metrics.jsonl").read_text().splitlines()) == 1  # step 1 kept
    assert (here / "run" / "policy" / "model.safetensors").exists()


def test_a_run_whose_every_step_was_skipped_exits_6(capsys, here):
    # transition-level rows whose prompts exceed data.max_prompt_length are all dropped as marked
    argv = ["train", *TINY, "agentlightning.trace_aggregator.level=transition", "data.max_prompt_length=2"]
    code, out, err = cli(capsys, *argv, f"lab.run_dir={here / 'run'}")
    assert code == 6 and out.strip().splitlines()[-1] == str(here / "run")
    assert [e for e in err if "error" in e or "trained nothing" in e] == [err[-1]]
    assert err[-1].startswith("agl-lab: trained nothing: every one of the 2 steps was skipped")
    assert len((here / "run" / "metrics.jsonl").read_text().splitlines()) == 2  # its files are kept


def test_an_unexpected_error_is_one_line_pointing_at_debug(capsys, here, monkeypatch):
    def broken(self, step, **kwargs):
        raise RuntimeError("something deep\nwent wrong")

    monkeypatch.setattr(agl_lab.training.train_step.RunState, "step", broken)
    code, _, err = cli(capsys, "train", *TINY, f"lab.run_dir={here / 'run'}")
    assert code == 70 and err[-1] == (
        "agl-lab: unexpected error: RuntimeError: something deep went wrong (rerun with --debug for the traceback)"
    )


def test_a_valid_agent_lightning_config_the_example_cannot_run_is_explained(capsys):
    code, out, err = cli(
        capsys, "check", "algorithm.enable_rollout_level_advantage=false", "algorithm.adv_estimator=gae"
    )
    assert code == 0 and err == []
    assert "Example batch skipped: algorithm.adv_estimator=gae needs a critic's values" in out


def test_each_kind_of_failure_has_its_code():
    from agl_lab.config.compose import ConfigError
    from agl_lab.config.doctor import DoctorError
    from agl_lab.exit_codes import TrainedNothingError, exit_code
    from agl_lab.files.batch_io import BatchFileError
    from agl_lab.training.locks import DirectoryBusyError
    from agl_lab.training.process_state import Terminated
    from agl_lab.training.tracking import ConcurrentRunError

    assert exit_code(Terminated()) == 143 and exit_code(KeyboardInterrupt()) == 130
    assert exit_code(ConcurrentRunError("x")) == 4 and exit_code(DirectoryBusyError("x")) == 4
    assert exit_code(BatchFileError("x")) == 5 and exit_code(PermissionError("x")) == 5
    assert exit_code(ValueError("x")) == 2 and exit_code(RuntimeError("x")) == 70
    assert exit_code(DoctorError("x")) == 1 and exit_code(ConfigError("x")) == 2  # a DoctorError is a ConfigError
    assert exit_code(FileExistsError("x")) == 4 and exit_code(TrainedNothingError("x")) == 6


def test_the_table_names_real_classes_each_before_its_base_classes():
    # a (module, name) row with a typo would never match: each must name an exception class of that module; and a
    # class after one of its base classes would never be reached
    from agl_lab.exit_codes import EXCEPTION_CODES

    rows = [
        (code, [getattr(importlib.import_module(c[0]), c[1]) if isinstance(c, tuple) else c for c in classes])
        for code, classes in EXCEPTION_CODES
    ]
    assert all(isinstance(c, type) and issubclass(c, BaseException) for _, classes in rows for c in classes)
    assert {code for code, _ in rows} == {1, 2, 3, 4, 5, 6}
    for i, (_, earlier) in enumerate(rows):
        for code, later in rows[i + 1 :]:
            shadowed = [(b.__name__, c.__name__) for b in earlier for c in later if issubclass(c, b)]
            assert shadowed == [], (code, shadowed)


def test_classifying_an_error_loads_neither_torch_nor_verl():
    # an OSError or a bad value in a command that never loaded the stack is reported at once
    probe = (
        "import sys; from agl_lab.exit_codes import exit_code; "
        "print(exit_code(OSError('x')), exit_code(ValueError('x')), exit_code(RuntimeError('x')), "
        "sorted(m for m in ('torch', 'verl') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["5", "2", "70", "[]"], result.stderr


def test_help_lists_every_exit_code(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code, meaning in EXIT_CODES.items():
        assert f"  {code:>3}  {meaning}" in out
    assert "143  stopped by SIGTERM" in out and "--debug" in out


def test_the_docs_list_the_same_exit_codes():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()  # the command line's page
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", page, flags=re.MULTILINE))
    assert {int(code): meaning for code, meaning in rows.items()} == EXIT_CODES


def test_a_demo_whose_runs_failed_exits_1_naming_each(capsys, here):
    torn_model(here / "not-a-model")  # every check passes; loading its torn weights fails in each run
    code, _, err = cli(capsys, "demo", "--out", str(here / "demo"), *TINY, f"lab.model_path={here / 'not-a-model'}")
    assert code == 1
    assert [line.split(":")[1].strip() for line in err if line.startswith("agl-lab:")] == [
        "both_on seed 0 failed",
        "both_off seed 0 failed",
        "both_on_cap2 seed 0 failed",
    ]


def test_a_warning_repeated_in_a_loop_prints_once_with_its_secret_masked(capsys):
    result: list[int] = []
    with report_errors(debug=False, secrets=["sk-secret-1"], result=result):
        for _ in range(3):
            with warnings.catch_warnings():  # what resets Python's once-per-place memory of warnings
                warnings.simplefilter("ignore", RuntimeWarning)
                warnings.warn("too few runs for sk-secret-1", UserWarning, stacklevel=1)
        warnings.warn("another", UserWarning, stacklevel=1)
    err = capsys.readouterr().err.splitlines()
    assert err == ["agl-lab: warning: too few runs for ***", "agl-lab: warning: another"] and result == []


def test_a_missing_package_is_exit_3_naming_it_and_the_lab_extra_to_install(capsys):
    import importlib

    result: list[int] = []
    with report_errors(debug=False, secrets=[], result=result):
        importlib.import_module("plotly.no_such_module")  # a real ModuleNotFoundError, as a missing extra raises it
    err = capsys.readouterr().err.strip().splitlines()
    assert result == [3] and len(err) == 1
    assert err[0].startswith("agl-lab: missing package: No module named 'plotly.no_such_module'")
    assert err[0].endswith("install the lab's extra: pip install 'agl_lab[lab]'")


def test_the_lab_extras_modules_are_the_lab_extras_packages():
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement

    from agl_lab.exit_codes import LAB_EXTRA_MODULES

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    packages = {Requirement(r).name.lower() for r in project["optional-dependencies"]["lab"]}
    owners = {m: {d.lower() for d in ds} for m, ds in importlib.metadata.packages_distributions().items()}
    # each module listed is one of the extra's packages', and each package has its module listed
    assert all(owners.get(module, set()) & packages for module in LAB_EXTRA_MODULES)
    assert all(any(package in owners.get(module, set()) for module in LAB_EXTRA_MODULES) for package in packages)
