"""Where a run's W&B logs go: online or offline, and never a stall waiting for a server that does not answer.

``lab.wandb_mode`` chooses the mode for one run; with ``auto``, ``WANDB_MODE`` when set, else offline unless a key is
configured (``WANDB_API_KEY`` or a ``wandb login`` entry in ``~/.netrc``). W&B reads its ``WANDB_*`` variables once per
process, so the directory and mode go through ``wandb.setup`` for each run (:func:`point_wandb_at`, restored after).

Online without a reachable server (no network, a firewall, a wrong ``WANDB_BASE_URL``), ``wandb.init`` waits up to
its ``init_timeout`` (90 s) for every run and then fails, keeping nothing. So before an online run starts, the
server (or the proxy the environment names for it) is probed with a TCP connection that must answer within
:data:`PROBE_TIMEOUT_S`; when it does not, the run logs offline into its own directory, with a warning that says so
and where the offline run is (``wandb sync`` uploads it later). If the server answers the probe but ``wandb.init``
still fails, :mod:`agl_lab.training.tracking` retries the run offline the same way.
"""

from __future__ import annotations

import netrc
import os
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

__all__ = ["PROBE_TIMEOUT_S", "point_wandb_at", "server_problem", "wandb_key_configured"]

PROBE_TIMEOUT_S = 3.0  # how long an online run waits for the W&B server to accept a connection


def wandb_key_configured() -> bool:
    """Whether W&B could log online: ``WANDB_API_KEY`` is set or ``wandb login`` left a key in ``~/.netrc``."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def point_wandb_at(
    run_dir: Path, mode: str | None = None, *, warn: Callable[[str], None]
) -> tuple[Callable[[], None], str]:
    """Set W&B's process-wide directory and mode (``None``: the default) for the next ``wandb.init``; return what
    puts them back, and the mode set (offline, with ``warn`` told why, when online has no server to reach)."""
    import wandb

    settings = wandb.setup().settings
    previous = {name: getattr(settings, name) for name in ("root_dir", "mode", "silent")}
    mode = mode or os.environ.get("WANDB_MODE") or ("online" if wandb_key_configured() else "offline")
    if mode == "online" and (problem := server_problem(str(settings.base_url))):
        warn(
            f"the W&B server {settings.base_url} is not reachable ({problem}): this run logs to W&B offline "
            f"instead, in {run_dir / 'wandb'} (`wandb sync {run_dir / 'wandb'}/offline-run-*` uploads it later)"
        )
        mode = "offline"
    # silent: the trainer reports where the W&B run is; wandb's banner would bury the CLI's last line
    wandb.setup(settings=wandb.Settings(root_dir=str(run_dir), mode=mode, silent=True))
    return lambda: wandb.setup(settings=wandb.Settings(**{k: v for k, v in previous.items() if v is not None})), mode


def server_problem(url: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why a TCP connection to ``url``'s host (or the proxy for its scheme) fails within ``timeout_s``; None if it
    connects. Runs in a thread, so a name lookup that hangs cannot hold the run longer than ``timeout_s``."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    target = urllib.parse.urlsplit(proxy) if proxy and not urllib.request.proxy_bypass(parts.hostname or "") else parts
    host = target.hostname
    if not host:
        return f"{url!r} is not a URL"
    port = target.port or (443 if target.scheme == "https" else 80)
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=probe, daemon=True, name="wandb-server-probe")
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else f"no answer from {host}:{port} within {timeout_s:g} s"
