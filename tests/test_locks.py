"""Directory locks: one sweep per directory, refused clearly while another holds it, free once its process ends."""

import os
import re
import signal
import subprocess
import sys

import pytest

from agl_lab.training import locks
from agl_lab.training.locks import LOCK_FILE, DirectoryBusyError, directory_lock


def test_a_held_directory_is_refused_naming_the_holder_and_free_after(tmp_path):
    with directory_lock(tmp_path / "sweep", purpose="sweep"):
        message = f"{tmp_path / 'sweep'} is in use by a sweep (pid {os.getpid()}, started "
        with pytest.raises(DirectoryBusyError, match=re.escape(message)):
            with directory_lock(tmp_path / "sweep", purpose="sweep"):
                pass
    with directory_lock(tmp_path / "sweep", purpose="sweep"):  # released: the next one gets it
        pass
    assert (tmp_path / "sweep" / LOCK_FILE).read_text() == ""


def test_a_lock_dies_with_its_process_however_it_ends(tmp_path):
    # the holder loads only locks.py (no agl_lab import): it holds the lock, says so, and is killed with SIGKILL
    script = f"""
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("locks", {locks.__file__!r})
locks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(locks)
with locks.directory_lock({str(tmp_path / "sweep")!r}, purpose="sweep"):
    print("held", flush=True)
    time.sleep(600)
"""
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryBusyError, match=f"pid {holder.pid}"):
            with directory_lock(tmp_path / "sweep", purpose="sweep"):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    with directory_lock(tmp_path / "sweep", purpose="sweep"):  # no stale lock after a kill
        pass
