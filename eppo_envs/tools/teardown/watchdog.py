"""A watchdog that ends a command's descendants when the command dies, however it dies (SIGKILL and OOM included).

Why it exists: `interrupt.guard()` cleans up on Ctrl-C and SIGTERM, but a process that is SIGKILLed (the kernel's
OOM killer, `kill -9`) or crashes runs no code at all. Its children (vLLM's EngineCore and workers, a Ray raylet,
Chromium, env hosts) are re-parented to init and keep running (after an OOM kill of `make train`, 3.8 GB of vLLM
processes, for minutes). A parent-death signal (`PR_SET_PDEATHSIG`) cannot fix that: each child has to ask
for it itself, it fires when the parent *thread* exits, and vLLM, Ray and Chromium start their own processes.

So `start()` (called by `guard()`, once per process) launches this file as a small process of its own, in its own
session (a Ctrl-C to the terminal's process group does not reach it), holding none of the command's streams (a
reader of the command's output gets EOF when the command ends, not when the watchdog does; its stdout is a pipe to
the owner that says once that it watches, see `ready()`). The watchdog:

- waits on a pidfd of its owner, so it wakes the moment the owner exits (where pidfds are missing it checks the
  owner's pid and create time every poll instead);
- every `POLL_S` seconds records the owner's descendants as (pid, create time), keeping the earlier ones that are
  still alive: a process whose parent died (a double fork, a vLLM worker of a dead engine) leaves the tree but is
  still the owner's;
- when the owner is gone, for whatever reason (a normal exit too: what is left then is a leftover), adds every
  process whose environment carries the owner's marker (`EPPO_OWNER_TAG`, set by `start()`; it catches what the
  owner executed less than a poll before dying and was already orphaned, like a `sh -c 'x &'`), then the live
  descendants of all of these; it sends them SIGTERM (vLLM and Ray shut down cleanly on it), SIGKILLs whatever is
  left after `GRACE_S`, removes the shared-memory segments created since the owner started that no live process
  holds any more (an interrupted vLLM engine leaves 160-250 MB ones in /dev/shm), removes the temporary files and
  folders named with the owner's marker (`eppo_envs.tools.teardown.owner.owned_prefix()`: model copies, checkpoints in
  transit, weights on their way to the engine, the engine's socket folder with vLLM's rendezvous file in it,
  Chromium profiles, which their makers remove unless killed first), and exits.

A process is signalled only when its create time still matches the recorded one, through a pidfd opened before the
check, so the check and the signal concern the same process: a pid reused by an unrelated process is never hit.
The cost is one scan of /proc's process list per poll (0.17% of a core, 18 MiB, with a tree of 7 processes).

What it cannot see: a process started less than a poll before the owner died, whose parent died with the owner,
and that neither was exec'd by a marked process (a fork without exec) nor kept the marker (a filtered environment).
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import psutil
except ImportError:  # a bare machine (the GPU check's: torch and transformers only): no watchdog there
    psutil = None

POLL_S = 1.0  # how often the descendants are recorded
GRACE_S = 3.0  # between SIGTERM and SIGKILL
TAG_ENV = "EPPO_OWNER_TAG"  # eppo_envs.tools.teardown.owner.OWNER_TAG_ENV, named here too: this file runs as a bare script

Snapshot = dict[int, float]  # pid -> create time

_watchdogs: dict[int, subprocess.Popen] = {}  # owner pid -> its watchdog (a forked child gets its own)
_tags: dict[int, str] = {}  # owner pid -> its marker


def start(poll_s: float = POLL_S, grace_s: float = GRACE_S) -> int | None:
    """Make sure this process has a watchdog; its pid, or None where it cannot run (no /proc, no psutil, no
    process)."""
    if psutil is None:
        return None
    owner = os.getpid()
    running = _watchdogs.get(owner)
    if running is not None and running.poll() is None:
        return running.pid
    if not os.path.isdir("/proc/self"):  # the scans below are Linux's; elsewhere guard() still handles signals
        return None
    tag = _tags.setdefault(owner, secrets.token_hex(8))
    tags = os.environ.get(TAG_ENV, "").split()
    if tag not in tags:  # keep the ancestors' markers: a watched grandparent must still find our children
        os.environ[TAG_ENV] = " ".join([*tags, tag])
    try:
        proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), str(owner), tag, str(poll_s), str(grace_s)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, cwd="/")  # stdout: one line when it watches (see ready())
    except OSError as exc:
        print(f"warning: no watchdog for this command's child processes: {exc}", file=sys.stderr)
        return None
    _watchdogs[owner] = proc
    return proc.pid


def ready(timeout: float) -> bool:
    """Wait up to `timeout` s until this process's watchdog has recorded its tree once; whether it has. (guard()
    does not wait: the command imports for seconds before it starts anything; a test that kills at once does.)"""
    proc = _watchdogs.get(os.getpid())
    if proc is None or proc.stdout is None:
        return False
    if proc.stdout.closed:
        return True
    if not select.select([proc.stdout], [], [], timeout)[0] or not proc.stdout.read(1):
        return False
    proc.stdout.close()
    return True


def watchdog_pid() -> int | None:
    """The pid of this process's watchdog, if it runs (so that cleaning up the children can spare it)."""
    proc = _watchdogs.get(os.getpid())
    return proc.pid if proc is not None and proc.poll() is None else None


