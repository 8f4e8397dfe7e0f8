"""Ray for a command: connect to a cluster or start a local one, say a dead node or actor in one line, check
that the resources actors ask for exist. The env pool, the workers and the evaluation all start Ray through here.
"""

from __future__ import annotations

import os
import pickle
import socket
from typing import Any

from eppo_train.core.registry import ConfigError
from eppo_train.runtime import gcs_watch
from eppo_train.runtime.interrupt import WorkerLost, ray_init_signals


def init_ray(address: str | None = None, num_cpus: int | None = None,
             resources: dict[str, float] | None = None) -> None:
    """Connect to a cluster at `address`, or start a local Ray (token auth off: a local run has no secrets).

    `resources`: custom resources a local Ray offers, so that a config written for a cluster ({"env": 1} per env
    worker) also runs on one machine. A cluster's nodes declare their own (`ray start --resources`).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    if ray.is_initialized():
        gcs_watch.start(ray, local=not address)  # a second command in this process (tests): watched too
        return
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
    if address:
        _check_reachable(address)
        try:
            with ray_init_signals():
                ray.init(address=address, **kwargs)
        except ConnectionError as exc:  # no cluster at the address the user gave: theirs to fix, not a traceback
            reason = str(exc).split(". ")[0]
            raise ConfigError(f"ray.address {address!r}: {reason}; start one with `ray start --head`, or leave "
                              "ray.address unset (no --ray-address) for a local Ray") from None
    else:
        with ray_init_signals():
            ray.init(num_cpus=num_cpus, resources=resources or None, include_dashboard=False, **kwargs)
    _hush_death_reports(ray)
    gcs_watch.start(ray, local=not address)  # a dead GCS: the command's one line in seconds, not Ray's exit at 60 s


# The opening words of the reports Ray's raylet publishes to the driver when one of its processes dies under it
# (`kill -9`, the OOM killer): its driver prints them on stdout, whenever they arrive, as a paragraph ("A worker
# died...", with lease and worker ids and an OOM how-to) or as the raylet's last 20 log lines. The command says each
# such death itself in one line (`lost()` for the generator and learner, `RayEnvPool` for a replaced env worker), so
# Ray's report would be a second story, after the command's one line as often as before it.
RAY_DEATH_REPORTS = ("A worker died or was killed", "Raylet is terminated")


def _hush_death_reports(ray: Any) -> None:
    """Drop the raylet's death reports from what Ray's driver prints (its other messages pass as they were).
    Ray has no setting for it: its error listener calls `ray._private.worker.print_to_stdstream` by name, which is
    wrapped here, once (where that function is gone, nothing changes)."""
    import ray._private.worker as ray_worker

    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "hushes_death_reports", False):
        return

    def print_to_stdstream(data: dict, ignore_prefix: bool) -> None:
        lines = [str(line).lstrip() for line in data.get("lines", [])]
        if data.get("pid") == "raylet" and lines and all(line.startswith(RAY_DEATH_REPORTS) for line in lines):
            return
        original(data, ignore_prefix)

    print_to_stdstream.hushes_death_reports = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = print_to_stdstream


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A `host:port` where nothing answers is a one-line ConfigError at once: Ray's own client retries such an
    address for minutes (measured: over 200 s for 127.0.0.1:1) before it gives up. "auto" and ray:// addresses are
    left to Ray."""

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)  # [::1]:6379 too
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"ray.address {address!r}: nothing answers there ({reason}); start a cluster with "
                          "`ray start --head`, or leave ray.address unset (no --ray-address) for a local Ray") from None
    with conn:
        first = _first_bytes(conn, timeout_s)
    # A GCS is a gRPC server: its first bytes are an HTTP/2 SETTINGS frame (type 4). Anything else (the dashboard's
    # port 8265, a web server) keeps Ray's client retrying for minutes, a C++ warning a second, before its error.
    if first and (len(first) < 4 or first[3] != 4):
        raise ConfigError(f"ray.address {address!r}: something answers there, but not a Ray cluster (it sent "
                          f"{first[:16]!r}); give the GCS address `ray start --head` prints (port 6379 by default, "
                          "not the dashboard's 8265)")


def _first_bytes(conn: Any, timeout_s: float) -> bytes:
    """What a server sends first when spoken to in HTTP/2 (b"" when it says nothing in time or hangs up)."""
    conn.settimeout(timeout_s)
    try:
        conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # preface, SETTINGS
        return conn.recv(9)
    except OSError:
        return b""


class PlacementError(ConfigError):
    """Actors ask for a resource no node of the cluster offers (they would wait forever): one line, fit to print."""


def check_resources(what: str, wanted: dict[str, float]) -> None:
    """Fail fast, naming the key, when `wanted` asks for a custom resource the cluster does not have at all."""
    import ray

    offered = ray.cluster_resources()
    for name, amount in wanted.items():
        if offered.get(name, 0.0) < amount:
            custom = sorted(k for k in offered if k not in {"CPU", "GPU", "memory", "object_store_memory"}
                            and not k.startswith("node:"))
            raise PlacementError(f"{what} asks for {amount:g} {name!r} but the cluster offers "
                                 f"{offered.get(name, 0.0):g} (custom resources: {', '.join(custom) or 'none'}); "
                                 f"start nodes with ray start --resources '{{\"{name}\": N}}'")


def lost(ray: Any, exc: BaseException, what: str) -> WorkerLost:
    """`exc` (a `ray.exceptions.RayActorError`) as one line naming `what` died, and why where Ray knows it."""
    if getattr(exc, "actor_init_failed", False):  # its constructor raised: the error's own last line says what
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return WorkerLost(f"the {what} could not start: {lines[-1] if lines else type(exc).__name__}")
    if isinstance(exc, ray.exceptions.ActorUnavailableError):
        return WorkerLost(f"the {what} became unreachable (its node or its connection went away)")
    return WorkerLost(f"the {what} died (its process ended: killed, out of memory, or its node went away)")


def wire_bytes(value: Any) -> int:
    """Roughly what Ray sends for `value` (it pickles task arguments and results the same way)."""
    return len(pickle.dumps(value, protocol=5))
