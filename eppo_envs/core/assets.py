"""Shipped data files (vocabularies, word lists, templates) under the project's top-level `assets/`.

In a source checkout or an editable install the folder is `assets/` beside the packages; a wheel installs it as
data files under `<prefix>/share/eppo/assets/` (pyproject.toml, `[tool.setuptools.data-files]`).
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

_CANDIDATES = (
    Path(__file__).resolve().parents[2] / "assets",  # the checkout: eppo_envs/core/assets.py -> <root>/assets
    Path(sys.prefix) / "share" / "eppo" / "assets",  # a wheel's data files
)


def asset_path(*parts: str) -> Path:
    """The path of a shipped file, e.g. `asset_path("webshop", "vocab.json")`."""
    for root in _CANDIDATES:
        path = root.joinpath(*parts)
        if path.is_file():
            return path
    raise FileNotFoundError(f"shipped data file {'/'.join(parts)} not found under {' or '.join(map(str, _CANDIDATES))}"
                            " (reinstall the package)")


@cache
def load_json(*parts: str) -> Any:
    return json.loads(asset_path(*parts).read_text(encoding="utf-8"))
