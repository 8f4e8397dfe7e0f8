"""The sandbox contains hostile programs, and the next run still works."""

from __future__ import annotations

import gc
import os
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from eppo_envs.tools import sandbox as sb
from eppo_envs.tools.sandbox import Limits, Sandbox, SandboxConfig, SandboxSetupError

needs_bwrap = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")
pytestmark = needs_bwrap

FAST = Limits(wall_s=3.0, cpu_s=3, memory_mb=512, processes=32)


@pytest.fixture(scope="module")
def box() -> Sandbox:
    return Sandbox(SandboxConfig(limits=FAST))


def run(box: Sandbox, code: str) -> sb.RunResult:
    return box.run(textwrap.dedent(code))


def assert_still_works(box: Sandbox) -> None:
    result = box.run("print(6 * 7)")
    assert (result.reason, result.stdout) == ("ok", "42\n"), result


def processes_with(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(entry.name)
        except OSError:
            continue
    return found


def test_plain_run_and_allowed_packages(box):
    result = run(box, "import numpy, sympy\nprint(int(numpy.arange(5).sum()), sympy.factor('x**2 - 1'))")
    assert result.reason == "ok" and result.exit_code == 0
    assert result.stdout == "10 (x - 1)*(x + 1)\n"


def test_error_reports_traceback(box):
    result = run(box, "print('before')\n1 / 0")
    assert result.reason == "error" and result.exit_code == 1
    assert result.stdout == "before\n" and "ZeroDivisionError" in result.stderr


def test_packages_outside_the_allow_list_are_hidden(box):
    result = run(box, "import torch")
    assert result.reason == "error" and "No module named 'torch'" in result.stderr


def test_infinite_loop_times_out(box):
    # The CPU limit sits well above the wall clock here: with the two equal, a quiet machine gives the loop a whole
    # core and SIGXCPU can land first (exit 152), which is the next test's case, not this one's.
    wall_only = Sandbox(SandboxConfig(limits=Limits(wall_s=2.0, cpu_s=30, memory_mb=512, processes=32)))
    result = wall_only.run("while True:\n    pass")
    assert result.reason == "timeout" and result.exit_code is None
    assert "wall-clock timeout" in result.stderr
    assert_still_works(wall_only)


def test_cpu_limit_stops_a_loop_before_the_wall_clock():
    tight = Sandbox(SandboxConfig(limits=Limits(wall_s=20.0, cpu_s=1)))
    result = tight.run("while True:\n    pass")
    assert result.reason == "timeout" and result.exit_code is not None  # ended by SIGXCPU, not by our kill


def test_fork_bomb_is_contained(box):
    result = run(box, """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """)
    assert result.reason in ("timeout", "killed")
    assert_still_works(box)


def test_memory_bomb(box):
    result = run(box, "blocks = []\nwhile True:\n    blocks.append(bytearray(50 << 20))")
    assert result.reason == "memory", result
    assert run(box, "x = bytearray(8 << 30)").reason == "memory"
    assert_still_works(box)


def test_huge_output_is_truncated_with_a_marker(box):
    result = run(box, "print('x' * 100_000)")
    assert result.reason == "ok" and result.stdout_truncated
    assert result.stdout.startswith("x" * 1000) and "output truncated" in result.stdout
    assert len(result.stdout) < FAST.output_bytes + 200
    flood = run(box, "while True:\n    print('y' * 10_000)")
    assert flood.reason == "killed" and flood.stdout_truncated
    assert_still_works(box)


def test_writing_outside_the_workdir_fails(box, tmp_path):
    target = tmp_path / "escaped.txt"
    result = run(box, f"""
        import os
        hits = []
        for path in ["/usr/evil", "/evil", "/opt/eppo-site/evil", {str(target)!r}, "/root/evil", "/proc/evil"]:
            try:
                with open(path, "w") as f:
                    f.write("pwned")
                hits.append(path)
            except OSError:
                pass
        open("inside.txt", "w").write("fine")
        print(hits, os.listdir("."))
    """)
    assert result.reason == "ok", result
    assert result.stdout.startswith("[] ") and "inside.txt" in result.stdout
    assert not target.exists()
    fresh = run(box, "import os\nprint(sorted(os.listdir('.')))")
    assert "inside.txt" not in fresh.stdout  # every run gets a fresh working directory


def test_host_files_are_not_visible(box):
    repo_file = Path(__file__).resolve()
    result = run(box, f"""
        import os
        seen = [p for p in ["/etc/passwd", "/etc/shadow", {str(repo_file)!r}, "/root/.bashrc", "/work",
                            "/home", "/var", {os.path.expanduser("~/.cache")!r}] if os.path.exists(p)]
        print(seen)
    """)
    assert (result.reason, result.stdout) == ("ok", "[]\n"), result


def test_no_network(box):
    result = run(box, """
        import socket
        for host in [("1.1.1.1", 80), ("127.0.0.1", 22)]:
            try:
                socket.create_connection(host, timeout=1)
                print("connected", host)
            except OSError:
                print("blocked")
    """)
    assert (result.reason, result.stdout) == ("ok", "blocked\nblocked\n"), result


def test_killing_the_parent_fails(box):
    result = run(box, """
        import os, signal
        for pid in (os.getppid(), 1):
            try:
                os.kill(pid, signal.SIGKILL)
                print("killed", pid)
            except OSError as exc:
                print(type(exc).__name__)
        try:
            os.kill(-1, signal.SIGKILL)  # everything it may signal: only processes of its own run
        except OSError:
            pass
        print("alive")
    """)
    assert (result.reason, result.stdout) == ("ok", "PermissionError\nPermissionError\nalive\n"), result
    assert_still_works(box)


def test_background_process_does_not_outlive_the_run(box):
    marker = "987654.321"
    result = run(box, f"""
        import subprocess
        subprocess.Popen(["/usr/bin/sleep", "{marker}"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print("started")
    """)
    assert (result.reason, result.stdout) == ("ok", "started\n"), result
    assert processes_with(marker) == []


def test_file_and_descriptor_limits(box):
    result = run(box, """
        import errno
        try:
            open("big", "wb").write(b"0" * (100 << 20))
        except OSError as exc:
            print("write", errno.errorcode[exc.errno])
        files = []
        try:
            while True:
                files.append(open("big" if False else __file__))
        except OSError as exc:
            print("open", errno.errorcode[exc.errno], len(files) < 100)
    """)
    assert result.reason == "ok", result
    lines = result.stdout.splitlines()
    assert lines[0] in ("write EFBIG", "write ENOSPC") and lines[1] == "open EMFILE True"


def test_parallel_runs_do_not_interfere(box):
    snippets = [f"import time\ntime.sleep(0.05)\nprint({i} * {i})" for i in range(8)]
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    with ThreadPoolExecutor(max_workers=3) as pool:
        bomb_future = pool.submit(box.run, bomb)
        results = list(pool.map(box.run, snippets))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(8)]
    assert all(r.reason == "ok" for r in results)
    assert bomb_future.result().reason in ("timeout", "killed")