def remove_owned_temp(tag: str) -> list[str]:
    """Remove the entries of the temp folder, /tmp and /dev/shm that `owned_prefix` named with `tag`; their names.
    /tmp as well: under a long TMPDIR the engine's socket folder is made there (`policy.vllm.socket_folder`)."""
    removed: list[str] = []
    for folder in dict.fromkeys((tempfile.gettempdir(), "/tmp", SHM_DIR)):
        try:
            names = [n for n in os.listdir(folder) if n.startswith("eppo-") and f"-{tag}-" in n]
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    continue
            removed.append(name)
    return removed


def _descendants(root: psutil.Process, me: int) -> Snapshot:
    try:
        kids = root.children(recursive=True)
    except psutil.Error:
        return {}
    found: Snapshot = {}
    for p in kids:
        if p.pid != me:
            try:
                found[p.pid] = p.create_time()
            except psutil.Error:
                continue
    return found


def _same(pid: int, created: float) -> bool:
    """Whether `pid` is still the process recorded with create time `created` (and not a zombie)."""
    try:
        p = psutil.Process(pid)
        return p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_if_same(pid: int, created: float, sig: int) -> bool:
    """Send `sig` to `pid` only if it is the process created at `created`; whether it was sent."""
    try:
        fd = os.pidfd_open(pid)  # pins the process that has this pid now: checked below, then signalled
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):
        fd = -1  # no pidfds: a (tiny) window between the check and the signal remains
    try:
        if not _same(pid, created):
            return False
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except OSError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def targets(known: Snapshot, tag: str, me: int) -> Snapshot:
    """The live processes (zombies aside) that are in `known` with the same create time or whose environment, as
    they were started, carries `tag`, with all their descendants: one scan of the process list."""
    rows: dict[int, tuple[int, float]] = {}  # pid -> (ppid, create time)
    found: Snapshot = {}
    for p in psutil.process_iter(["ppid", "create_time", "status", "environ"]):
        info = p.info  # a value is None where it cannot be read (another user's environment)
        if p.pid == me or info["status"] in (None, psutil.STATUS_ZOMBIE) or info["create_time"] is None:
            continue
        rows[p.pid] = (info["ppid"], info["create_time"])
        if known.get(p.pid) == info["create_time"] or tag in (info["environ"] or {}).get(TAG_ENV, "").split():
            found[p.pid] = info["create_time"]
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in rows.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(found)
    while stack:
        for kid in children.get(stack.pop(), []):
            if kid not in found:
                found[kid] = rows[kid][1]
                stack.append(kid)
    return found


def sweep(known: Snapshot, tag: str, me: int, grace_s: float) -> None:
    """SIGTERM what is left of `known` and of the tagged processes (and their descendants), SIGKILL stragglers."""
    doomed = targets(known, tag, me)  # all found before any is signalled: none escapes to init unseen
    if not doomed:  # the usual case after a clean exit: leave at once
        return
    for pid, ct in doomed.items():
        signal_if_same(pid, ct, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_same(pid, ct) for pid, ct in doomed.items()):
        time.sleep(0.1)
    for _ in range(10):  # a dying process may still have started one: repeat until nothing is left
        left = targets(doomed, tag, me)
        if not left:
            return
        for pid, ct in left.items():
            signal_if_same(pid, ct, signal.SIGKILL)
        doomed.update(left)
        time.sleep(0.1)


