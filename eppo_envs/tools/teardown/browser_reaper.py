"""A watchdog that kills a browser's processes when their owner dies, however it dies (SIGKILL included).

chromedriver and Chromium's dozen processes do not notice their owner's death: killed with -9, a Python process
would leave them running for good, re-parented to init. A parent-death signal would not do (it fires when the
*thread* that started the child exits, and reaches only the direct child). Instead:

- the browser's processes are recognisable: chromedriver and Chromium's main process carry a marker in their
  environment (`EPPO_BROWSER_TAG=<random>`); Chromium starts its helpers (zygotes, renderers, GPU and utility
  processes) with a filtered environment, but every one of them names the browser's unique profile folder on its
  command line; and any descendant of such a process counts too, and
- a small reaper process, started in its own session, blocks reading a pipe whose only writer is the owner.
  When the owner exits or is killed, the kernel closes that pipe; the reaper wakes up, finds all those processes
  (before killing any, so no orphan escapes to init unseen), kills them, repeats while any is left (one may have
  been starting), removes the browser's profile folder, and exits. On a normal `close()` the browser is
  already gone and the reaper finds nothing to kill. A SIGTERM to the reaper starts the same sweep at once: a
  command's cleanup terminates every descendant while the owner still lives (`eppo_train/runtime/interrupt.py`).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

TAG_ENV = "EPPO_BROWSER_TAG"

_REAPER = r"""
import os, shutil, signal, sys, time
tag = (sys.argv[1] + "=" + sys.argv[2]).encode()
profile = sys.argv[3].encode()
class Sweep(Exception):
    pass
def sweep_now(signum, frame):
    raise Sweep
# SIGTERM means "sweep now": a command's cleanup (eppo_train's interrupt guard and watchdog) terminates every
# descendant, this one included, before the owner exits; dying at once would leave the profile folder behind.
signal.signal(signal.SIGTERM, sweep_now)
try:
    while os.read(0, 4096):  # only EOF matters: the owner closed the pipe or died
        pass
except Sweep:
    pass
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one sweep, to the end
me = os.getpid()
def _read(pid, what):
    try:
        with open("/proc/%d/%s" % (pid, what), "rb") as f:
            return f.read()
    except OSError:
        return b""
def tagged():
    parents, marked = {}, set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        stat = _read(pid, "stat")
        if stat:
            parents[pid] = int(stat.rsplit(b")", 1)[1].split()[1])
        if tag in _read(pid, "environ").split(b"\0") or profile in _read(pid, "cmdline"):
            marked.add(pid)
    grown = True
    while grown:  # add descendants of marked processes
        more = {pid for pid, ppid in parents.items() if ppid in marked and pid not in marked}
        marked |= more
        grown = bool(more)
    return marked
for _ in range(10):
    pids = tagged()
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.2)
shutil.rmtree(sys.argv[3], ignore_errors=True)  # the profile folder, which a killed owner could not remove
"""


class Reaper:
    """Starts the watchdog; `env()` is the environment to start browser processes with."""

    def __init__(self, profile_dir: str) -> None:
        self.tag = secrets.token_hex(8)
        read_end, self._write_end = os.pipe()  # both non-inheritable: no child of ours holds the write end
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-S", "-c", _REAPER, TAG_ENV, self.tag, profile_dir], stdin=read_end,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        finally:
            os.close(read_end)

    def env(self) -> dict[str, str]:
        return {**os.environ, TAG_ENV: self.tag}

    def close(self) -> None:
        """Let the reaper sweep (normally nothing is left) and exit. Idempotent."""
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
