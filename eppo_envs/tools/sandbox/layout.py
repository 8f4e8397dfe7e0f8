"""What the sandbox can see of the host: the interpreter, its standard library, and allow-listed packages only.

Everything is located once per (interpreter, package list): the real path of the interpreter (a venv's
`bin/python` is a symlink to a base install), the base install's prefix, the site folders of that base install
(hidden, so only allow-listed packages are importable), and the folder of each allowed package on the host.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SITE_IN_SANDBOX = "/opt/eppo-site"  # allowed packages are bound here, read-only, and put on PYTHONPATH


class SandboxSetupError(RuntimeError):
    """The sandbox cannot be set up as asked (missing bubblewrap, an unknown package, ...)."""


@dataclass(frozen=True)
class PythonLayout:
    executable: str  # real path of the interpreter binary
    prefix: str  # its install prefix (bound read-only: the stdlib lives under it)
    hidden_site_dirs: tuple[str, ...]  # site folders of the base install, masked with an empty tmpfs
    packages: tuple[tuple[str, str], ...]  # (host path, name under SITE_IN_SANDBOX) for each allowed package


def _package_paths(name: str) -> list[Path]:
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise SandboxSetupError(f"package {name!r} is allow-listed for the sandbox but is not installed")
    if spec.submodule_search_locations:
        paths = [Path(p) for p in spec.submodule_search_locations]
    elif spec.origin and spec.origin not in ("built-in", "frozen"):
        paths = [Path(spec.origin)]
    else:  # part of the interpreter itself: nothing to bind
        return []
    # Wheels built with auditwheel keep their shared libraries in a sibling `<name>.libs` folder.
    libs = paths[0].parent / f"{name}.libs"
    return paths + ([libs] if libs.is_dir() else [])


@lru_cache(maxsize=8)
def python_layout(python: str | None, packages: tuple[str, ...]) -> PythonLayout:
    """Locate the interpreter and the allowed packages (cached: this runs once per configuration)."""
    executable = os.path.realpath(python or sys.executable)
    if not os.access(executable, os.X_OK):
        raise SandboxSetupError(f"sandbox interpreter {executable!r} is not executable")
    prefix = str(Path(executable).parent.parent)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        f"{prefix}/lib/{version}/site-packages",
        f"{prefix}/local/lib/{version}/dist-packages",
        f"{prefix}/lib/python3/dist-packages",  # Debian's system python
        f"/usr/local/lib/{version}/dist-packages",
        "/usr/lib/python3/dist-packages",
    ]
    hidden = tuple(p for p in dict.fromkeys(candidates) if os.path.isdir(p))
    bound: list[tuple[str, str]] = []
    for name in packages:
        for path in _package_paths(name):
            bound.append((str(path), path.name))
    return PythonLayout(executable, prefix, hidden, tuple(bound))