SHM_DIR = "/dev/shm"
SHM_PREFIX = "psm_"  # Python's `multiprocessing.shared_memory` names (vLLM's message queues use it)


def _held_shm() -> set[str]:
    """The /dev/shm files any live process has open or mapped (one pass over /proc's fds and maps)."""
    held: set[str] = set()
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/maps") as maps:
                held.update(line.split()[-1] for line in maps if SHM_DIR + "/" in line)
        except OSError:  # gone meanwhile, or another user's: its segments are not ours to remove either
            continue
        for fd in fds:
            try:  # one fd closed meanwhile must not hide the process's other fds
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(SHM_DIR + "/"):
                held.add(target.split()[0])
    return held


def unlink_orphaned_shm(since: float, wait_s: float = 0.0) -> list[str]:
    """Remove the shared-memory segments of this user created at or after `since` (a time.time()) that no live
    process holds, looking again for up to `wait_s` while some are still held; the names removed. Why: a segment
    outlives its processes until someone unlinks it, and a SIGKILLed (or interrupted) vLLM engine leaves its
    160-250 MB message-queue segments behind, in RAM; the `resource_tracker` that would unlink them is one of the
    processes the sweep ends. (Right after the sweep, the engine's dying processes may still hold them.)"""
    removed: list[str] = []
    deadline = time.monotonic() + wait_s
    while True:
        candidates = _shm_candidates(since)
        held = _held_shm() if candidates else set()
        for path in candidates:
            if path not in held:
                try:
                    os.unlink(path)
                    removed.append(os.path.basename(path))
                except OSError:
                    pass
        if time.monotonic() >= deadline or not held.intersection(candidates):
            return removed
        time.sleep(0.2)


def _shm_candidates(since: float) -> list[str]:
    """This user's `psm_*` segments created at or after `since`."""
    try:
        names = [n for n in os.listdir(SHM_DIR) if n.startswith(SHM_PREFIX)]
    except OSError:
        return []
    candidates = []
    for name in names:
        path = os.path.join(SHM_DIR, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_uid == os.getuid() and st.st_ctime >= since:
            candidates.append(path)
    return candidates


class _Owner:
    """The watched process: `gone(timeout)` waits up to `timeout` seconds and says whether it has exited."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.poller: select.poll | None = None
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN)  # readable once the process has exited (a zombie counts)

    def gone(self, timeout: float) -> bool:
        if self.poller is not None:
            return bool(self.poller.poll(timeout * 1000))
        time.sleep(timeout)
        try:  # is_running() compares the create time too: a reused pid reads as gone
            return not self.process.is_running() or self.process.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True


def _tell_ready() -> bool:
    try:
        os.write(1, b"\n")
    except OSError:  # nobody reads (the owner closed its end): nothing to tell
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    return True


def watch(owner_pid: int, tag: str, poll_s: float = POLL_S, grace_s: float = GRACE_S) -> None:
    """Record `owner_pid`'s descendants every `poll_s` until it exits, then end them all."""
    me = os.getpid()
    known: Snapshot = {}
    try:
        owner = _Owner(owner_pid)
        started = owner.process.create_time()
    except psutil.Error:
        owner = None
        started = time.time()
    # We are the owner's child: if our parent is someone else now, the owner died before we could look.
    if owner is not None and os.getppid() == owner_pid:
        told = False
        while True:
            fresh = _descendants(owner.process, me)
            for pid, ct in known.items():  # keep the escaped ones (their parent died) while they live
                if pid not in fresh and _same(pid, ct):
                    fresh[pid] = ct
            known = fresh
            if not told:  # start()'s pipe: tell ready() once, then hold nothing of the owner's
                told = _tell_ready()
            if owner.gone(poll_s):
                break
    sweep(known, tag, me, grace_s)
    remove_owned_temp(tag)  # nothing of the owner's is running now: nobody still writes or reads them
    unlink_orphaned_shm(since=started, wait_s=2 * grace_s)


def main(argv: list[str]) -> int:
    """`python eppo_envs/tools/teardown/watchdog.py OWNER_PID TAG [POLL_S GRACE_S]` (started by `start()`)."""
    owner, tag, *times = argv
    watch(int(owner), tag, *(float(t) for t in times))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
