"""How a run is launched: one backend per isolation mechanism, chosen by name.

`bwrap` (default): bubblewrap with new network, pid, ipc and uts namespaces (no network at all), a read-only view
of /usr, the interpreter and the allowed packages, a fresh size-limited tmpfs as working directory, and rlimits
set by util-linux's `prlimit`. As root, bwrap creates no user namespace (it would map the sandbox to root, which
is exempt from RLIMIT_NPROC); instead `setpriv` drops the snippet to an unprivileged per-run uid (see slots.py).
As a normal user, `--unshare-all` adds a user namespace, whose own process count RLIMIT_NPROC limits.

`rlimit` (unsafe, opt-in): the same rlimits and a temporary working directory, nothing else. It exists for
machines without bubblewrap and must be asked for explicitly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

from eppo_envs.tools.sandbox.config import Limits
from eppo_envs.tools.sandbox.layout import SITE_IN_SANDBOX, PythonLayout, SandboxSetupError
from eppo_envs.tools.teardown.owner import OWNER_TAG_ENV

WORKDIR = "/sandbox"  # the snippet's working directory inside bubblewrap
SCRIPT = "main.py"
PRLIMIT = "/usr/bin/prlimit"
SETPRIV = "/usr/bin/setpriv"


def rlimit_args(limits: Limits) -> list[str]:
    """`prlimit` options. CPU: soft limit sends SIGXCPU, the hard one a second later SIGKILL."""
    mb = 1 << 20
    return [
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--as={limits.memory_mb * mb}",
        f"--nofile={limits.open_files}",
        f"--fsize={limits.file_size_mb * mb}",
        f"--nproc={limits.processes}",
        "--core=0",
    ]


def sandbox_env(workdir: str, pythonpath: str) -> dict[str, str]:
    """The whole environment of the snippet: nothing of the host's leaks in."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONPATH": pythonpath,
        "PYTHONHASHSEED": "0",  # same snippet, same output (set iteration order)
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",  # output printed before a crash or a kill is not lost
        "OPENBLAS_NUM_THREADS": "1",  # BLAS threads would each reserve address space and count as processes
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


# The process watchdog's marker (eppo_envs/tools/teardown/owner.py). bubblewrap itself keeps it (its --clearenv gives
# the snippet none of it), so a bwrap left behind by an owner killed during its start-up is found and ended by the
# owner's watchdog: the parent-death signal can end the outer bwrap before the inner one (pid 1 of the sandbox) has
# asked for its own, which then waits for the outer one forever (rare: once among many killed owners).


def launcher_env() -> dict[str, str]:
    """bubblewrap's own environment: a plain PATH, and the owner's watchdog marker where it has one."""
    env = {"PATH": "/usr/bin:/bin"}
    if os.environ.get(OWNER_TAG_ENV):
        env[OWNER_TAG_ENV] = os.environ[OWNER_TAG_ENV]
    return env


