"""A sweep's cells as Ray tasks: on this machine's cores or on a Ray cluster of several nodes, with no shared disk.

Each cell is one Ray task asking for what it uses: ``num_cpus`` = the run's torch threads (``lab.cpu_threads``; 1 when
0 leaves torch's setting), and ``num_gpus=1`` when its config puts the policy on a GPU (``lab.device=cuda``), so a GPU
cluster runs one cell per GPU. The task trains the cell in its run directory on the node where it runs (the same
absolute path as the sweep folder on the driver), records the node's id and host in ``cell.json`` (``node_id``,
``host``), and sends its files back through Ray: the driver writes them into its own sweep folder, so metrics, config,
timings, status, W&B's offline run and the cell record arrive wherever the nodes' disks are. The policy (the largest
part) stays on the node unless ``fetch_policies``; where the node's disk is the driver's (one machine, a shared file
system) every file is already in place and nothing is written twice.

A lost node loses nothing finished: a cell's files reach the driver when the cell ends, and a cell whose node dies while
it trains is retried by Ray on a surviving node (:data:`RETRIES` times; it starts again from step 1 there), or, once
retries are spent, recorded as failed with Ray's reason; the same command run again trains what is left. The cluster's
address is given to ``ray.init`` only: no cell record, summary, config or W&B run holds it, and Ray's own log lines
(connecting, token authentication) stay out of the user's output.
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from agl_lab.config.compose import short_run_config
from agl_lab.config.secrets import mask_secrets, secret_values
from agl_lab.files.atomic_files import write_whole
from agl_lab.studies.ray_start import start_ray
from agl_lab.studies.sweep_cells import CELL_FILE, POLICY_DIR, Cell, cell_status, write_status
from agl_lab.training.process_state import Terminated, reinstall_stop_handlers

__all__ = ["CANCEL_WAIT_S", "RETRIES", "cell_files", "cell_resources", "node_record", "run_on_ray", "shared_ray"]
__all__ += ["write_cell_files"]

CANCEL_WAIT_S = 60.0  # how long a stopped Ray sweep waits for its cancelled cells to save what they finished
RETRIES = 2  # Ray's retries of a cell whose worker or node died (each attempt starts the cell afresh)


@contextmanager
def shared_ray() -> Iterator[None]:
    """Ray sweeps inside the block share one Ray instance: the first that needs Ray starts it, the block's end shuts
    it down (a reproduction's pilot and extension: a second start can time out on a loaded machine). A Ray instance
    already running is used as it is and stays yours."""
    with ExitStack() as stack:
        _SHARED.append(stack)
        try:
            yield
        finally:
            _SHARED.pop()


_SHARED: list[ExitStack] = []  # the open shared_ray() blocks of this process, innermost last


def cell_resources(cell: Cell, overrides) -> dict[str, float]:
    """What the cell's Ray task asks for: its torch threads as CPUs, a GPU when its config puts the policy on one."""
    lab = short_run_config(overrides, cell.dotlist).lab
    resources = {"num_cpus": max(1, int(lab.cpu_threads))}
    if str(lab.device).startswith("cuda"):
        resources["num_gpus"] = 1
    return resources


def node_record() -> dict[str, str | None]:
    """The node this process runs on: Ray's node id (None outside Ray) and the host's name (never an address)."""
    node_id = None
    try:
        import ray

        if ray.is_initialized():
            node_id = ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return {"node_id": node_id, "host": socket.gethostname()}


def cell_files(run_dir: str | Path, *, policy: bool) -> dict[str, bytes]:
    """Every file of a cell's run directory (relative path -> bytes), the policy folder only when ``policy``."""
    root = Path(run_dir)
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and (policy or relative.parts[0] != POLICY_DIR) and not path.name.endswith(".partial"):
            files[relative.as_posix()] = path.read_bytes()
    return files


def write_cell_files(run_dir: str | Path, files: dict[str, bytes]) -> None:
    """Write a cell's files under ``run_dir``, each whole, ``cell.json`` last (it says the cell is done); a file that is
    already there with the same bytes (the node's disk is this one) is left as it is."""
    root = Path(run_dir)
    for name in sorted(files, key=lambda name: name == CELL_FILE):
        target = root / name
        if target.is_file() and target.read_bytes() == files[name]:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        write_whole(target, files[name])


def run_on_ray(
    cells: list[Cell],
    overrides,
    *,
    run_cell: Callable[..., str],
    address: str | None,
    num_cpus: int | None,
    fetch_policies: bool,
    bar,
) -> None:
    """The cells as Ray tasks (module docstring). A stop cancels the running tasks (each run then stops as after Ctrl-C,
    keeping its steps), waits for them up to :data:`CANCEL_WAIT_S`, and shuts down the Ray instance the sweep
    started."""
    import ray

    if not cells:
        return
    started_here = _start_ray(address=address, num_cpus=num_cpus)  # False: a Ray already running (start_ray's)
    if started_here and _SHARED:  # it outlives this sweep, until the shared_ray() block ends
        _SHARED[-1].callback(ray.shutdown)
        started_here = False
    reinstall_stop_handlers()  # ray.init replaced the SIGTERM handler (and its core a native one that dumps stacks)
    pending: dict[Any, Cell] = {}
    try:
        # SPREAD: cells go to the least busy nodes first, so a cluster's nodes share the sweep from its first cells
        task = ray.remote(max_retries=RETRIES, retry_exceptions=False, scheduling_strategy="SPREAD")(_cell_task)
        hidden = [value for value in (address, _gcs_address()) if value]
        for cell in cells:
            options = task.options(**cell_resources(cell, overrides))
            pending[options.remote(cell, dict(overrides or {}), run_cell, fetch_policies)] = cell
        while pending:  # a timeout, so that a signal's handler runs within a second of its arrival
            done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in done:
                cell = pending.pop(ref)
                try:
                    files = ray.get(ref)
                except Exception as exc:  # the worker or its node died, retries spent: the cell failed, not the sweep
                    error = f"Ray task failed: {type(exc).__name__}: {exc}"
                    error = mask_secrets(error, [*hidden, *secret_values(cell.dotlist)])  # never the address
                    write_status(cell, "failed", error=error)
                else:  # a disk error here is this machine's, and stops the sweep naming the file
                    write_cell_files(cell.run_dir, files)
                bar.update()
    except KeyboardInterrupt:
        for ref in pending:  # each running cell stops at its step boundary and saves what it finished
            ray.cancel(ref, force=False)
        ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_WAIT_S)
        raise
    finally:
        if started_here:  # a Ray instance the sweep started goes with it; one you started stays yours
            ray.shutdown()


