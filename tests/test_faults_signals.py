"""Fault suite, signals: SIGINT, SIGTERM and SIGHUP sent to real ``agl-lab`` processes — ``train``, ``demo``, ``sweep``
serially and on Ray — once or in bursts, as a keyboard, ``timeout``, Slurm, ``docker stop`` or a closed terminal sends
them, and from the command's first moment; and a pipe whose reader went away.

Whatever the rhythm: the exit status is the first signal's (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP) with one stopped line
on stderr and no traceback (Ray's exit hook included) nor native stack dump; every file is whole (the policy loads
back, each metrics line parses, ``status.json`` and W&B record the stop with that exit status); a sweep prints the
summary of the cells that finished, marks the stopped cell ``interrupted``, and the next run reruns it. Output into a
closed pipe (``agl-lab check | head -1``) ends the command without a word (exit 141).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from agl_lab.curves.wandb_offline import find_offline_runs, read_offline_run
from agl_lab.training.policy import Policy
from agl_lab.training.process_state import deferred_signals, stop_requested, stop_signals
from conftest import TINY_RUN, lines_in, start_agl_lab, wait_until

LONG = "trainer.total_training_steps=400"
STOPPED = {
    129: "agl-lab: stopped by SIGHUP",
    130: "agl-lab: stopped by Ctrl-C (SIGINT)",
    143: "agl-lab: stopped by SIGTERM",
}
# name: (signals in order, seconds between them); the first decides the exit status
RHYTHMS = {
    "ctrl_c_x8_burst": ([signal.SIGINT] * 8, 0.03),
    "sigterm_then_ctrl_c_x3": ([signal.SIGTERM, signal.SIGINT, signal.SIGINT, signal.SIGINT], 0.15),
    "sighup_then_slow_ctrl_c": ([signal.SIGHUP, signal.SIGINT], 1.0),  # a closed terminal: it used to die at once
}


def assert_whole_run(run_dir: Path, code: int) -> int:
    """Every file of a stopped run is whole and says it stopped with ``code``; returns its finished steps."""
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))  # every line whole, none lost
    assert json.loads((run_dir / "status.json").read_text()) == {
        "status": "stopped",
        "steps": len(steps),
        "exit_code": code,
    }
    AutoModelForCausalLM.from_pretrained(run_dir / "policy")  # loads back as lab.model_path would
    AutoTokenizer.from_pretrained(run_dir / "policy")
    assert not list(run_dir.glob(".*.partial")), list(run_dir.iterdir())  # no temporary file left behind
    return len(steps)


def assert_one_clean_stop(err: str, code: int) -> None:
    assert err.count(STOPPED[code]) == 1, err[-3000:]
    for trace in ("Traceback", "Exception ignored", "SIGTERM received", "***"):
        assert trace not in err, err[-3000:]


def test_signals_in_any_rhythm_during_train_leave_every_file_whole(tmp_path):
    procs = {
        name: start_agl_lab(
            ["train", *TINY_RUN, LONG, f"lab.run_dir={tmp_path / name}"], cwd=tmp_path, env={"WANDB_MODE": "offline"}
        )
        for name in RHYTHMS
    }  # all at once: the runs take their imports' time in parallel
    for name, proc in procs.items():
        wait_until(lambda name=name: lines_in(tmp_path / name / "metrics.jsonl") >= 2, proc, what=f"{name}'s step 2")
    for name, (signals, gap) in RHYTHMS.items():
        for sig in signals:
            procs[name].send_signal(sig)
            time.sleep(gap)
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        code = 128 + RHYTHMS[name][0][0]
        assert proc.returncode == code, (name, err[-3000:])
        assert_one_clean_stop(err, code)
        assert out.strip().splitlines()[-1] == str(tmp_path / name)
        steps = assert_whole_run(tmp_path / name, code)
        (run_file,) = find_offline_runs(tmp_path / name / "wandb")
        wandb_run = read_offline_run(run_file)
        assert wandb_run.complete and wandb_run.exit_code == code  # W&B records the stop, not a finished run
        assert len(wandb_run.history) == steps


def test_sigterm_stops_a_serial_sweep_and_the_demo_keeping_finished_cells(tmp_path):
    sweep = tmp_path / "sweep"
    procs = {
        "sweep": start_agl_lab(
            ["sweep", *TINY_RUN, "trainer.total_training_steps=2,400", "--seeds", "0", "--executor", "serial"]
            + ["--out", sweep],
            cwd=tmp_path,
        ),
        "demo": start_agl_lab(["demo", "--out", tmp_path / "demo", *TINY_RUN, LONG], cwd=tmp_path),
    }
    long_cell = sweep / "total_training_steps-400" / "seed-0"
    wait_until(lambda: lines_in(long_cell / "metrics.jsonl") >= 1, procs["sweep"], what="the long cell's step 1")
    demo_cell = tmp_path / "demo" / "both_on" / "seed-0"
    wait_until(lambda: lines_in(demo_cell / "metrics.jsonl") >= 1, procs["demo"], what="the demo's step 1")
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    results = {name: (proc.communicate(timeout=300), proc.returncode) for name, proc in procs.items()}
    for name, ((_, err), code) in results.items():
        assert code == 143, (name, err[-3000:])  # not 130: the stop says it was SIGTERM
        assert_one_clean_stop(err, 143)
    # the sweep: the finished cell summarized and listed as what the summary covers; the stopped one rerun next time
    out = results["sweep"][0][0]
    assert "total_training_steps-2 " in out and "Written:" in out and out.strip().splitlines()[-1] == str(sweep)
    assert (sweep / "cells.csv").read_text().splitlines()[1].startswith("total_training_steps-2,0,done,")
    assert json.loads((long_cell / "cell.json").read_text())["status"] == "interrupted"  # it said running before
    assert json.loads((demo_cell / "cell.json").read_text())["status"] == "interrupted"
    assert_whole_run(long_cell, 143)
    assert_whole_run(demo_cell, 143)


@pytest.mark.ray
def test_sigterm_stops_a_sweep_on_ray_without_native_dumps_or_stray_workers(tmp_path):
    sweep = tmp_path / "sweep"
    proc = start_agl_lab(
        ["sweep", *TINY_RUN, "trainer.total_training_steps=2,400", "--seeds", "0", "--out", sweep], cwd=tmp_path
    )
    short_cell, long_cell = (sweep / f"total_training_steps-{n}" / "seed-0" for n in (2, 400))
    wait_until(
        lambda: (
            json.loads((short_cell / "cell.json").read_text())["status"] == "done"
            and lines_in(long_cell / "metrics.jsonl") >= 1
        ),
        proc,
        what="one cell done and the other training, on Ray",
    )
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    assert_one_clean_stop(err, 143)
    assert "total_training_steps-2 " in out and out.strip().splitlines()[-1] == str(sweep)
    # the cancelled cell stopped like Ctrl-C inside its worker: its steps, policy and status whole
    assert json.loads((long_cell / "cell.json").read_text())["status"] == "interrupted"
    assert_whole_run(long_cell, 130)
    deadline = time.monotonic() + 30  # the Ray instance the sweep started went with it
    while ray_processes_in(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray_processes_in(tmp_path) == []


def ray_processes_in(cwd: Path) -> list[str]:
    """Ray's processes started from ``cwd`` (raylet, GCS, workers, agents) still alive."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(cwd) and "ray" in Path(f"/proc/{pid}/cmdline").read_text():
                found.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:80])
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def test_a_signal_while_the_policy_is_saved_waits_until_it_is_whole(tmp_path):
    policy = tiny_policy()
    with pytest.raises(KeyboardInterrupt), stop_signals():
        with deferred_signals():
            os.kill(os.getpid(), signal.SIGINT)  # arrives as the save starts: it must not cut it
            time.sleep(0.05)
            assert stop_requested() == "SIGINT"
            policy.save(tmp_path / "policy")
    AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy"]


