"""Short garbage-collection pauses in a notebook kernel that has loaded torch, verl and the lab: :func:`freeze_loaded`.

Such a kernel tracks about 680,000 objects, and Python's full collection scans them all: 280–350 ms. Each edit of the
config form composes a config (about 20,000 objects), so a full collection came about once every 25 edits, and
that edit's answer was held up by the whole pause (``benchmarks/bench_browser.py``: one change in 30 took 305 ms
before the kernel even read it). ``gc.freeze()`` moves every object that exists at that moment (the imports, mostly)
into a generation the collector never scans. Full collections then scan only what came after: 15–33 ms, about once
every 10 edits. The price is that a reference cycle among the frozen objects that later becomes garbage is never
freed. So it is done once per process, before the first panel is built, when what exists is what stays loaded.
"""

from __future__ import annotations

import functools
import gc

__all__ = ["freeze_loaded"]


@functools.cache
def freeze_loaded() -> None:
    """Freeze what is loaded now (once per process; later calls do nothing). Every panel calls it when built."""
    gc.freeze()
