"""The pieces of a sandboxed run that a one-shot run (runner.py) and an interactive one (session.py) share: a
bounded output stream, the sandbox's pid 1 held by a pidfd, and the classification of how a run ended."""

from __future__ import annotations

import json
import os
import selectors
import signal

from eppo_envs.tools.sandbox.config import TRUNCATION_MARKER, Reason


class Stream:
    """Keeps the first `limit` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.kept, self.total = limit, bytearray(), 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]

    def text(self) -> tuple[str, bool]:
        out = self.kept.decode("utf-8", errors="replace")
        dropped = self.total - len(self.kept)
        return (out + TRUNCATION_MARKER.format(dropped=dropped), True) if dropped else (out, False)


class Pid1:
    """The sandbox's pid 1, held by a pidfd. bwrap exits as soon as it learns the snippet's exit status, before
    pid 1 has finished tearing down the pid namespace; waiting for pid 1 guarantees that nothing the snippet
    started (a daemon, a fork bomb) is still alive when `run` returns."""

    def __init__(self, info_fd: int | None) -> None:
        self.buffer, self.pidfd, self.done = b"", None, info_fd is None

    def feed(self, data: bytes) -> bool:
        """Add bytes from bwrap's --info-fd; False at EOF."""
        if not data:
            self.done = True
            return False
        self.buffer += data
        if self.pidfd is None:
            try:
                pid = int(json.loads(self.buffer)["child-pid"])
            except (ValueError, KeyError, TypeError):
                return True  # not complete yet
            try:  # opened while pid 1 is certainly alive (the snippet has not even started)
                self.pidfd = os.pidfd_open(pid)
            except OSError:
                self.pidfd = None
        return True

    def kill(self) -> None:
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except OSError:
                pass

    def wait_gone(self, timeout_s: float = 5.0) -> None:
        if self.pidfd is None:
            return
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.pidfd, selectors.EVENT_READ)
                if not sel.select(timeout=timeout_s):  # should not happen: pid 1 dies with bwrap
                    self.kill()
                    sel.select(timeout=timeout_s)
        finally:
            os.close(self.pidfd)
            self.pidfd = None


def classify(returncode: int, stderr: str, timed_out: bool, flooded: bool, via_bwrap: bool) -> Reason:
    if timed_out:
        return "timeout"
    if flooded:
        return "killed"
    if returncode == 0:
        return "ok"
    # bubblewrap reports a child killed by signal N as exit status 128 + N; Popen reports it as -N.
    sig = -returncode if returncode < 0 else (returncode - 128 if via_bwrap and returncode > 128 else 0)
    if sig == signal.SIGXCPU:
        return "timeout"  # CPU time limit
    last_line = stderr.strip().rsplit("\n", 1)[-1]
    if "MemoryError" in last_line or "Cannot allocate memory" in last_line or "bad_alloc" in last_line:
        return "memory"
    if sig:
        return "killed"
    return "error"
