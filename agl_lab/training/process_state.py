"""What a run borrows from its process, and gives back: torch's thread count, and how SIGTERM is handled.

Both are process-wide, and a process may hold several runs at once (the training panel trains in a thread while a
notebook cell runs another), so each is shared, not grabbed:

* :func:`torch_threads` — the first run to start sets ``torch.set_num_threads(lab.cpu_threads)``, the last to end
  restores what was there; runs in between share the setting (a run asking for another count is told so).
* :func:`sigterm_as_interrupt` — SIGTERM (what ``timeout``, schedulers and ``docker stop`` send) raises
  :class:`Terminated`, a ``KeyboardInterrupt``, in the main thread, so a run ends as after Ctrl-C: finished steps
  kept, the policy saved, the trackers closed with their exit records. Only the main thread can install a signal
  handler; elsewhere the caller's handling stays as it is.
"""

from __future__ import annotations

import signal
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["Terminated", "sigterm_as_interrupt", "torch_threads"]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: the process was asked to end (``timeout``, a scheduler, ``docker stop``)."""


_threads_lock = threading.Lock()
_threads_users = 0
_threads_before = 0
_threads_set = 0


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` while any run holds it (``n`` = 0: unchanged); restored after the last one."""
    global _threads_users, _threads_before, _threads_set
    with _threads_lock:
        if _threads_users == 0:
            _threads_before = torch.get_num_threads()
            _threads_set = n if n > 0 else _threads_before
            torch.set_num_threads(_threads_set)
        elif n > 0 and n != _threads_set:
            warnings.warn(
                f"lab.cpu_threads={n}, but a run already going in this process set torch to {_threads_set} threads "
                "(a process-wide setting): this run uses that too",
                stacklevel=3,
            )
        _threads_users += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads_users -= 1
            if _threads_users == 0:
                torch.set_num_threads(_threads_before)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (once; a second SIGTERM while it unwinds is ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum, frame):
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