def test_a_save_that_fails_half_way_leaves_no_policy_folder_and_no_temporary_one(tmp_path):
    policy = tiny_policy()
    policy.tokenizer = object()  # the model's files are written, then the tokenizer cannot be: the save fails there
    with pytest.raises(AttributeError):
        policy.save(tmp_path / "policy")
    assert list(tmp_path.iterdir()) == []  # never a policy/ with config.json and the weights alone


def tiny_policy() -> Policy:
    from agl_lab import short_run_config
    from agl_lab.training.policy import build_policy

    return build_policy(short_run_config(dotlist=TINY_RUN), words=["a", "b"])


def test_a_second_signal_while_stopping_is_ignored_by_a_real_process(tmp_path):
    # a process that takes 1 s to stop: a burst meanwhile must not cut it (exit status stays the first signal's)
    script = """
import sys, time
from agl_lab.training.process_state import deferred_signals, stop_signals
try:
    with stop_signals():
        try:
            print("ready", flush=True)  # the handlers are in place and the finally below is armed
            time.sleep(60)
        finally:
            with deferred_signals():
                time.sleep(1.0)
                print("saved", flush=True)
except KeyboardInterrupt as exc:
    sys.exit(143 if type(exc).__name__ == "Terminated" else 130)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    for sig in [signal.SIGTERM] + [signal.SIGINT] * 10:
        proc.send_signal(sig)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out.strip()) == (143, "saved"), err
    assert err.count("already stopping") == 1


def handles_sighup(pid: int) -> bool:
    """Whether process ``pid`` has installed a SIGHUP handler: ``agl-lab``'s first act (Python leaves SIGHUP alone)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught >> (signal.SIGHUP - 1) & 1)


def test_ctrl_c_while_it_starts_is_one_line_and_a_closed_pipe_ends_it_without_a_word(tmp_path):
    starting = start_agl_lab(["train", *TINY_RUN, f"lab.run_dir={tmp_path / 'run'}"], cwd=tmp_path)
    piped = start_agl_lab(["check", "--show-config"], cwd=tmp_path)  # its first lines fill a pipe's buffer
    piped.stdout.close()  # the reader is gone before the first line, as `| head -1` is after it
    wait_until(lambda: handles_sighup(starting.pid), starting, what="agl-lab's signal handlers")
    starting.send_signal(signal.SIGINT)  # torch, verl and the config are still loading
    _, err = starting.communicate(timeout=120)
    assert (starting.returncode, err) == (130, STOPPED[130] + "; finished steps, if any, are kept\n")  # a traceback
    assert not (tmp_path / "run").exists()
    err = piped.stderr.read()
    assert (piped.wait(timeout=300), err) == (141, "")  # exit 5 with "file error: [Errno 32] Broken pipe" before
