"""What a sandbox run may use (`Limits`, `SandboxConfig`) and what it returns (`RunResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Reason = Literal["ok", "timeout", "memory", "killed", "error"]

# Packages importable inside the sandbox by default. sympy needs mpmath; numpy ships its BLAS in numpy.libs
# (sibling `<name>.libs` folders are bound automatically).
DEFAULT_PACKAGES: tuple[str, ...] = ("numpy", "sympy", "mpmath")

TRUNCATION_MARKER = "\n...[output truncated: {dropped} more bytes]"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run. The rlimits apply to every process the snippet starts."""

    wall_s: float = 10.0  # wall clock; past it the whole sandbox is killed (reason "timeout")
    cpu_s: int = 10  # RLIMIT_CPU, seconds of CPU time
    memory_mb: int = 1024  # RLIMIT_AS, address space per process
    open_files: int = 64  # RLIMIT_NOFILE
    file_size_mb: int = 16  # RLIMIT_FSIZE, largest file a process may write
    processes: int = 32  # RLIMIT_NPROC, processes/threads of the sandbox's user
    workdir_mb: int = 64  # size of the tmpfs working directory (bubblewrap only)
    output_bytes: int = 16_384  # kept per stream (stdout, stderr); the rest is dropped with a marker
    output_kill_bytes: int = 8 << 20  # a run printing more than this in total is killed (reason "killed")

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {value!r}")


@dataclass(frozen=True)
class SandboxConfig:
    """How to run untrusted Python. `backend` is chosen by name: "bwrap" (default) or "rlimit" (unsafe)."""

    limits: Limits = field(default_factory=Limits)
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    backend: str = "bwrap"
    # The rlimit-only backend does not isolate the filesystem or the network. It runs only with this set
    # (or EPPO_SANDBOX_UNSAFE=1 in the environment), and warns every time a sandbox is created with it.
    allow_unsafe: bool = False
    python: str | None = None  # interpreter to run; default: the one running EPPO (its real path)


@dataclass
class RunResult:
    """The outcome of one run. `reason` says why it ended; `exit_code` is None when it was killed."""

    stdout: str
    stderr: str
    exit_code: int | None
    reason: Reason
    wall_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    backend: str = "bwrap"

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def summary(self) -> str:
        """One line for logs and error messages."""
        return f"{self.reason} (exit {self.exit_code}, {self.wall_s:.3f}s, backend {self.backend})"
