"""A game's PDDL problem translated by fast-downward once, kept compressed in memory and on disk.

Translating an ALFWorld problem to SAS (`fast_downward.pddl2sas`) is pure Python and takes ~0.3 s on the 2-core
machine: it is most of a cold reset, and the stock `PddlEnv` does it four times per game (twice in `load`, twice in
`reset`). The result depends only on (domain, problem), so it is computed once and stored as JSON + zlib (an
ALFWorld SAS task is ~0.5 MB of text, ~25 kB compressed) under `$EPPO_CACHE_DIR/alfworld/sas-v1/`, keyed by the
SHA-256 of the inputs and of the fast_downward version. `EPPO_ALFWORLD_DISK_CACHE=0` keeps it in memory only.
Files are written to a temporary name and renamed, so concurrent workers never read half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import zlib
from dataclasses import asdict, dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import fast_downward

from eppo_envs.alfworld import grounding
from eppo_envs.alfworld.sources import choose_source
from eppo_envs.core.cache import cache_root

CACHE_NAME = "alfworld/sas-v1"


class ArgvGuard:
    """fast_downward's translator overwrites `sys.argv`; give the caller's back."""

    def __enter__(self) -> None:
        self._argv = list(sys.argv)

    def __exit__(self, *exc: object) -> None:
        sys.argv[:] = self._argv


@cache
def _fd_version() -> str:
    try:
        return version("fast-downward-textworld")
    except PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class Translation:
    """What PddlState takes from the translator: the SAS text and the parsed task's objects, init, actions, types."""

    sas: str
    objects: dict[str, str]  # name -> type
    init: list[tuple[str, list[str]]]  # (predicate, argument names), filtered as PddlState._atom2proposition does
    params: dict[str, list[tuple[str, str]]]  # action -> [(placeholder name, type)]
    types: list[tuple[str, list[str]]]  # (type, supertypes), in the task's order


def translate(domain: str, problem: str, optimize: bool = False) -> Translation:
    """fast_downward.pddl2sas, kept to what the engine reads (`optimize`: the planner's translation). The
    unoptimised one (every reset's) is `grounding.pddl2sas`: the same SAS text, its relaxed exploration faster."""
    with ArgvGuard():
        if optimize:
            task, sas = fast_downward.pddl2sas(domain, problem, optimize=True)
        else:
            task, sas = grounding.pddl2sas(domain, problem)
    init: list[tuple[str, list[str]]] = []
    for atom in task.init:  # PddlState.__init__'s _atom2proposition
        if isinstance(atom, fast_downward.translate.pddl.conditions.Atom):
            if atom.predicate != "=":
                init.append((atom.predicate, list(atom.args)))
        elif isinstance(atom, fast_downward.translate.pddl.f_expression.Assign):
            name = f"{atom.expression.value}"
            if atom.fluent.symbol != "total-cost" and not name.isdigit():
                init.append((name, list(atom.fluent.args)))
    return Translation(
        sas=sas,
        objects={o.name: o.type_name for o in task.objects},
        init=init,
        params={a.name: [(p.name.strip("?"), p.type_name) for p in a.parameters] for a in task.actions},
        types=[(t.name, list(t.supertype_names)) for t in task.types],
    )


def _key(domain: str, problem: str, optimize: bool) -> str:
    h = hashlib.sha256()
    for part in (_fd_version(), "optimize" if optimize else "plain", domain, problem):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def _disk_enabled() -> bool:
    return os.environ.get("EPPO_ALFWORLD_DISK_CACHE", "1") not in ("0", "false", "no")


def _path(key: str) -> Path:
    return cache_root() / CACHE_NAME / key[:2] / f"{key}.json.z"


def encode(t: Translation) -> bytes:
    return zlib.compress(json.dumps(asdict(t)).encode("utf-8"), 6)


def decode(blob: bytes) -> Translation:
    data: dict[str, Any] = json.loads(zlib.decompress(blob))
    return Translation(data["sas"], data["objects"], [(p, list(a)) for p, a in data["init"]],
                       {k: [(n, t) for n, t in v] for k, v in data["params"].items()},
                       [(n, list(s)) for n, s in data["types"]])


def cached_translation(domain: str, problem: str, optimize: bool = False) -> tuple[Translation, bytes]:
    """The translation (from disk when it was made before on this machine) and its compressed form (b"" when the
    disk cache is off)."""
    key = _key(domain, problem, optimize)
    path = _path(key)
    if _disk_enabled() and path.exists():
        try:
            blob = path.read_bytes()
            return decode(blob), blob
        except (OSError, ValueError, zlib.error, KeyError):
            pass  # unreadable: translate again and overwrite
    t = translate(domain, problem, optimize)
    if not _disk_enabled():
        return t, b""  # nothing will read the compressed form (encoding it costs ~5 ms)
    blob = encode(t)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs speed
    return t, blob


def _warm_one(game: str | dict[str, Any]) -> bool:
    """Translate one game into the disk cache; True when it was not there yet."""
    if isinstance(game, str):
        game = json.loads(Path(game).read_text())
    existed = _path(_key(game["pddl_domain"], game["pddl_problem"], False)).exists()
    cached_translation(game["pddl_domain"], game["pddl_problem"])
    return not existed


def main(argv: list[str] | None = None) -> int:
    """Fill the disk cache ahead of time, so that no reset ever pays for a translation (cold resets)."""
    import argparse
    from multiprocessing import Pool


    parser = argparse.ArgumentParser(description="Translate ALFWorld games into the disk cache ahead of time "
                                                 f"($EPPO_CACHE_DIR/{CACHE_NAME}, ~25 kB a game, ~0.3 s each).")
    parser.add_argument("--split", nargs="+", default=["valid_unseen"], choices=["train", "valid_seen", "valid_unseen"])
    parser.add_argument("--data-path", default=None, help="official ALFWorld data (default: the generated games)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = parser.parse_args(argv)
    if not _disk_enabled():
        print("EPPO_ALFWORLD_DISK_CACHE is off: nothing to fill")
        return 1
    try:
        source = choose_source(args.data_path)
    except ValueError as exc:
        print(exc)
        return 2
    for split in args.split:
        games = [source.get(split, i).game for i in range(source.count(split))]
        with Pool(max(1, args.jobs)) as pool:
            new = sum(pool.imap_unordered(_warm_one, games, chunksize=4))
        print(f"{split}: {len(games)} games, {new} translated now, {len(games) - new} already cached")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
