"""What a run borrows from its process, and gives back: torch's thread count, and how stop signals are handled.

Both are process-wide, and a process may hold several runs at once (the training panel trains in a thread while a
notebook cell runs another), so each is shared, not grabbed:

* :func:`torch_threads` — the first run to start sets ``torch.set_num_threads(lab.cpu_threads)``, the last to end
  restores what was there; runs in between share the setting (a run asking for another count is told so).
* :func:`stop_signals` — SIGINT (Ctrl-C) raises ``KeyboardInterrupt``; SIGTERM (what ``timeout``, schedulers and
  ``docker stop`` send) and SIGHUP (a closed terminal or ssh session) raise :class:`Terminated`, a ``KeyboardInterrupt``
  naming its signal; in the main thread, **once**: the run or sweep ends as after Ctrl-C (finished steps kept, the
  policy saved, the trackers closed with their exit records). Every later signal, in any rhythm, is ignored while the
  process stops (with one ``already stopping`` line), so the stopping itself is never interrupted half-way; a process
  that must die now takes SIGKILL. Inside :func:`deferred_signals` (where files are completed: the policy, the last
  records) even the first signal waits until the block ends; where the work can stop cleanly it asks
  :func:`raise_if_stopping`, in case the first signal's exception was swallowed on its way (a finalizer). Blocks
  nest: the outermost one owns the handlers, and the first signal's name stays readable (:func:`stop_requested`,
  :func:`stopped_by`) until it ends. Only the main thread can install a signal handler; elsewhere the caller's handling
  stays as it is. A SIGHUP the process was started to ignore (``nohup``) stays ignored.
* :func:`exit_protected` — once a command has ended, the interpreter's exit hooks (Ray's ``shutdown``) run with the
  stop signals ignored: a late Ctrl-C never prints a traceback from them.
* :func:`huge_pages_advised` — whether torch asks for transparent huge pages for its large CPU tensors in this
  process (``THP_MEM_ALLOC_ENABLE``, which ``import agl_lab`` sets: :mod:`agl_lab`'s docstring); the benchmarks
  print it beside their figures.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from agl_lab.core.keys import CPU_THREADS

__all__ = [
    "Terminated",
    "deferred_signals",
    "exit_protected",
    "huge_pages_advised",
    "raise_if_stopping",
    "reinstall_stop_handlers",
    "signal_exit_code",
    "stop_requested",
    "stop_exception",
    "stop_signals",
    "stopped_by",
    "stopped_line",
    "torch_threads",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: the process was asked to end (``timeout``, a scheduler, ``docker stop``; a closed
    terminal). ``signal_name`` says which."""

    def __init__(self, signal_name: str = "SIGTERM") -> None:
        super().__init__(f"signal {signal_name}")
        self.signal_name = signal_name

    def __reduce__(self):  # pickled by its signal's name (Ray hands exceptions between processes)
        return type(self), (self.signal_name,)


def huge_pages_advised() -> bool:
    """Whether torch advised the kernel to back a fresh 8 MiB CPU tensor with huge pages (``MADV_HUGEPAGE``: the
    ``hg`` flag of the tensor's mapping in ``/proc/self/smaps``), whatever the machine's own huge-page mode then does
    with the advice. Torch decides once per process, at its first tensor of 2 MiB or more; False where
    ``/proc/self/smaps`` does not exist (not Linux)."""
    import torch

    tensor = torch.empty(8 << 20, dtype=torch.uint8)
    address, inside = tensor.data_ptr(), False
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                head = line.split(maxsplit=1)[0]
                if "-" in head and not head.endswith(":"):  # a mapping's first line: "start-end perms ..."
                    low, high = (int(part, 16) for part in head.split("-"))
                    inside = low <= address < high
                elif inside and head == "VmFlags:":
                    return "hg" in line.split()[1:]
    except OSError:
        return False
    return False