@dataclass
class Launch:
    """A prepared command; `cleanup` runs after the process is gone."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    cwd: str | None = None
    env: dict[str, str] | None = None
    temp_dir: str | None = None
    info_fd: int | None = None  # read end of bwrap's --info-fd pipe (its JSON names the sandbox's pid 1)

    def close_child_ends(self) -> None:
        """Close our copies of the descriptors handed to the child (so pipes see EOF when it is done)."""
        for fd in self.pass_fds:
            os.close(fd)
        self.pass_fds = ()

    def cleanup(self) -> None:
        self.close_child_ends()
        if self.info_fd is not None:
            os.close(self.info_fd)
            self.info_fd = None
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


class BwrapBackend:
    name = "bwrap"
    safe = True

    def __init__(self, layout: PythonLayout) -> None:
        self.bwrap = shutil.which("bwrap") or ""
        if not self.bwrap:
            raise SandboxSetupError(
                "bubblewrap (bwrap) is not installed, so untrusted code cannot be isolated. Install it "
                "(`apt-get install bubblewrap`, done by `make install`), or opt in to the unsafe rlimit-only mode "
                "with SandboxConfig(backend='rlimit', allow_unsafe=True) (EPPO_SANDBOX_UNSAFE=1 can stand in for "
                "allow_unsafe=True, but the backend must still be named)."
            )
        self.layout = layout
        self.as_root = os.geteuid() == 0
        self._static = self._static_args()

    def _static_args(self) -> list[str]:
        lay = self.layout
        args = [self.bwrap, "--die-with-parent", "--new-session"]
        if self.as_root:
            args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for setpriv; it drops them all
        else:
            args += ["--unshare-all"]
        args += ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):  # merged-/usr symlinks, or real folders
            path = Path("/") / top
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        args += ["--proc", "/proc", "--dev", "/dev"]
        if not lay.prefix.startswith("/usr/") and lay.prefix != "/usr":
            # bwrap creates missing parents root-only (0700): the interpreter would then miss its own stdlib
            # and libpython (e.g. under /root/.pyenv) and silently fall back to /usr's.
            for parent in reversed(Path(lay.prefix).parents[:-1]):
                args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", lay.prefix, lay.prefix]
        for hidden in lay.hidden_site_dirs:
            args += ["--tmpfs", hidden]
        args += ["--perms", "0755", "--dir", SITE_IN_SANDBOX]  # bwrap would create it root-only (0700)
        for host_path, name in lay.packages:
            args += ["--ro-bind", host_path, f"{SITE_IN_SANDBOX}/{name}"]
        args += ["--symlink", WORKDIR, "/tmp", "--chdir", WORKDIR, "--clearenv"]
        for key, value in sandbox_env(WORKDIR, SITE_IN_SANDBOX).items():
            args += ["--setenv", key, value]
        return args

    def prepare(self, code: str, limits: Limits, uid: int | None, args: tuple[str, ...] = ()) -> Launch:
        # The snippet reaches the sandbox through a memfd that bwrap copies into the tmpfs: nothing on host disk.
        fd = os.memfd_create("eppo-snippet", os.MFD_CLOEXEC)
        os.write(fd, code.encode("utf-8", errors="replace"))
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
        info_read, info_write = os.pipe2(os.O_CLOEXEC)
        os.set_inheritable(info_write, True)
        argv = [*self._static, "--info-fd", str(info_write)]
        argv += ["--perms", "1777", "--size", str(limits.workdir_mb << 20), "--tmpfs", WORKDIR]
        argv += ["--perms", "0444", "--file", str(fd), f"{WORKDIR}/{SCRIPT}"]
        argv += ["--", PRLIMIT, *rlimit_args(limits), "--"]
        if uid is not None:
            argv += [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                     "--bounding-set=-all", "--"]
        argv += [self.layout.executable, "-s", "-B", SCRIPT, *args]
        return Launch(argv, pass_fds=(fd, info_write), env=launcher_env(), info_fd=info_read)

    def probe(self) -> str | None:
        """Run `true`-like Python once; return an error message when bubblewrap cannot work here."""
        launch = self.prepare("pass\n", Limits(), 65534 if self.as_root else None)
        try:
            proc = subprocess.run(launch.argv, pass_fds=launch.pass_fds, capture_output=True, timeout=30,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            launch.cleanup()
        if proc.returncode != 0:
            return proc.stderr.decode(errors="replace").strip()[-500:] or f"exit status {proc.returncode}"
        return None


class RlimitBackend:
    """UNSAFE: rlimits and a temporary directory only; the snippet can read host files and use the network."""

    name = "rlimit"
    safe = False

    def __init__(self, layout: PythonLayout) -> None:
        self.layout = layout
        # A folder of symlinks to the allowed packages keeps the import path to the allow-list.
        self.site = tempfile.mkdtemp(prefix="eppo-unsafe-site-")
        # Removed when the backend is collected or the interpreter exits: one folder per Sandbox, never left in /tmp.
        self._remove_site = weakref.finalize(self, shutil.rmtree, self.site, True)
        for host_path, name in layout.packages:
            os.symlink(host_path, os.path.join(self.site, name))
        self.prlimit = shutil.which("prlimit")

    def prepare(self, code: str, limits: Limits, uid: int | None, args: tuple[str, ...] = ()) -> Launch:
        workdir = tempfile.mkdtemp(prefix="eppo-unsafe-run-")
        Path(workdir, SCRIPT).write_text(code, encoding="utf-8", errors="replace")
        argv = [self.layout.executable, "-s", "-B", SCRIPT, *args]
        if self.prlimit:
            argv = [self.prlimit, *rlimit_args(limits), "--", *argv]
        return Launch(argv, cwd=workdir, env=sandbox_env(workdir, self.site), temp_dir=workdir)

    def probe(self) -> str | None:
        return None


BACKENDS: dict[str, type[BwrapBackend] | type[RlimitBackend]] = {"bwrap": BwrapBackend, "rlimit": RlimitBackend}
