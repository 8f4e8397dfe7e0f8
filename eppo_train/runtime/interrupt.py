"""Ctrl-C and SIGTERM for the command-line tools: one line, exit 130, a resumable run, no processes left behind.

`guard(resume_hint)` wraps a command's work: SIGTERM is turned into the KeyboardInterrupt that Ctrl-C raises (so
both unwind through the same `finally` blocks that close env pools, Ray and engines), a second signal during that
cleanup is ignored, and whatever child processes survive the unwinding (a Ray raylet, a vLLM engine core, a
Chromium, a sandbox) are terminated, then killed. `where` says what was running for the one line, e.g.
`interrupted at stage 4/5 rl, iteration 3/6; resume with: make train ARGS="--resume runs/x"`.
A library may catch the KeyboardInterrupt and carry on (vLLM's engine start does, then waits minutes for its engine),
so the interrupt is raised again every `RESEND_S` until `guard()`'s own cleanup has begun.

Child processes that print their own shutdown story (vLLM's engine core and its workers: "Worker proc died
unexpectedly", a dump of the engine's config and scheduler, `RuntimeError: cancelled`: about 40 lines on a SIGINT
during a generate call) are started inside `relayed_child_output()`: what they write passes through this process,
which relays it until the interrupt arrives and drops it from then on, so the one line stays the last and only thing
the user reads.

`lose(reason)` stops the command the same way from another thread, for a death that no call of the main thread
would report in time (Ray's GCS: eppo_train/runtime/gcs_watch.py): the same clean-up, then `<prog>: error: <reason>; <hint>`
and exit 1, as for a WorkerLost.

None of that can run when the command itself is SIGKILLed (the OOM killer, `kill -9`) or crashes, so `guard()` also
starts the command's watchdog (`eppo_envs/tools/teardown/watchdog.py`, one small process per command): whenever the command ends,
however it ends, the watchdog terminates, then kills, every descendant the command had.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from eppo_envs.tools.teardown import watchdog

EXIT_INTERRUPTED = 130
EXIT_LOST = 1  # a component died under the command (WorkerLost, lose())
# What stops a guarded command with its one line: Ctrl-C, SIGTERM, and SIGHUP (its terminal or ssh session closed;
# the default action ends the command at once, exit 129, no line and no clean-up but the watchdog's).
_SIGNALS = (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))


class WorkerLost(RuntimeError):
    """A process the command works through died under it (a Ray actor killed, out of memory or with its node; the
    vLLM engine's process), or a Ray actor could not start: the command stops with this one line, exit 1, and a
    training run stands at its last checkpoint, resumable (the hint says how)."""

_where: dict[int, str] = {}  # nesting level -> what runs there: {0: "stage 4/5 rl", 1: "iteration 3/6"}


def set_where(level: int, text: str) -> None:
    """Record what is running at nesting `level` (0: stage, 1: step inside it, 2: ...); deeper levels are dropped
    (called from the main thread and from the RL progress watcher: each call is a few GIL-atomic dict operations)."""
    for deeper in [k for k in _where.copy() if k > level]:
        _where.pop(deeper, None)
    _where[level] = text


def where() -> str:
    snapshot = _where.copy()  # one C call: safe against the watcher thread
    return ", ".join(snapshot[k] for k in sorted(snapshot)) or "start-up"


RESEND_S = 1.0  # how often a swallowed interrupt is raised again
_unwinding = threading.Event()  # set once guard() has begun its cleanup (or its body ended)
_interrupted = threading.Event()  # set the moment a SIGINT/SIGTERM arrives: child output is dropped from then on
_resender: threading.Thread | None = None


def _raise_interrupt(signum: int, frame) -> None:
    global _resender
    _interrupted.set()
    # From here the command's one line is what its user reads: a library unwinding the interrupt may log an error
    # with its traceback (selenium: "Error stopping service after a failed start", when the Ctrl-C lands while
    # chromedriver starts)
    logging.disable(logging.CRITICAL)
    if _resender is None or not _resender.is_alive():
        _resender = threading.Thread(target=_resend, args=(signum,), name="interrupt-resend", daemon=True)
        _resender.start()
    raise KeyboardInterrupt


def _resend(signum: int) -> None:
    """Raise the interrupt again every RESEND_S until guard() is cleaning up (it then ignores the signal). Why: code
    that catches KeyboardInterrupt would otherwise lose it — vLLM's engine start does (its `zmq_socket_ctx` swallows
    it, then the client waits up to 10 minutes for the engine's ready message), so a single SIGTERM during an
    engine's start goes unanswered until the engine is up (docs/pipeline.md, Interrupts)."""
    while not _unwinding.wait(RESEND_S):
        signal.pthread_kill(threading.main_thread().ident, signum)


_guarding = threading.Event()  # set while a guard() body runs
_lost: list[str] = []  # why lose() stopped the command: guard() says it as its error line
# After lose(), between SIGTERM and SIGKILL of what is left: with the GCS dead, Ray's raylet and actors spend a
# SIGTERM trying to reach it (still alive 5 s later), and nothing of a run lives in them.
LOST_GRACE_S = 1.0


def guarding() -> bool:
    """Whether a guard() body is running and has not begun to unwind."""
    return _guarding.is_set() and not _unwinding.is_set()


def lose(reason: str) -> bool:
    """From any thread: stop the guarded command because something it cannot go on without died (`reason`, one
    line). It unwinds as from a SIGTERM, through the same clean-up, then prints `<prog>: error: <reason>; <hint>` and
    exits 1 (WorkerLost's line). An interrupt, not an exception of our own: the main thread may be blocked in
    `ray.get`, which ends early only for a KeyboardInterrupt (Ray's signal check drops any other exception). False
    (nothing done) outside a guard() body or once it unwinds."""
    if not guarding() or _lost:
        return False
    _lost.append(reason)
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
    return True


@contextmanager
def ray_init_signals() -> Iterator[None]:
    """Wrap `ray.init`: it takes SIGTERM from guard() twice over. While it starts, its Python handler turns SIGTERM
    into `sys.exit(15)` (a SystemExit that guard() does not handle); once connected, its core worker's C++ failure
    handler dumps a stack and aborts (exit 134, "*** SIGTERM received ***", Ray's processes left to the watchdog).
    Inside guard() the exit is the interrupt, and guard()'s handlers are put back afterwards (Python's signal.signal
    replaces the C++ one too)."""
    try:
        yield
    except SystemExit as exc:
        if _guarding.is_set() and exc.code == signal.SIGTERM:
            _raise_interrupt(signal.SIGTERM, None)
        raise
    finally:
        if _guarding.is_set() and not _unwinding.is_set() and threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                signal.signal(sig, _raise_interrupt)


def children_of(pid: int | None = None) -> list:
    import psutil

    try:
        return psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def reap_children(timeout: float = 5.0) -> None:
    """Terminate every descendant still alive (after the normal cleanup had its chance), then kill stragglers."""
    import psutil

    spare = watchdog.watchdog_pid()  # it ends what is left once we have exited; ending it now would gain nothing
    procs = [p for p in children_of() if p.pid != spare]
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=timeout)


