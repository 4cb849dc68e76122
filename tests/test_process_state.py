"""What a run shares with its process: SIGTERM ends it like Ctrl-C (real signals sent to real ``agl-lab train``
processes), runs in threads give what they give alone, and torch's thread count is shared and given back."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from agl_lab import short_run_config, train
from agl_lab.curves.wandb_offline import find_offline_runs, read_offline_run
from agl_lab.training.process_state import Terminated, stop_requested, stop_signals, torch_threads
from conftest import TINY_RUN

AGL_LAB = str(Path(sys.executable).parent / "agl-lab")


def wait_for_lines(path, n, proc, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {n} lines")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_a_run_like_ctrl_c_keeping_every_step_the_policy_and_the_wandb_exit_record(tmp_path, sig, code):
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [AGL_LAB, "train", *TINY_RUN, "trainer.total_training_steps=500", f"lab.run_dir={run_dir}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_for_lines(run_dir / "metrics.jsonl", 2, proc)
    proc.send_signal(sig)  # what `timeout`, a scheduler or `docker stop` sends (SIGTERM), or Ctrl-C (SIGINT)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == code, err[-3000:]
    assert out.strip().splitlines()[-1] == str(run_dir)
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and 2 <= len(steps) < 500  # every line whole, none lost
    assert (run_dir / "policy" / "model.safetensors").exists()
    (run_file,) = find_offline_runs(run_dir / "wandb")
    wandb_run = read_offline_run(run_file)
    assert wandb_run.complete and wandb_run.exit_code == code  # the exit record, with the signal's exit status
    assert [row["_step"] for row in wandb_run.history] == steps  # every finished step readable


def test_ctrl_c_while_the_tracker_starts_is_one_line_and_leaves_no_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    script = f"""
import functools, os, signal, sys, time
import agl_lab.training.trainer as trainer
from agl_lab.training.tracking import Tracking, open_tracker
from agl_lab.cli import main

def starting(*args, **kwargs):  # a tracker that takes its time to start, as W&B does; Ctrl-C arrives meanwhile
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
    return Tracking(*args, **kwargs)

trainer.open_tracker = functools.partial(open_tracker, tracking_cls=starting)
sys.exit(main(["train", *{list(TINY_RUN)!r}, "trainer.logger=[console]", "lab.run_dir={run_dir}"]))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert result.returncode == 130, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        "agl-lab: stopped by Ctrl-C (SIGINT); finished steps, if any, are kept"
    ]
    assert not run_dir.exists()  # no half-made run directory (config.yaml, empty metrics.jsonl)


def tiny(tmp_path, name, seed, steps=3):
    return short_run_config(
        dotlist=[*TINY_RUN, "trainer.logger=[]", f"trainer.total_training_steps={steps}", f"lab.seed={seed}"]
        + [f"lab.run_dir={tmp_path / name}", "lab.cpu_threads=1"]
    )