def _cell_task(cell: Cell, overrides: dict, run_cell: Callable[..., str], fetch_policy: bool) -> dict[str, bytes]:
    """In a Ray worker: train the cell on this node, then hand its files to the driver. A retry whose earlier attempt
    finished (its node died after the cell was done, before the driver had its files: on a shared disk they are here)
    trains nothing again and hands over what that attempt wrote."""
    if cell_status(cell) == "done":
        return cell_files(cell.run_dir, policy=fetch_policy)
    argv = sys.argv
    sys.argv = argv[:1]  # W&B records the command line: a Ray worker's holds the cluster's addresses, not the run
    try:
        run_cell(cell, overrides, node=node_record())
    finally:
        sys.argv = argv
    return cell_files(cell.run_dir, policy=fetch_policy)


def _gcs_address() -> str | None:
    """The cluster's address as Ray resolved it (another spelling of the one given), to keep it out of cell records."""
    import ray

    try:
        return ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 — only for masking; an older Ray without it leaves the given address masked
        return None


def _start_ray(*, address: str | None, num_cpus: int | None) -> bool:
    """:func:`agl_lab.studies.ray_start.start_ray` (True when it started Ray), a SIGTERM while Ray starts included."""
    try:
        return start_ray(address=address, num_cpus=num_cpus)
    except SystemExit as exc:  # while it starts, Ray's own handler turns SIGTERM into sys.exit(15)
        if exc.code == signal.SIGTERM:
            raise Terminated("SIGTERM") from None
        raise
