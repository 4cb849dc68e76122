"""One writer per directory: a sweep holds its directory while it runs, so a second sweep is refused, not mixed in.

The lock is an advisory ``flock`` on ``<directory>/.agl_lab.lock``: the operating system releases it when the
holder's process ends, however it ends (Ctrl-C, SIGKILL, a crash), so a lock is never left stale. ``flock``
locks belong to an open file, so two holders in one process (threads) exclude each other too. The file stays
(removing it could let two processes lock two different files of the same name); it holds the holder's pid and
what it is doing, for the message the next one gets.
"""

from __future__ import annotations

import datetime
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOCK_FILE", "DirectoryBusyError", "directory_lock"]

LOCK_FILE = ".agl_lab.lock"


class DirectoryBusyError(RuntimeError):
    """Another run or sweep is writing to this directory (or already did: a run directory holds one run)."""


@contextmanager
def directory_lock(directory: str | Path, *, purpose: str) -> Iterator[Path]:
    """Hold ``directory``'s lock for the block (the directory is created if needed); refuse if someone holds it.

    ``purpose`` (e.g. "sweep") goes into the lock file and into the message another caller gets.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise DirectoryBusyError(
                f"{directory} is in use by {holder}: wait for it to finish (Ctrl-C stops it), or choose another "
                "directory"
            ) from None
        started = datetime.datetime.now().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"a {purpose} (pid {os.getpid()}, started {started})\n".encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
