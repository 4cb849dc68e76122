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
    threading.Thread(target=lambda: accepted.extend(iter(lambda: server.accept()[0], None)), daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def train_online(tmp_path, url, *, extra_env=None):
    run_dir = tmp_path / "run"
    env = {"WANDB_MODE": "online", "WANDB_BASE_URL": url, "WANDB_API_KEY": KEY, **(extra_env or {})}
    proc = start_agl_lab(
        ["train", *TINY_RUN, "trainer.logger=[wandb]", f"lab.run_dir={run_dir}"], cwd=tmp_path, env=env
    )
    out, err = proc.communicate(timeout=240)  # bounded: W&B alone would wait 90 s before failing
    assert proc.returncode == 0, err[-3000:]
    (run_file,) = find_offline_runs(run_dir / "wandb")
    wandb_run = read_offline_run(run_file)
    assert wandb_run.complete and wandb_run.exit_code == 0
    assert [row["_step"] for row in wandb_run.history] == [1, 2]  # every step, offline
    assert f"W&B run: {run_file.parent}" in out
    assert KEY not in out + err
    return run_dir, err


def test_online_with_nothing_listening_logs_offline_and_says_where(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    run_dir, err = train_online(tmp_path, url)
    assert f"agl-lab: warning: the W&B server {url} is not reachable (ConnectionRefusedError" in err
    assert f"this run logs to W&B offline instead, in {run_dir / 'wandb'} (`wandb sync" in err
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"


def test_online_with_a_server_that_never_answers_retries_offline(tmp_path, silent_server):
    # the probe connects, so W&B starts online and times out (shortened here from its 90 s); the run then retries
    # offline instead of going on without W&B
    _, err = train_online(tmp_path, f"http://127.0.0.1:{silent_server}", extra_env={"WANDB_INIT_TIMEOUT": "5"})
    assert "agl-lab: warning: W&B could not start online (" in err and "this run logs to W&B offline instead" in err


def test_the_probe_answers_within_its_timeout(silent_server):
    assert server_problem(f"http://127.0.0.1:{silent_server}") is None  # it accepts: reachable
    assert server_problem(f"http://127.0.0.1:{closed_port()}").startswith("ConnectionRefusedError")
    assert server_problem("not a url") == "'not a url' is not a URL"