class _SignalsInItsFinalizer:
    """An object whose finalizer is where a Ctrl-C lands: Python prints that KeyboardInterrupt (``Exception ignored
    in``) and goes on, as for any exception a finalizer the garbage collector runs raises."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # bytecodes: the handler runs at one of them, inside this finalizer
            pass


def test_a_ctrl_c_swallowed_by_a_finalizer_still_ends_the_run_before_the_next_step(tmp_path, monkeypatch):
    swallowed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: swallowed.append(unraisable.exc_type))

    def on_step(record):
        if record["step"] == 2:
            _SignalsInItsFinalizer()  # made and finalized at once: the KeyboardInterrupt never reaches the loop

    before = signal.getsignal(signal.SIGINT)  # Python's default; an xdist worker's may be SIG_IGN
    result = train(tiny(tmp_path, "swallowed", 0, steps=6), progress=False, on_step=on_step)
    assert swallowed == [KeyboardInterrupt]  # the handler's exception was swallowed, as in the failure it covers
    assert result.stopped and result.interrupted_by == "SIGINT" and result.exit_code == 130
    assert result.history["step"].tolist() == [1, 2]  # no step after the signal
    assert signal.getsignal(signal.SIGINT) is before  # the handler given back


def test_two_runs_in_threads_give_what_each_gives_alone(tmp_path):
    solo = {seed: train(tiny(tmp_path, f"solo{seed}", seed), progress=False) for seed in (3, 4)}
    results, errors = {}, []

    def run(seed):
        try:
            results[seed] = train(tiny(tmp_path, f"thread{seed}", seed), progress=False)
        except Exception as exc:  # noqa: BLE001 — reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in (3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for seed in (3, 4):
        # the same weights, samples and updates from step 1 on: each run owns its generators
        assert (results[seed].run_dir / "metrics.jsonl").read_text() == (
            solo[seed].run_dir / "metrics.jsonl"
        ).read_text()


def test_a_second_wandb_run_in_one_process_is_refused_while_the_first_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("HOME", str(tmp_path))
    second: list[BaseException] = []

    def start_another(record):  # the training panel's thread starting a run while a notebook cell's run goes on
        if record["step"] == 1:
            cfg = short_run_config(dotlist=[*TINY_RUN, f"lab.run_dir={tmp_path / 'second'}"])
            try:
                train(cfg, progress=False)
            except Exception as exc:  # noqa: BLE001 — inspected below
                second.append(exc)

    first = train(short_run_config(dotlist=[*TINY_RUN, f"lab.run_dir={tmp_path / 'first'}"]), on_step=start_another)
    (refusal,) = second
    assert type(refusal).__name__ == "ConcurrentRunError"
    assert "trainer.logger has wandb, but another run of this process" in str(refusal)
    assert "trainer.logger=[file]" in str(refusal)
    assert not (tmp_path / "second").exists()  # refused before anything was created
    (run_file,) = find_offline_runs(first.run_dir / "wandb")
    assert [row["_step"] for row in read_offline_run(run_file).history] == [1, 2]  # the first run is whole
    # and once the first has ended, the next W&B run of the process starts
    assert train(short_run_config(dotlist=[*TINY_RUN, f"lab.run_dir={tmp_path / 'third'}"]), progress=False).wandb_run


def test_torch_threads_are_set_by_the_first_run_and_given_back_by_the_last():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            with pytest.warns(UserWarning, match="set torch to 1 threads"), torch_threads(3):
                assert torch.get_num_threads() == 1  # shared: a process has one setting
            assert torch.get_num_threads() == 1  # the inner run's end gives nothing back yet
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_sigterm_raises_terminated_in_the_block_only_and_later_signals_are_ignored():
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(Terminated), stop_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:  # stopping: every later signal, of either kind, is counted and ignored
            assert stop_requested() == "SIGTERM"
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
                os.kill(os.getpid(), sig)
                time.sleep(0.05)
    assert {sig: signal.getsignal(sig) for sig in previous} == previous
    assert issubclass(Terminated, KeyboardInterrupt)  # every `except KeyboardInterrupt` handles it like Ctrl-C


@pytest.mark.parametrize(
    ("given", "first", "spin"),
    [
        (None, "import agl_lab, torch", "0"),  # the lab's default reaches torch's OpenMP: waiting threads sleep at once
        ("ACTIVE", "import agl_lab, torch", "30000000000"),  # a user's own policy is kept
        (None, "import torch, agl_lab", "300000"),  # torch loaded first: OpenMP had read its environment already
    ],
)
def test_importing_agl_lab_first_makes_torchs_openmp_threads_sleep_instead_of_spin(given, first, spin):
    # libgomp prints the values it runs with (OMP_DISPLAY_ENV); GOMP_SPINCOUNT is the wait the policy chose
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env |= {"OMP_DISPLAY_ENV": "verbose"} | ({"OMP_WAIT_POLICY": given} if given else {})
    probe = f"{first}; import os; print(os.environ['OMP_WAIT_POLICY'])"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"GOMP_SPINCOUNT = '{spin}'" in result.stderr
    assert result.stdout.split() == [given or "PASSIVE"]


@pytest.mark.parametrize(
    ("given", "first", "advised"),
    [
        (None, "import agl_lab, torch", True),  # the lab's default reaches torch's allocator
        ("0", "import agl_lab, torch", False),  # a user's own choice is kept
        (None, "import torch; torch.empty(4 << 20); import agl_lab", False),  # torch read it at its first big tensor
        (None, "import torch, agl_lab", True),  # torch loaded, but no big tensor yet: it has not read it
        (None, "import tensordict, agl_lab", False),  # tensordict (verl's DataProto) makes one as it loads
    ],
)
def test_importing_agl_lab_first_backs_large_tensors_with_huge_pages(given, first, advised):
    # the probe reads the VmFlags of a fresh 8 MiB tensor's mapping: "hg" where torch advised huge pages
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | (
        {"THP_MEM_ALLOC_ENABLE": given} if given else {}
    )
    probe = "from agl_lab.training.process_state import huge_pages_advised; import os"
    probe += "; print(os.environ['THP_MEM_ALLOC_ENABLE'], huge_pages_advised())"
    result = subprocess.run(
        [sys.executable, "-c", f"{first}\n{probe}"], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [given or "1", str(advised)]


def test_importing_ray_builds_no_iri_parser():
    # Every Ray worker, notebook kernel and CLI run that loads verl imports Ray, and Ray imports jsonschema. From 4.25
    # jsonschema's format checkers import rfc3987-syntax, which builds its Earley parsers at import: 2-2.5 CPU-s a
    # process, 4x the rest of `import ray` (pyproject.toml holds jsonschema below it).
    probe = "import sys, ray, jsonschema; print(jsonschema.__version__, 'rfc3987_syntax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "False", f"jsonschema {out[0]} imported rfc3987_syntax beside Ray"
