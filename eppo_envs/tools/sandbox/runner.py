"""`Sandbox.run(code)`: launch a snippet with a backend, read its output within bounds, enforce the wall clock.

The whole process group is killed on timeout (with bubblewrap, killing it also ends the sandbox's pid namespace,
so nothing the snippet started survives). Output beyond `Limits.output_bytes` per stream is dropped and marked;
a snippet that prints more than `Limits.output_kill_bytes` in total is killed rather than read forever.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import threading
import time
import warnings
from contextlib import nullcontext
from typing import TYPE_CHECKING

from eppo_envs.tools.sandbox.backends import BACKENDS, BwrapBackend, Launch
from eppo_envs.tools.sandbox.config import Limits, RunResult, SandboxConfig
from eppo_envs.tools.sandbox.layout import SandboxSetupError, python_layout
from eppo_envs.tools.sandbox.process import Pid1, Stream, classify
from eppo_envs.tools.sandbox.session import SandboxSession
from eppo_envs.tools.sandbox.slots import uid_slot

if TYPE_CHECKING:
    from eppo_envs.tools.sandbox.session import SandboxSession

log = logging.getLogger(__name__)
UNSAFE_ENV = "EPPO_SANDBOX_UNSAFE"
_PROBED: dict[tuple, str | None] = {}
_PROBE_LOCK = threading.Lock()


class Sandbox:
    """Runs untrusted Python snippets. Thread-safe: one `Sandbox` may serve many concurrent `run` calls."""

    def __init__(self, config: SandboxConfig | None = None, **limit_overrides: object) -> None:
        config = config or SandboxConfig()
        if limit_overrides:
            from dataclasses import replace

            config = replace(config, limits=replace(config.limits, **limit_overrides))
        if config.backend not in BACKENDS:
            raise SandboxSetupError(f"unknown sandbox backend {config.backend!r}; choose one of {sorted(BACKENDS)}")
        backend_cls = BACKENDS[config.backend]
        if not backend_cls.safe:
            if not (config.allow_unsafe or os.environ.get(UNSAFE_ENV) == "1"):
                raise SandboxSetupError(
                    f"the {config.backend!r} sandbox backend does not isolate files or network; it runs only when "
                    f"asked explicitly: SandboxConfig(backend={config.backend!r}, allow_unsafe=True) or {UNSAFE_ENV}=1"
                )
            message = (
                f"EPPO SANDBOX IS UNSAFE: backend {config.backend!r} runs model-written code with rlimits only; "
                "it can read your files and reach the network. Install bubblewrap for real isolation."
            )
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            log.warning(message)
        self.config = config
        self.limits = config.limits
        self.backend = backend_cls(python_layout(config.python, tuple(config.packages)))
        self._use_slots = isinstance(self.backend, BwrapBackend) and self.backend.as_root
        self._check_backend()

    def _check_backend(self) -> None:
        key = (self.config.backend, self.config.python, tuple(self.config.packages))
        with _PROBE_LOCK:
            if key not in _PROBED:
                _PROBED[key] = self.backend.probe()
        if _PROBED[key] is not None:
            raise SandboxSetupError(f"the {self.config.backend} sandbox does not work on this machine: {_PROBED[key]}")

    def run(self, code: str, limits: Limits | None = None) -> RunResult:
        """Run `code` as a Python script; never raises for anything the snippet does."""
        limits = limits or self.limits
        with uid_slot() if self._use_slots else nullcontext(None) as uid:
            launch = self.backend.prepare(code, limits, uid)
            try:
                return self._execute(launch, limits)
            finally:
                launch.cleanup()

    def open(self, code: str, limits: Limits | None = None) -> SandboxSession:
        """Start `code` as an interactive run (see session.py): it reads request lines from the descriptor named
        in `sys.argv[1]` and writes reply lines to the one in `sys.argv[2]`. Close it (or use `with`)."""

        limits = limits or self.limits
        slot = uid_slot() if self._use_slots else nullcontext(None)
        uid = slot.__enter__()
        req_r, req_w = os.pipe2(os.O_CLOEXEC)
        rep_r, rep_w = os.pipe2(os.O_CLOEXEC)
        os.set_inheritable(req_r, True)
        os.set_inheritable(rep_w, True)
        try:
            launch = self.backend.prepare(code, limits, uid, args=(str(req_r), str(rep_w)))
            launch.pass_fds = (*launch.pass_fds, req_r, rep_w)  # closed here once the child holds them
            return SandboxSession(launch, limits, self.backend.name, slot, req_w, rep_r)
        except BaseException:
            for fd in (req_r, req_w, rep_r, rep_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            slot.__exit__(None, None, None)
            raise

    def _execute(self, launch: Launch, limits: Limits) -> RunResult:
        start = time.monotonic()
        proc = subprocess.Popen(
            launch.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=launch.pass_fds, cwd=launch.cwd, env=launch.env or {"PATH": "/usr/bin:/bin"},
            start_new_session=True,
        )
        launch.close_child_ends()
        streams = {proc.stdout: Stream(limits.output_bytes), proc.stderr: Stream(limits.output_bytes)}
        pid1 = Pid1(launch.info_fd)
        timed_out = flooded = False
        deadline = start + limits.wall_s
        with selectors.DefaultSelector() as sel:
            for pipe in streams:
                os.set_blocking(pipe.fileno(), False)
                sel.register(pipe, selectors.EVENT_READ)
            if launch.info_fd is not None:
                sel.register(launch.info_fd, selectors.EVENT_READ)
            while any(key.fileobj in streams for key in sel.get_map().values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(timeout=remaining):
                    if key.fileobj == launch.info_fd:
                        if not pid1.feed(os.read(launch.info_fd, 4096)):
                            sel.unregister(launch.info_fd)
                        continue
                    data = key.fileobj.read(65_536)
                    if not data:  # EOF (None would mean "nothing yet", which select rules out)
                        sel.unregister(key.fileobj)
                        continue
                    streams[key.fileobj].feed(data)
                if sum(s.total for s in streams.values()) > limits.output_kill_bytes:
                    flooded = True
                    break
        if timed_out or flooded:
            self._kill(proc)
            pid1.kill()
        try:
            returncode = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # pipes closed but the process lingers (e.g. rlimit backend daemon)
            timed_out = True
            self._kill(proc)
            returncode = proc.wait()
        for pipe in streams:
            pipe.close()
        pid1.wait_gone()
        stdout, out_cut = streams[proc.stdout].text()
        stderr, err_cut = streams[proc.stderr].text()
        if flooded:
            stderr += f"\n[sandbox: killed after printing more than {limits.output_kill_bytes} bytes]"
        if timed_out:
            stderr += f"\n[sandbox: killed after {limits.wall_s:g}s wall-clock timeout]"
        reason = classify(returncode, stderr, timed_out, flooded, self.backend.name == "bwrap")
        return RunResult(
            stdout=stdout, stderr=stderr, exit_code=None if (timed_out or flooded) else returncode,
            reason=reason, wall_s=time.monotonic() - start, stdout_truncated=out_cut, stderr_truncated=err_cut,
            backend=self.backend.name,
        )

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


_DEFAULT: Sandbox | None = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """A process-wide sandbox with the default configuration (created on first use)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            backend = "rlimit" if os.environ.get(UNSAFE_ENV) == "1" and not _bwrap_present() else "bwrap"
            _DEFAULT = Sandbox(SandboxConfig(backend=backend))
        return _DEFAULT


def _bwrap_present() -> bool:
    import shutil

    return shutil.which("bwrap") is not None


def run_python(code: str, limits: Limits | None = None) -> RunResult:
    """Run `code` in the default sandbox."""
    return default_sandbox().run(code, limits)
