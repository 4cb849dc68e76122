"""Fault suite, W&B without a network: an online run whose server does not answer — nothing listening on the port, or
a server that accepts the connection and never replies — logs offline into its run directory, says so and where,
and keeps every step; it never waits W&B's 90 s per run for nothing. Real ``agl-lab train`` processes, real sockets."""

import json
import socket
import threading

import pytest

from agl_lab.curves.wandb_offline import find_offline_runs, read_offline_run
from agl_lab.training.wandb_mode import server_problem
from conftest import TINY_RUN, start_agl_lab

KEY = "0123456789abcdef0123456789abcdef01234567"  # W&B's key format; never sent anywhere here


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again on return: nothing listens there


@pytest.fixture
def silent_server():
    """A server that accepts connections and never answers (a firewall that lets the SYN through, a hung proxy)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []

    def accept_forever():
        try:
            while True:
                accepted.append(server.accept()[0])
        except OSError:  # the fixture closed the server
            pass

    threading.Thread(target=accept_forever, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def start_online(tmp_path, name, url, *, extra_env=None):
    env = {"WANDB_MODE": "online", "WANDB_BASE_URL": url, "WANDB_API_KEY": KEY, **(extra_env or {})}
    run_dir = tmp_path / name
    args = ["train", *TINY_RUN, "trainer.logger=[wandb]", f"lab.run_dir={run_dir}"]
    return run_dir, start_agl_lab(args, cwd=tmp_path, env=env)


def finished_offline(run_dir, proc):
    """The run finished, its W&B run offline in its directory with every step; returns stderr."""
    out, err = proc.communicate(timeout=240)  # bounded: W&B alone would wait 90 s per run before failing
    assert proc.returncode == 0, err[-3000:]
    (run_file,) = find_offline_runs(run_dir / "wandb")  # one run: a failed online attempt is not left to be read
    wandb_run = read_offline_run(run_file)
    assert wandb_run.complete and wandb_run.exit_code == 0
    assert [row["_step"] for row in wandb_run.history] == [1, 2]  # every step, offline
    assert f"W&B run: {run_file.parent}" in out
    assert KEY not in out + err
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    return err


def test_online_without_an_answering_server_logs_offline_and_says_where(tmp_path, silent_server):
    refused_url = f"http://127.0.0.1:{closed_port()}"
    # nothing listening: the probe says so at once. A server that accepts and never replies: the probe connects,
    # W&B starts online and times out (shortened here from its 90 s), and the run retries offline.
    procs = {
        "refused": start_online(tmp_path, "refused", refused_url),
        "silent": start_online(
            tmp_path, "silent", f"http://127.0.0.1:{silent_server}", extra_env={"WANDB_INIT_TIMEOUT": "5"}
        ),
    }  # both at once: each mostly waits
    refused, silent = (finished_offline(*procs[name]) for name in ("refused", "silent"))
    run_dir = procs["refused"][0]
    assert f"agl-lab: warning: the W&B server {refused_url} is not reachable (ConnectionRefusedError" in refused
    assert f"this run logs to W&B offline instead, in {run_dir / 'wandb'} (`wandb sync" in refused
    assert "agl-lab: warning: W&B could not start online (" in silent
    assert f"this run logs to W&B offline instead, in {procs['silent'][0] / 'wandb'}" in silent


def test_the_probe_answers_within_its_timeout(silent_server):
    assert server_problem(f"http://127.0.0.1:{silent_server}") is None  # it accepts: reachable
    assert server_problem(f"http://127.0.0.1:{closed_port()}").startswith("ConnectionRefusedError")
    assert server_problem("not a url") == "'not a url' is not a URL"
