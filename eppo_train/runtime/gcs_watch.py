"""Ray's GCS (its `gcs_server`, the cluster's control process) dying under a command: one line in seconds.

Why: nothing the command does shows the loss. Actor calls go straight to the actors, so a run goes on as if nothing
had happened; then, 60 s later (Ray's `gcs_rpc_server_reconnect_timeout_s`), Ray's GCS client in the driver ends the
process with `std::_Exit(1)` from one of its threads: no line, no resume hint, no clean-up but the watchdog's
(timings in docs/cluster.md).
Lowering that setting only makes the same silent exit come sooner. So a thread here connects to the GCS's port every
PROBE_S; once it has not answered for `grace_s`, `interrupt.lose` stops the command the way a Ctrl-C does (finally
blocks, Ray's processes ended), with the reason as its error line and exit 1.

A local Ray's GCS is never restarted (nothing supervises it), so its grace is short. A cluster's may be (GCS fault
tolerance): there the command waits nearly as long as Ray's own client would, and says its line before Ray exits.
A raylet's death needs no watcher: the actor calls fail at once (`envpool.lost`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from eppo_train.runtime import interrupt

PROBE_S = 0.5  # between two connection attempts
LOCAL_GRACE_S = 2.0  # a local GCS that refuses connections this long is gone for good
CLEANUP_S = 10.0  # on a cluster: said this long before Ray's own client gives up and exits


def grace_s(local: bool) -> float:
    """How long the GCS may not answer before the command stops."""
    if local:
        return LOCAL_GRACE_S
    try:  # the driver's own setting (Ray's default 60 s); the cluster's nodes have theirs
        ray_s = float(os.environ.get("RAY_gcs_rpc_server_reconnect_timeout_s", "60"))
    except ValueError:
        ray_s = 60.0
    return max(LOCAL_GRACE_S, ray_s - CLEANUP_S)


def answers(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something accepts a connection at `host:port` (a killed process's port refuses it at once)."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        return False
    return True


_token: list[object] = []  # the newest watcher's; an older one (a Ray since shut down and started again) stops
_running: dict[str, threading.Thread] = {}  # GCS address -> the thread watching it


def start(ray: Any, local: bool) -> threading.Thread | None:
    """Watch the connected Ray's GCS while a `guard()`ed command runs (elsewhere nothing is started); a watcher
    already on it goes on (a second command in one process, as in tests, joins the Ray of the first)."""
    if not interrupt.guarding():
        return None
    address = ray.get_runtime_context().gcs_address
    running = _running.get(address)
    if running is not None and running.is_alive():
        return running
    token = object()
    _token[:] = [token]
    thread = threading.Thread(target=watch, args=(address, grace_s(local), ray.is_initialized, token),
                              name="gcs-watch", daemon=True)
    _running.clear()
    _running[address] = thread
    thread.start()
    return thread


def watch(address: str, grace: float, connected: Callable[[], bool], token: object | None = None) -> None:
    """Probe `address` until it has refused connections for `grace` seconds, then `interrupt.lose`; return early
    once the guarded body ends, `connected()` is false (Ray shut down) or a newer watcher has started."""
    if token is None:
        token = object()
        _token[:] = [token]
    down_since: float | None = None
    while _token == [token] and interrupt.guarding() and connected():
        if answers(address):
            down_since = None
        else:
            now = time.monotonic()
            down_since = down_since if down_since is not None else now
            if now - down_since >= grace:
                interrupt.lose(f"Ray's GCS (its control process, {address}) stopped answering for {grace:.0f}s "
                               "(killed, out of memory, or its node went away)")
                return
        time.sleep(PROBE_S)

