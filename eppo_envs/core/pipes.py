"""A command whose reader went away (`eppo-envs list | head -1`) stops quietly, as `seq 1 100000 | head -1` does:
left alone, Python raises BrokenPipeError at the print that finds the pipe closed (a traceback), or at the
interpreter's last flush of the buffered rest (exit status 1 and, at times, an "Exception ignored" line)."""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

SIGPIPE_STATUS = 141  # 128 + SIGPIPE: the status a shell shows for a command a closed pipe stopped


def stdout_closed() -> int:
    """Call on BrokenPipeError: points stdout at /dev/null (so the interpreter's last flush has nowhere to fail)
    and returns the exit status to end with."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (a test's capture): nothing to flush into
        pass
    return SIGPIPE_STATUS


def pipe_console(**kwargs: Any) -> Any:
    """A rich Console that leaves a closed pipe to the command: rich's own handling exits at once (status 1), past
    the command's handlers, so `eppo-eval --json out.json | head -3` would never write out.json. rich is imported
    here, not at the top: `eppo-train` imports `stdout_closed` on a GPU machine's bare bundle, which has no rich."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more to print
            raise BrokenPipeError(errno.EPIPE, "stdout's reader has gone")

    return PipeConsole(**kwargs)
