"""Ray for the lab's sweeps, started once and early, with only what the sweeps need.

A sweep cell on a Ray it starts itself waits for Ray's processes and then for each worker to import torch, verl and
the trainer (most of the wait, tens of seconds on 2 cores) before its first training step; a serial run in the
kernel has them imported already. :func:`start_ray` starts Ray without what the lab does not use (no dashboard, no bare
workers started ahead for tasks that run under the lab's runtime_env, the workers' output not forwarded to the
notebook, Ray's own log lines above warnings off) and has one worker per CPU import the trainer in the background,
then returns: a later sweep uses that Ray as it is (a Ray you started stays yours) and its warm workers, whose imports
Ray keeps between tasks of this process, so a rerun of the sweep cell starts at once too.
``benchmarks/bench_ray_start.py`` measures the time from the sweep call to the first training step, serial and on Ray,
cold and started early.

A new local Ray enables token authentication (unless ``RAY_AUTH_MODE`` says otherwise) and says so in a warning on
every start; the lab keeps that default and drops that one message (a filter on the logger of Ray's authentication
set-up), so the notebook shows no warning. Notebook: ``notebooks/04_reproduce_curves.ipynb``.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

from agl_lab.core.loss import ray_runtime_env

__all__ = ["init_ray", "start_ray"]

STARTS = 3  # tries at a local Ray start that timed out (Ray's own message below): the machine was busy
STARTUP_TIMEOUT = "timed out during startup"
_WARMING: list[Any] = []  # the warm-up tasks' references: kept so that nothing cancels them


def start_ray(*, executor: str = "ray", address: str | None = None, num_cpus: int | None = None) -> bool:
    """Start local Ray (or connect to ``address`` / ``RAY_ADDRESS``) for sweeps unless Ray runs in this process
    already; True when this call started it. ``executor="serial"``: nothing to start (False), so a notebook passes
    its executor whichever it is. ``num_cpus``: local Ray's CPUs (default: all). The workers' imports run in the
    background; a sweep submitted meanwhile waits only for what is left of them."""
    if executor not in ("ray", "serial"):
        raise ValueError(f"executor must be 'ray' or 'serial', got {executor!r}")
    import ray

    if executor == "serial" or ray.is_initialized():
        return False
    _quiet_token_auth_notice()
    options = dict(
        address=address,
        num_cpus=None if address else num_cpus,
        runtime_env=ray_runtime_env(),
        include_dashboard=False if not address else None,  # a cluster's head decides its own dashboard
        log_to_driver=False,
        # Ray's lines ("Connecting to existing Ray cluster at address: ...", the token-auth notice) are no news to the
        # user, and the first names the cluster's address; what goes wrong is raised, and reported as one line
        logging_level=logging.ERROR,
    )
    if not (address or os.environ.get("RAY_ADDRESS")):  # a new local Ray (a cluster's head keeps its own settings)
        # Ray starts one bare worker per CPU when the first driver connects; the sweep's tasks run under the lab's
        # runtime_env, which those workers lack, so they would sit idle while the cells' workers import torch and verl
        options["_system_config"] = {"prestart_worker_first_driver": False}
    init_ray(**options)
    warm = ray.remote(num_cpus=1, max_retries=0)(_import_the_trainer)
    _WARMING[:] = [warm.remote() for _ in range(max(int(ray.cluster_resources().get("CPU", 1)), 1))]
    return True


def init_ray(**options: Any) -> None:
    """``ray.init(**options)``, started again when a local start times out: Ray's raylet waits for its agents to
    import and write their ports, and Ray gives up after a fixed window that a busy laptop can miss. Each retry shuts
    down what the failed start left and warns; the last raises Ray's own error (:data:`STARTS` tries). A cluster's
    address is never retried: a wrong one fails at once."""
    import ray

    for attempt in range(1, STARTS + 1):
        try:
            ray.init(**options)
            return
        except Exception as exc:
            if options.get("address") or STARTUP_TIMEOUT not in str(exc) or attempt == STARTS:
                raise
            ray.shutdown()  # what that start left running, before the next
            warnings.warn(f"local Ray did not start within Ray's 30 s on a busy machine; starting it again ({exc})",
                          RuntimeWarning, stacklevel=3)  # fmt: skip


def _quiet_token_auth_notice() -> None:
    """Drop Ray's warning that token authentication is on by default (it is on; Ray's other warnings stay)."""
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if _drop_default_notice not in notice.filters:
        notice.addFilter(_drop_default_notice)


def _drop_default_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def _import_the_trainer() -> None:
    """In a worker: import what a sweep's cell runs, so the cell starts training when it arrives."""
    import agl_lab.studies.sweep  # noqa: F401 (the import is the point: torch, verl, the trainer)
