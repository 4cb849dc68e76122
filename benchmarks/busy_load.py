"""Busy processes beside a measurement: how a laptop runs a notebook next to a training run.

``with busy_processes(2):`` keeps two Python processes spinning on the CPU for the whole block and stops them when it
ends, whatever happens; each also ends itself after ``max_s`` seconds (a benchmark killed hard leaves no spinner
behind for long). :func:`load_now` is the 1-minute load average, to print beside each figure: a spinner raises it by
about one after a minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "import time\nend = time.monotonic() + {max_s}\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def busy_processes(n: int, *, max_s: float = 3600.0) -> Iterator[list[subprocess.Popen]]:
    """``n`` processes each keeping one core busy until the block ends (or ``max_s`` passes)."""
    if n < 0:
        raise ValueError(f"--load must be 0 or more busy processes, got {n}")
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN.format(max_s=max_s)]) for _ in range(n)]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def load_now() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]
