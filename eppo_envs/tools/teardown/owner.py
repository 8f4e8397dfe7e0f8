"""The marker of the watched command a process runs under (`EPPO_OWNER_TAG`, set by eppo_envs/tools/teardown/watchdog.py's
`start()`), and temp names that carry it. The command's watchdog ends every process whose environment holds the
marker and removes every temp entry named with it, once the command has ended, however it ended. It lives here,
not in the trainer, because the envs' own processes and folders need it too (bubblewrap, Chromium profiles); the
watchdog script keeps its own copy of the variable's name (`reaper.TAG_ENV`), so that it starts without this
package."""

from __future__ import annotations

import os

OWNER_TAG_ENV = "EPPO_OWNER_TAG"  # space-separated markers, one per watched ancestor


def owned_prefix(prefix: str) -> str:
    """`prefix` ("eppo-weights-") with this command's marker: a temporary file or folder named so is removed by
    the command's watchdog once the command has ended, however it ended. Why: a maker killed before its clean-up
    (`kill -9`, the OOM killer, a Ray actor ended by `ray.kill` or killed while loading) leaves it behind, and some are
    big (a model copy per actor in /tmp; the learner's weights in /dev/shm, in RAM; a Chromium profile that a dying
    Chromium rewrites after its browser's reaper has removed it). Outside a watched command (no marker: a test, a
    library user) the prefix is unchanged."""
    tags = os.environ.get(OWNER_TAG_ENV, "").split()
    if not prefix.startswith("eppo-") or not tags:
        return prefix
    return f"{prefix}{tags[-1]}-"  # the innermost watched command: the first to end
