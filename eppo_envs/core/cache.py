"""Where built data lives: catalogues, generated problems and search indexes are built once, then reused.

`$EPPO_CACHE_DIR` (default `~/.cache/eppo`) holds one folder per artefact. Builders write into a temporary folder
and rename it into place, so an interrupted build never leaves a half-written cache behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    root = Path(os.environ.get("EPPO_CACHE_DIR", Path.home() / ".cache" / "eppo"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def cached_dir(name: str, build: Callable[[Path], None]) -> Path:
    """Return `cache_root()/name`, calling `build(tmp_dir)` first if it does not exist yet."""
    target = cache_root() / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: keep theirs
            if not target.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