def test_unsafe_mode_needs_an_explicit_opt_in(monkeypatch):
    monkeypatch.delenv(sb.UNSAFE_ENV, raising=False)
    with pytest.raises(SandboxSetupError, match="allow_unsafe"):
        Sandbox(SandboxConfig(backend="rlimit"))
    with pytest.warns(RuntimeWarning, match="UNSAFE"):
        unsafe = Sandbox(SandboxConfig(backend="rlimit", allow_unsafe=True, limits=FAST))
    result = unsafe.run("import numpy\nprint('hi')")
    assert (result.reason, result.stdout, result.backend) == ("ok", "hi\n", "rlimit")
    assert unsafe.run("import torch").reason == "error"
    site = unsafe.backend.site
    assert os.path.isdir(site)
    del unsafe
    gc.collect()
    assert not os.path.exists(site)  # its folder of package links goes with it, not left in /tmp


def test_missing_bubblewrap_refuses(monkeypatch):
    from eppo_envs.tools.sandbox import backends

    monkeypatch.setattr(backends.shutil, "which", lambda name: None)
    with pytest.raises(SandboxSetupError, match="bubblewrap"):
        Sandbox()


def test_bad_configuration_is_a_clear_error():
    with pytest.raises(SandboxSetupError, match="unknown sandbox backend"):
        Sandbox(SandboxConfig(backend="docker"))
    with pytest.raises(SandboxSetupError, match="not installed"):
        Sandbox(SandboxConfig(packages=("no_such_package_xyz",)))
    with pytest.raises(ValueError, match="wall_s"):
        Limits(wall_s=0)


