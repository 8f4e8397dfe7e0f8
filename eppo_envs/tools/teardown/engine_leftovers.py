"""What a vLLM engine leaves behind when its start fails or its process is killed, and how `VLLMPolicy` avoids it
(the second with `policy/vllm.py`'s `engine_temp`).

- A failed start's ZeroMQ sockets (`close_zmq_left_by`): when vLLM's engine client cannot bind or connect one of its
  sockets (an ipc path over ZeroMQ's 107 bytes, a folder gone), `make_zmq_socket` raises without closing the socket
  it made, and the client's context is never terminated. Both stay reachable from the error's frames; once the error
  is dropped (pytest drops a failed fixture's at the end of the module), the garbage collector may finalize the
  context first, after clearing its weak list of sockets, and `Context.term` then waits forever for the socket
  nobody closed: the next `gc.collect()` (or an automatic collection) hangs the process.
- The engine's rendezvous file (`engine_temp`): vLLM's executor names torch.distributed's `FileStore`
  `<temp folder>/vllm_dist_<uuid4>` (~2.4 KB); only the engine's clean shutdown removes it, so every SIGKILLed engine
  (`kill -9`, the OOM killer) would leave one in /tmp, with nothing in its name to tell the watchdog whose it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def close_zmq_left_by(exc: BaseException) -> int:
    """Close every ZeroMQ socket and terminate every context that the frames of `exc` (and of the errors it chains)
    hold, with no linger; how many contexts were terminated. Only objects of the failed call are touched: the process's
    shared `zmq.Context.instance()` and shadows (views of a socket owned elsewhere) are left alone."""
    try:
        import zmq
    except ImportError:  # no pyzmq: vLLM did not get far enough to make a socket
        return 0
    found: dict[int, Any] = {}
    for value in _frame_values(exc):
        if isinstance(value, zmq.Socket | zmq.Context) and not value._shadow:
            found[id(value)] = value
            if isinstance(value, zmq.Socket):
                found.setdefault(id(value.context), value.context)
    ended = 0
    for value in found.values():  # sockets first: a context terminates once all its sockets are closed
        if isinstance(value, zmq.Socket) and not value.closed:
            _quietly(value.close, linger=0)
    for value in found.values():
        if isinstance(value, zmq.Context) and not value.closed and value is not zmq.Context._instance:
            _quietly(value.destroy, linger=0)  # closes any socket of it still open (its weak list is intact now)
            ended += 1
    return ended


def _frame_values(exc: BaseException) -> Iterator[Any]:
    """The local variables of every frame in the traceback of `exc`, and in those of the errors it chains that were
    caught inside the same call (an error the caller was handling when it made the call is none of the call's)."""
    frames: dict[int, Any] = {}
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        tb = error.__traceback__
        if tb is None or (error is not exc and id(tb.tb_frame) not in frames):
            continue
        while tb is not None:
            frames[id(tb.tb_frame)] = tb.tb_frame
            tb = tb.tb_next
        pending += [error.__cause__, error.__context__]
    for frame in frames.values():
        yield from frame.f_locals.values()


def _quietly(method: Any, **kwargs: Any) -> None:
    """A clean-up step that must not replace the start's own error with its own."""
    try:
        method(**kwargs)
    except Exception:  # noqa: BLE001  (the start's error is the one to report)
        pass
