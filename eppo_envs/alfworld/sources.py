"""Where games come from: our generated problems (the default) or the official ALFWorld game files.

Both give, for `(split, index)`, a game in ALFWorld's JSON format and a little metadata (task type, description).
The official files are used when the user points at them (`data_path=...`, or `ALFWORLD_DATA` holding
`json_2.1.1/`); they are discovered the way alfworld's `AlfredTWEnv.collect_game_files` does (solvable games only,
no "movable"/"Sliced" trials) but need no `traj_data.json`. Nothing is ever downloaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from eppo_envs.alfworld.generator import game_file, load_specs, render_problem
from eppo_envs.alfworld.tasks import TASK_TYPES


@dataclass(frozen=True)
class GameRef:
    game: str | dict[str, Any]  # a path to a game.tw-pddl file, or its content
    task_type: str
    name: str
    focus_problem: str | None = None  # the same problem without bystander objects, for the expert's planner


class GameSource(Protocol):
    name: str

    def count(self, split: str) -> int: ...

    def get(self, split: str, index: int) -> GameRef: ...

    def task_types(self, split: str) -> tuple[str, ...]: ...


class GeneratedGames:
    """Problems generated from the floorplans bundled in `alfworld` (see generator.py)."""

    name = "generated"

    def count(self, split: str) -> int:
        return len(load_specs(split))

    def get(self, split: str, index: int) -> GameRef:
        spec = load_specs(split)[index]
        name = f"{split}_{index}"
        focus = render_problem(spec, name, focus=True)
        return GameRef(game_file(spec, name), spec.task_type, f"FloorPlan{spec.floorplan}", focus)

    def task_types(self, split: str) -> tuple[str, ...]:
        return tuple(spec.task_type for spec in load_specs(split))


def _task_type_of(path: Path) -> str:
    """ALFWorld names trial folders "<task_type>-<object>-<mrecep>-<parent>-<floorplan>/trial_..."."""
    for part in reversed(path.parts):
        prefix = part.split("-", 1)[0]
        if prefix in TASK_TYPES:
            return prefix
    return "unknown"


@lru_cache(maxsize=8)
def _collect(folder: str) -> tuple[tuple[str, str], ...]:
    found = []
    for root, _dirs, files in os.walk(folder):
        if "game.tw-pddl" not in files or "movable" in root or "Sliced" in root:
            continue
        path = Path(root) / "game.tw-pddl"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not data.get("solvable", False):
            continue
        found.append((str(path), data.get("task_type") or _task_type_of(path)))
    return tuple(sorted(found))


class OfficialGames:
    """ALFWorld's own game files under `root` (`root/json_2.1.1/<split>/...` or `root/<split>/...`)."""

    name = "official"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()

    def folder(self, split: str) -> Path:
        for candidate in (self.root / "json_2.1.1" / split, self.root / split):
            if candidate.is_dir():
                return candidate
        raise ValueError(f"ALFWorld data at {self.root} has no {split!r} split (looked for json_2.1.1/{split}/)")

    def _games(self, split: str) -> tuple[tuple[str, str], ...]:
        games = _collect(str(self.folder(split)))
        if not games:
            raise ValueError(f"no solvable game.tw-pddl files under {self.folder(split)}")
        return games

    def count(self, split: str) -> int:
        return len(self._games(split))

    def get(self, split: str, index: int) -> GameRef:
        path, task_type = self._games(split)[index]
        return GameRef(path, task_type, str(Path(path).parent.relative_to(self.folder(split))))

    def task_types(self, split: str) -> tuple[str, ...]:
        return tuple(task_type for _path, task_type in self._games(split))


def choose_source(data_path: str | os.PathLike[str] | None = None) -> GameSource:
    """Official files when asked for (or when `ALFWORLD_DATA` holds them), else generated problems."""
    if data_path is not None:
        if not Path(data_path).expanduser().is_dir():
            raise ValueError(f"ALFWorld data_path {data_path!s} is not a folder")
        return OfficialGames(data_path)
    env_root = os.environ.get("ALFWORLD_DATA")
    if env_root and (Path(env_root).expanduser() / "json_2.1.1").is_dir():
        return OfficialGames(env_root)
    return GeneratedGames()