SERVER = """
import os, sys
req, rep = int(sys.argv[1]), int(sys.argv[2])
print("hello on stdout")
buf = b""
while True:
    chunk = os.read(req, 4096)
    if not chunk:
        break
    buf += chunk
    while b"\\n" in buf:
        line, buf = buf.split(b"\\n", 1)
        os.write(rep, line[::-1] + b"\\n")
"""


def test_session_talks_line_by_line_and_keeps_output_apart(box):
    with box.open(SERVER) as session:
        session.send(b"abc", 2.0)
        assert session.receive(2.0) == b"cba"
        session.send(b"x" * 200_000, 2.0)  # larger than a pipe buffer: written while replies are read
        assert session.receive(2.0) == b"x" * 200_000
    result = session.close()
    assert result.reason == "ok" and result.stdout == "hello on stdout\n"


def test_session_deadlines_and_an_exiting_program(box):
    from eppo_envs.tools.sandbox.session import SessionClosed

    with box.open("import time\ntime.sleep(30)") as session:
        with pytest.raises(SessionClosed):
            session.receive(0.3)  # no reply in time; the session itself stays usable until closed
    assert session.close().wall_s < 2.5
    with box.open("import os\nos._exit(0)") as session:
        with pytest.raises(SessionClosed):
            session.receive(2.0)


def test_session_leaves_nothing_running(box):
    marker = "987655.321"
    code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        subprocess.Popen(["/usr/bin/sleep", "{marker}"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.write(int(sys.argv[2]), b"ok\\n")
        time.sleep(60)
    """)
    with box.open(code) as session:
        assert session.receive(3.0) == b"ok"
        deadline = time.monotonic() + 3.0
        while not processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(marker)  # the daemon runs while the session is open
    assert processes_with(marker) == []
    assert_still_works(box)


def test_bubblewrap_carries_the_watchdogs_marker_and_the_snippet_does_not(box, monkeypatch):
    # an owner killed while bwrap starts can leave the sandbox's pid 1 waiting forever; the owner's watchdog
    # (eppo_envs.tools.teardown.watchdog) finds what it must end by this marker in a process's environment
    from eppo_envs.tools.sandbox.backends import OWNER_TAG_ENV
    from eppo_envs.tools.teardown.watchdog import TAG_ENV

    assert OWNER_TAG_ENV == TAG_ENV
    monkeypatch.setenv(TAG_ENV, "eppo-test-marker")
    monkeypatch.setenv("EPPO_TEST_OWNER_SECRET", "x")  # the rest of the owner's environment stays out of bwrap's
    code = "import os, sys\nos.write(int(sys.argv[2]), repr(sorted(os.environ)).encode() + b'\\n')\nimport time\ntime.sleep(30)"
    with box.open(code) as session:
        snippet_env = session.receive(5.0).decode()
        bwrap_env = Path(f"/proc/{session.proc.pid}/environ").read_bytes().split(b"\0")
    assert b"EPPO_OWNER_TAG=eppo-test-marker" in bwrap_env and b"EPPO_TEST_OWNER_SECRET=x" not in bwrap_env
    assert "EPPO_OWNER_TAG" not in snippet_env and "PATH" in snippet_env