_threads_lock = threading.Lock()
_threads_users = 0
_threads_before = 0
_threads_set = 0


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` while any run holds it (``n`` = 0: unchanged); restored after the last one."""
    import torch  # here, not above: every command handles its signals here, and printing help must not load torch

    global _threads_users, _threads_before, _threads_set
    with _threads_lock:
        if _threads_users == 0:
            _threads_before = torch.get_num_threads()
            _threads_set = n if n > 0 else _threads_before
            torch.set_num_threads(_threads_set)
        elif n > 0 and n != _threads_set:
            warnings.warn(
                f"{CPU_THREADS}={n}, but a run already going in this process set torch to {_threads_set} threads "
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


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _StopState:
    """The process's stop signals: who owns the handlers, the first signal, what is deferred."""

    def __init__(self) -> None:
        self.depth = 0  # nested stop_signals blocks; the outermost installed the handlers
        self.previous: dict[int, object] = {}
        self.first: str | None = None  # the first stop signal's name ("SIGINT", "SIGTERM")
        self.raised = False  # the first signal's exception was raised (or is on its way)
        self.deferring = 0  # nested deferred_signals blocks
        self.told = False  # the "already stopping" line was written


_state = _StopState()


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block the first SIGINT or SIGTERM raises ``KeyboardInterrupt`` or :class:`Terminated`; later ones
    are ignored (module docstring). A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outermost = _state.depth == 0
    if outermost:
        _state.__init__()
        _state.previous = {sig: signal.signal(sig, _handler) for sig in _handled()}
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
        if outermost:
            for sig, previous in _state.previous.items():
                signal.signal(sig, previous)
            _state.previous = {}


@contextmanager
def deferred_signals() -> Iterator[None]:
    """A stop signal arriving inside the block is raised when the block ends (if it is the first), never inside it:
    what the block writes is written whole. Outside :func:`stop_signals` (or the main thread) a plain block."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
    if _state.deferring == 0 and _state.depth and _state.first and not _state.raised:
        _state.raised = True
        raise stop_exception(_state.first)


def signal_exit_code(name: str) -> int:
    """The exit status a shell reports for a process ended by signal ``name``: 128 + its number (SIGHUP 129, SIGINT
    130, SIGTERM 143), what ``timeout``, Slurm and ``docker stop`` read."""
    return 128 + signal.Signals[name].value


def stopped_by(exc: KeyboardInterrupt) -> str:
    """The signal that stopped the work: the first one received (a library between the signal and the caller may
    raise a plain ``KeyboardInterrupt`` for any signal: Ray's ``wait`` does), else what ``exc`` says."""
    return stop_requested() or (exc.signal_name if isinstance(exc, Terminated) else "SIGINT")


def stopped_line(name: str) -> str:
    """The line a command stopped by signal ``name`` ends with (after ``agl-lab: ``). Here, with the standard library
    alone: a stop while the stack loads can leave its modules half-imported, and must not need them to say so."""
    return f"stopped by {_SPOKEN.get(name, name)}; finished steps, if any, are kept"


_SPOKEN = {"SIGINT": "Ctrl-C (SIGINT)"}


def stop_exception(name: str) -> KeyboardInterrupt:
    """The exception a stop by signal ``name`` raises: ``KeyboardInterrupt`` for SIGINT, :class:`Terminated` else."""
    return KeyboardInterrupt() if name == "SIGINT" else Terminated(name)


def stop_requested() -> str | None:
    """The name of the first stop signal received inside the current :func:`stop_signals` block, or None."""
    return _state.first if _state.depth else None


def raise_if_stopping() -> None:
    """Raise the first stop signal's exception again where work can stop cleanly (before each training step) if the
    work it should have ended is still going on: on its way up from the handler it met code that swallowed it (Python
    only prints an exception raised in a finalizer the garbage collector runs: ``Exception ignored in ...``). In the
    main thread, inside :func:`stop_signals` and outside :func:`deferred_signals` (a deferred signal is raised when its
    block ends)."""
    if threading.current_thread() is threading.main_thread() and _state.depth and _state.first and not _state.deferring:
        _state.raised = True
        raise stop_exception(_state.first)


def reinstall_stop_handlers() -> None:
    """Take the stop signals back after a library replaced their handlers (``ray.init`` installs its own SIGTERM
    handler, which exits without stopping anything, and Ray's core a native one that dumps a stack)."""
    if _state.depth and threading.current_thread() is threading.main_thread():
        for sig in _state.previous:
            signal.signal(sig, _handler)


def exit_protected() -> None:
    """Ignore stop signals from now until the interpreter has exited (registered as the last exit hook, so it runs
    first). For a command-line process whose command has ended; a no-op outside the main thread."""
    if threading.current_thread() is threading.main_thread():
        atexit.unregister(_ignore_stop_signals)
        atexit.register(_ignore_stop_signals)


def _handler(signum: int, frame) -> None:
    if _state.first is not None:  # already stopping: finishing what is being written matters more
        if not _state.told:
            _state.told = True
            # os.write, not print: a handler may run in the middle of another print to the same stream
            os.write(2, b"agl-lab: already stopping (saving what finished); further signals are ignored\n")
        return
    _state.first = signal.Signals(signum).name
    if _state.deferring:
        return  # raised when the deferred block ends
    _state.raised = True
    raise stop_exception(_state.first)


def _handled() -> list[int]:
    """The stop signals to handle: all but a SIGHUP ignored when the process started (``nohup`` asked for that)."""
    return [sig for sig in _SIGNALS if sig != signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN]


def _ignore_stop_signals() -> None:
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
