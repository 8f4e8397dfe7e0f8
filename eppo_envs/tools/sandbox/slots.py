"""Unprivileged user ids for sandboxed processes when EPPO runs as root.

Root is exempt from RLIMIT_NPROC, so a fork bomb run as root would not be stopped. Each concurrent run therefore
takes a *slot* (an exclusive `flock` on a file, so it works across threads and processes) and runs as user
`BASE_UID + slot`: the process limit then counts only that run's processes, and parallel runs cannot starve each
other.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

BASE_UID = 200_000  # far above any uid a Debian system hands out
NUM_SLOTS = 64
_LOCK_DIR = os.path.join(tempfile.gettempdir(), "eppo-sandbox-slots")
_local_next = threading.local()


def _open_lock(slot: int) -> int:
    os.makedirs(_LOCK_DIR, mode=0o700, exist_ok=True)
    return os.open(os.path.join(_LOCK_DIR, f"{slot:02d}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextmanager
def uid_slot() -> Iterator[int]:
    """Hold a free slot for the duration of a run; yields the uid to run as."""
    start = getattr(_local_next, "value", (os.getpid() * 7 + threading.get_ident()) % NUM_SLOTS)
    fd = -1
    for attempt in range(NUM_SLOTS * 50):
        slot = (start + attempt) % NUM_SLOTS
        fd = _open_lock(slot)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            os.close(fd)
            fd = -1
            if attempt % NUM_SLOTS == NUM_SLOTS - 1:  # every slot busy: wait a little and go round again
                time.sleep(0.01)
    if fd < 0:
        raise RuntimeError(f"all {NUM_SLOTS} sandbox slots stayed busy")
    _local_next.value = slot  # reuse the same slot next time from this thread (cheap, usually free)
    try:
        yield BASE_UID + slot
    finally:
        os.close(fd)  # closing releases the lock