def _quiet_cleanup() -> None:
    """Shut Ray down if this process started it (its workers would otherwise outlive us), without its logs.
    Not after lose(): what died may be Ray's GCS, and Ray's shutdown then waits on it (~7 s) and kills the raylet
    before its own children, which reap_children() then cannot find; it ends them all."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized() and not _lost:
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001  (best effort: the reaper below ends what is left)
            pass


# A terminal's Ctrl-C reaches the children too, and one may print before this process has run its handler: each
# relayed chunk waits this long for an interrupt before it is written.
RELAY_HOLD_S = 0.3


@contextmanager
def relayed_child_output() -> Iterator[None]:
    """Processes started inside this block write their stdout and stderr through pipes that this process relays to
    its own (their lines come out as before, RELAY_HOLD_S later) until an interrupt, and drops afterwards. This
    process's own writes go through the relay only while inside the block."""
    relays = []
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        try:
            stream.flush()
            original = os.dup(fd)
        except (OSError, ValueError):  # no such stream (a daemon, a closed fd): nothing to relay
            continue
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        thread = threading.Thread(target=_relay, args=(read_end, original), name=f"child-output-relay-{fd}",
                                  daemon=True)
        thread.start()
        relays.append((stream, fd, original))
    try:
        yield
    finally:
        for stream, fd, original in relays:
            stream.flush()
            os.dup2(original, fd)  # this process writes straight out again; the children keep the pipe


def _relay(read_end: int, out: int) -> None:
    """Copy from the children's pipe to `out` until every writer is gone (EOF); after an interrupt, read and drop
    (a full pipe would block a child in its shutdown)."""
    try:
        while chunk := os.read(read_end, 65536):
            if _interrupted.wait(RELAY_HOLD_S):
                continue
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
    except OSError:  # our own output went away (a closed pipe): stop relaying; the children get EPIPE
        pass
    finally:
        os.close(read_end)
        os.close(out)


def _say(line: str) -> None:
    """The one line on stderr; nothing where stderr is gone (a SIGHUP's closed terminal: EIO)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def lost_line(prog: str, reason: str, hint: str) -> str:
    """The one line a command prints when a process it works through died under it (`WorkerLost`, `lose()`)."""
    return f"{prog}: error: {reason}; {hint}"


@contextmanager
def guard(prog: str, resume_hint: Callable[[], str]) -> Iterator[None]:
    """Run the body; on SIGINT/SIGTERM print `interrupted at ...; <resume_hint()>` and exit 130 (after lose():
    `error: <reason>; <resume_hint()>`, exit 1)."""
    _where.clear()
    _lost.clear()
    watchdog.start()  # first: whatever the body starts is watched, even if this process is SIGKILLed
    _unwinding.clear()
    _interrupted.clear()
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in _SIGNALS}
    _guarding.set()
    try:
        yield
    except KeyboardInterrupt:
        # Ignore further signals while cleaning up: a second Ctrl-C must not leave half-closed workers behind.
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        _unwinding.set()
        _quiet_cleanup()
        reap_children(LOST_GRACE_S if _lost else 5.0)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # a closed terminal
            pass
        hint = resume_hint()  # first: it may look at the run dir and refine `where`
        if _lost:  # lose(): not the user's interrupt but a component's death
            _say(lost_line(prog, _lost[0], hint))
        else:
            _say(f"{prog}: interrupted at {where()}; {hint}")
        # Exit now: interpreter shutdown would run atexit hooks (Ray's, tqdm's) that can print or hang.
        os._exit(EXIT_LOST if _lost else EXIT_INTERRUPTED)
    finally:
        _unwinding.set()
        _guarding.clear()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if _interrupted.is_set():  # an interrupt the body caught and got over: its logging is back
            logging.disable(logging.NOTSET)
