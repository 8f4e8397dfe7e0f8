"""Helpers for the remote tests: a real `eppo-envs serve` subprocess, or the same app in a thread (to inspect it)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def served(env_id: str, *args: str, startup_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """`eppo-envs serve ENV_ID --port 0 ARGS` in a subprocess; yields (url, process); SIGTERM on exit."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "eppo_envs.cli", "--import", "eppo_envs.example.guess_number",
           "serve", env_id, "--port", "0", *args]
    # stderr to a file, not a pipe: a chatty server must never block on a full pipe nobody reads.
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=ROOT)
    proc.log = log  # type: ignore[attr-defined]
    try:
        url = _read_url(proc, startup_s)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


def _read_url(proc: subprocess.Popen, startup_s: float) -> str:
    found: list[str] = []

    def reader() -> None:
        line = proc.stdout.readline() if proc.stdout else ""
        match = re.search(r"http://[\d.]+:\d+", line)
        if match:
            found.append(match.group(0))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(startup_s)
    if not found:
        proc.kill()
        proc.wait(timeout=10)
        proc.log.seek(0)  # type: ignore[attr-defined]
        err = proc.log.read()  # type: ignore[attr-defined]
        raise RuntimeError(f"server did not print its URL within {startup_s}s: {err[-2000:]}")
    return found[0]


@contextmanager
def in_thread(config) -> Iterator[tuple[str, object]]:
    """The same app under uvicorn in a thread of this process: yields (url, app) so a test can inspect sessions."""
    import uvicorn

    from eppo_envs.remote.server import build_app

    app = build_app(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        server.should_exit = True
        thread.join(30)
