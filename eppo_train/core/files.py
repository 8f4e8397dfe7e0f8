"""Files a kill must never leave half-written: write a temporary file beside the target, then rename it over.

A rename within one folder is atomic, so a reader (a resumed run, a study that skips finished runs) sees the old
content or the new one, never an empty or truncated file: `Path.write_text` truncates first, and a Ctrl-C or
SIGTERM that lands between its truncate and its write would leave a run's `latest` marker empty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_json_atomic(path: Path, data: Any, indent: int = 1) -> None:
    write_text_atomic(path, json.dumps(data, indent=indent) + "\n")
