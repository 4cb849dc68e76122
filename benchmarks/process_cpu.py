"""CPU time by process role, from Linux's per-thread run time: where the CPU of a notebook change goes.

``bench_browser.py --cpu`` reads :func:`cpu_by_process` before and after each change and prints the difference: the
milliseconds of CPU each process spent on the change (its action, the redraw and the quiet after it), summed over
every thread of the process: the page's renderer (JavaScript, style, layout, paint, layerizing, on its main thread
and helpers), the browser process, its GPU process (compositing; without a GPU, in software), its network and other
utility processes, the Jupyter server's relay and the kernel. Each thread's run time comes from
``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds; the scheduler's own account, not sampled). Processes are found by
their command line at each read, so a page opened between two reads counts from zero. Linux only.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ROLES", "available", "cpu_by_process", "role_of", "spent_by_role"]

ROLES = ("renderer", "kernel", "gpu", "browser", "server", "utility")


def role_of(cmdline: str) -> str | None:
    """A process's role from its command line as ``/proc`` gives it (NUL-separated, or one string with spaces where
    the process rewrote its title, as Chromium's children do), or None for anything else."""
    args = cmdline.replace("\0", " ").split()
    if "ipykernel_launcher" in cmdline:
        return "kernel"
    if "-m" in args and "jupyterlab" in args:
        return "server"
    if not args or not args[0].endswith(("chromium", "chrome")):
        return None
    kind = next((a.removeprefix("--type=") for a in args if a.startswith("--type=")), None)
    if kind is None:
        return "browser"
    return {"renderer": "renderer", "gpu-process": "gpu", "utility": "utility"}.get(kind)  # zygotes: forks only


def cpu_by_process(proc: Path = Path("/proc")) -> dict[int, tuple[str, float]]:
    """Each process with a role: pid -> (role, milliseconds of CPU its threads have run so far)."""
    found = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            role = role_of((entry / "cmdline").read_bytes().decode(errors="replace"))
            if role is None:
                continue
            tasks = (entry / "task").iterdir()
            found[int(entry.name)] = (role, sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e6)
        except (FileNotFoundError, ProcessLookupError, PermissionError):  # it ended while being read
            continue
    return found


def spent_by_role(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """Milliseconds of CPU each role spent between two :func:`cpu_by_process` reads: a process that started in
    between counts from zero, one that ended in between is left out (its last run time is gone)."""
    spent = dict.fromkeys(ROLES, 0.0)
    for pid, (role, ms) in after.items():
        spent[role] += ms - before.get(pid, (role, 0.0))[1]
    return spent


def available() -> bool:
    """Whether this system keeps per-thread run times (Linux with schedstat)."""
    return Path(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat").exists()
