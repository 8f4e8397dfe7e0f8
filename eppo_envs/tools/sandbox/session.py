"""`Sandbox.open(code)`: a sandboxed run that talks with its parent while it runs.

The snippet gets two extra descriptors, named in `sys.argv[1:3]`: it reads requests (one line each) from the
first and writes replies (one line each) to the second. Its stdout and stderr stay separate, captured within
`Limits.output_bytes` as in `Sandbox.run`, and never mix with replies. The parent reads a reply within a deadline
of its choosing; the whole run is still bounded by `Limits.wall_s`, and everything the snippet started is dead
when `close()` returns.

This only carries bytes. What a reply is worth is for the caller to decide: the snippet controls both
descriptors, so a reply is whatever the snippet chose to write (see docs/sandbox.md, "Judging untrusted code").
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from contextlib import AbstractContextManager

from eppo_envs.tools.sandbox.backends import Launch
from eppo_envs.tools.sandbox.config import Limits, RunResult
from eppo_envs.tools.sandbox.process import Pid1, Stream, classify

MAX_REPLY_BYTES = 4 << 20  # one reply line longer than this ends the run (the parent will not buffer more)


class SessionClosed(Exception):
    """The snippet is gone (exited, killed, timed out) or broke the protocol; no reply will come."""


class SandboxSession:
    """One interactive sandboxed process. Not thread-safe: one caller talks with one session."""

    def __init__(self, launch: Launch, limits: Limits, backend_name: str, release: AbstractContextManager,
                 requests_w: int, replies_r: int) -> None:
        self._launch, self.limits, self._backend, self._release = launch, limits, backend_name, release
        self._req, self._rep = requests_w, replies_r
        self.start = time.monotonic()
        self.deadline = self.start + limits.wall_s
        self.proc = subprocess.Popen(
            launch.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=launch.pass_fds, cwd=launch.cwd, env=launch.env or {"PATH": "/usr/bin:/bin"},
            start_new_session=True,
        )
        launch.close_child_ends()
        self._streams = {self.proc.stdout: Stream(limits.output_bytes), self.proc.stderr: Stream(limits.output_bytes)}
        self._pid1 = Pid1(launch.info_fd)
        self._sel = selectors.DefaultSelector()
        for pipe in self._streams:
            os.set_blocking(pipe.fileno(), False)
            self._sel.register(pipe, selectors.EVENT_READ)
        if launch.info_fd is not None:
            self._sel.register(launch.info_fd, selectors.EVENT_READ)
        os.set_blocking(self._rep, False)
        os.set_blocking(self._req, False)
        self._sel.register(self._rep, selectors.EVENT_READ)
        self._reply_buf = bytearray()
        self.timed_out = self.flooded = self.broken = False
        self._result: RunResult | None = None

    # -- talking -------------------------------------------------------------------------------------------
    def send(self, line: bytes, timeout_s: float) -> None:
        """Write one request line (a newline is added). Raises SessionClosed if it cannot be delivered in time."""
        data = memoryview(line + b"\n")
        deadline = min(self.deadline, time.monotonic() + timeout_s)
        while data:
            if self._req < 0:
                raise SessionClosed("request channel closed")
            try:
                n = os.write(self._req, data)
                data = data[n:]
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, OSError) as exc:
                raise SessionClosed(f"the program no longer reads requests ({type(exc).__name__})") from None
            self._pump(deadline, want_write=True)

    def receive(self, timeout_s: float) -> bytes:
        """The next reply line (without its newline). Raises SessionClosed on timeout, exit or an oversized line."""
        deadline = min(self.deadline, time.monotonic() + timeout_s)
        while True:
            cut = self._reply_buf.find(b"\n")
            if cut >= 0:
                line = bytes(self._reply_buf[:cut])
                del self._reply_buf[:cut + 1]
                return line
            if len(self._reply_buf) > MAX_REPLY_BYTES:
                self.broken = True
                raise SessionClosed(f"a reply longer than {MAX_REPLY_BYTES} bytes")
            if self._rep < 0:
                raise SessionClosed("the program closed its reply channel or exited")
            self._pump(deadline)

    def _pump(self, deadline: float, want_write: bool = False) -> None:
        """Wait for any event until `deadline`: read output and replies; return when the request pipe is writable
        (if `want_write`) or a reply byte arrived."""
        if want_write and self._req >= 0:
            self._sel.register(self._req, selectors.EVENT_WRITE)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if deadline >= self.deadline:
                        self.timed_out = True
                    raise SessionClosed("no reply in time")
                for key, _ in self._sel.select(timeout=remaining):
                    fobj = key.fileobj
                    if fobj == self._req:
                        return
                    if fobj == self._launch.info_fd:
                        if not self._pid1.feed(os.read(self._launch.info_fd, 4096)):
                            self._sel.unregister(fobj)
                        continue
                    if fobj == self._rep:
                        data = os.read(self._rep, 65_536)
                        if not data:
                            self._sel.unregister(fobj)
                            os.close(self._rep)
                            self._rep = -1
                        self._reply_buf += data
                        return
                    data = fobj.read(65_536)
                    if not data:
                        self._sel.unregister(fobj)
                        if not any(k.fileobj in self._streams for k in self._sel.get_map().values()):
                            return  # both output streams closed: the program is gone
                        continue
                    self._streams[fobj].feed(data)
                    if sum(s.total for s in self._streams.values()) > self.limits.output_kill_bytes:
                        self.flooded = True
                        raise SessionClosed("the program printed too much")
        finally:
            if want_write and self._req >= 0 and self._req in self._sel.get_map():
                self._sel.unregister(self._req)

    # -- ending --------------------------------------------------------------------------------------------
    def close(self, grace_s: float = 0.5) -> RunResult:
        """End the run (the request channel is closed first, so a well-behaved program exits by itself), kill
        whatever is left, and return its output. Idempotent."""
        if self._result is not None:
            return self._result
        if self._req >= 0:
            os.close(self._req)
            self._req = -1
        end = min(self.deadline, time.monotonic() + grace_s)
        killed = self.timed_out or self.flooded or self.broken
        while not killed and any(k.fileobj in self._streams for k in self._sel.get_map().values()):
            try:
                self._pump(end)
            except SessionClosed:
                break
        try:
            returncode = self.proc.wait(timeout=0 if killed else max(0.0, end - time.monotonic()) + 0.05)
        except subprocess.TimeoutExpired:
            returncode = None
        if returncode is None:
            self._kill()
            returncode = self.proc.wait()
        self._sel.close()
        for pipe in self._streams:
            pipe.close()
        if self._rep >= 0:
            os.close(self._rep)
            self._rep = -1
        self._pid1.kill()  # pid 1 of the namespace: anything the program left running dies with it
        self._pid1.wait_gone()
        self._launch.cleanup()
        self._release.__exit__(None, None, None)
        stdout, out_cut = self._streams[self.proc.stdout].text()
        stderr, err_cut = self._streams[self.proc.stderr].text()
        reason = classify(returncode, stderr, self.timed_out, self.flooded, self._backend == "bwrap")
        self._result = RunResult(
            stdout=stdout, stderr=stderr, exit_code=None if (self.timed_out or self.flooded) else returncode,
            reason=reason, wall_s=time.monotonic() - self.start, stdout_truncated=out_cut, stderr_truncated=err_cut,
            backend=self._backend,
        )
        return self._result

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._pid1.kill()

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
