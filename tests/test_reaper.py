"""The watchdog `guard()` starts (eppo_envs/tools/teardown/watchdog.py), on real processes: SIGKILL a command and every process it
started is gone seconds later, however it was started (an env-less helper like Chromium's, a grandchild, a process
in a session of its own that ignores SIGTERM, a fork without exec like a multiprocessing worker, a double-forked
orphan); a normal exit leaves neither leftovers nor the watchdog; a reused pid is never signalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
from test_interrupt import Command, _alive

from eppo_envs.tools.teardown import watchdog

# A command: guard() like eppo-train's, then children of every kind, their pids on stdout, then it waits to be killed.
OWNER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from eppo_envs.tools.teardown import watchdog
    from eppo_train.runtime.interrupt import guard

    PY = sys.executable
    with guard("owner", lambda: "rerun"):
        watchdog.ready(60)  # the watchdog has recorded the tree once: what is started from now on is new
        pids = {"watchdog": watchdog.watchdog_pid()}
        # no marker in its environment (Chromium starts its helpers with a filtered one): only the snapshots see it
        pids["env_less"] = subprocess.Popen(["sleep", "300"], env={}).pid
        nested = subprocess.Popen([PY, "-c", "import subprocess as s; p = s.Popen(['sleep', '300']); "
                                   "print(p.pid, flush=True); p.wait()"], stdout=subprocess.PIPE, text=True)
        pids["child"], pids["grandchild"] = nested.pid, int(nested.stdout.readline())
        # leaves the process group and the session, and ignores SIGTERM: only SIGKILL ends it
        pids["detached"] = subprocess.Popen([PY, "-c", "import os, signal, time; os.setsid(); "
                                             "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"]).pid
        pid = os.fork()  # no exec: its /proc environ is ours as we were started, without the marker
        if pid == 0:
            time.sleep(300)
            os._exit(0)
        pids["forked"] = pid
        # a double fork: orphaned (parent: init) before any snapshot can see it; found by the marker
        pids["orphan"] = int(subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"],
                                            capture_output=True, text=True).stdout)
        time.sleep(2.5 * watchdog.POLL_S)  # the watchdog has recorded the tree at least once
        print(json.dumps(pids), flush=True)
        if sys.argv[1:] == ["exit"]:
            sys.exit(0)  # a normal exit with all of them still running
        time.sleep(300)
""")


def _owner(tmp_path: Path) -> None:
    (tmp_path / "owner.py").write_text(OWNER)


def _started(cmd: Command) -> dict[str, psutil.Process]:
    """The command's processes, by role, from the line it prints once it has started them all."""
    assert cmd.proc.stdout is not None
    pids = json.loads(cmd.proc.stdout.readline() or "{}")
    assert set(pids) == {"watchdog", "env_less", "child", "grandchild", "detached", "forked", "orphan"}, cmd.err
    # no watchdog: None, left out (psutil.Process(None) is this test's own process)
    return {name: psutil.Process(pid) for name, pid in pids.items() if pid is not None}


def _left(procs: dict[str, psutil.Process]) -> list[str]:
    return [name for name, p in procs.items() if _alive(p)]


def _kill(procs: dict[str, psutil.Process]) -> None:
    """Without a watchdog they would run on: do not leave them to the next test."""
    for p in procs.values():
        try:
            if _alive(p):
                p.kill()
        except psutil.NoSuchProcess:
            continue


def test_sigkill_ends_every_descendant(tmp_path: Path):
    _owner(tmp_path)
    cmd = Command(["owner"], tmp_path)
    procs = _started(cmd)
    assert _left(procs) == list(procs)  # all started, all running
    assert procs["orphan"].ppid() != cmd.proc.pid  # really re-parented: no longer a descendant
    start = time.monotonic()
    try:
        rc, _, survivors = cmd.interrupt(signal.SIGKILL, group=False, within=watchdog.GRACE_S + 7)
        assert rc == -signal.SIGKILL
        assert not survivors, [(p.pid, p.name()) for p in survivors]
        assert not _left(procs), _left(procs)
        assert time.monotonic() - start < watchdog.GRACE_S + 7
    finally:
        _kill(procs)


def test_a_normal_exit_ends_leftovers_and_the_watchdog(tmp_path: Path):
    _owner(tmp_path)
    cmd = Command(["owner", "exit"], tmp_path)
    procs = _started(cmd)
    try:
        assert cmd.proc.wait(timeout=30) == 0, cmd.err[-2000:]
        deadline = time.monotonic() + watchdog.GRACE_S + 7
        while (left := _left(procs)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, left  # the watchdog among them: it exits once it has swept
    finally:
        _kill(procs)


def test_a_reused_pid_is_not_signalled():
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        created = psutil.Process(sleeper.pid).create_time()
        # the same pid recorded with another create time: what a pid reused by an unrelated process looks like
        assert not watchdog.signal_if_same(sleeper.pid, created - 1.0, signal.SIGKILL)
        time.sleep(0.2)
        assert sleeper.poll() is None
        assert watchdog.signal_if_same(sleeper.pid, created, signal.SIGKILL)
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert not watchdog.signal_if_same(sleeper.pid, created, signal.SIGKILL)  # gone (a zombie, then reaped)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_watchdog_starts_once_per_process_in_a_session_of_its_own():
    first = watchdog.start()  # this test process's own (guard() in test_cli.py starts it too)
    assert first is not None and watchdog.start() == first == watchdog.watchdog_pid()
    assert psutil.Process(first).ppid() == os.getpid() and os.getsid(first) == first
    assert watchdog.TAG_ENV in os.environ  # what this process starts from now on carries its marker
    assert watchdog.ready(60) and watchdog.ready(0)


def test_orphaned_shared_memory_is_removed_and_held_memory_kept():
    """A SIGKILLed vLLM engine leaves its message-queue segments in /dev/shm (RAM): the watchdog removes those
    created since its owner started that no live process holds, and leaves a segment a live process holds."""
    from multiprocessing import shared_memory

    since = time.time() - 1
    # a child that creates a segment and dies without unlinking it (SIGKILL; no resource tracker to clean up)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time
            from multiprocessing import resource_tracker, shared_memory
            shm = shared_memory.SharedMemory(create=True, size=4096)
            resource_tracker.unregister(shm._name, "shared_memory")
            print(shm.name, flush=True)
            time.sleep(300)
        """)], stdout=subprocess.PIPE, text=True)
    orphan = child.stdout.readline().strip()
    held = shared_memory.SharedMemory(create=True, size=4096)  # this (live) process holds it
    try:
        removed = watchdog.unlink_orphaned_shm(since)  # both are held while the child lives
        assert orphan not in removed and held.name not in removed
        child.kill()
        child.wait()
        assert Path("/dev/shm", orphan).exists()
        assert watchdog.unlink_orphaned_shm(time.time() + 60) == []  # nothing created before `since` is touched
        assert Path("/dev/shm", orphan).exists()
        removed = watchdog.unlink_orphaned_shm(since)
        assert orphan in removed and held.name not in removed
        assert not Path("/dev/shm", orphan).exists() and Path("/dev/shm", held.name).exists()
    finally:
        child.kill()
        held.close()
        held.unlink()


# Inside a watched command: a model copy an actor loads from, a checkpoint in transit, the weights on their way to
# the engine (in /dev/shm), each in its maker's `with` block when the command is SIGKILLed.
TEMP_OWNER = textwrap.dedent("""
    import json, time
    from contextlib import ExitStack
    import torch
    from eppo_envs.tools.teardown import watchdog
    from eppo_train.learner.workers import _node_local
    from eppo_train.runtime.interrupt import guard
    from eppo_train.policy.vllm import weights_file

    with guard("owner", lambda: "rerun"), ExitStack() as stack:
        watchdog.ready(60)
        paths = [stack.enter_context(_node_local({"model.safetensors": b"x" * 1000}, "eppo-learner-model-")),
                 stack.enter_context(weights_file({"w": torch.zeros(1000)}))]
        print(json.dumps(paths), flush=True)
        time.sleep(300)
""")


def test_temp_files_of_a_killed_command_are_removed(tmp_path: Path):
    """A model copy in /tmp (per Ray actor, as big as the model) and the learner's weights in /dev/shm (in RAM) are
    removed by their makers' `finally`, which a SIGKILL (the OOM killer, `ray.kill` of an actor still loading) never
    runs: the command's watchdog removes them then."""
    import tempfile

    (tmp_path / "owner.py").write_text(TEMP_OWNER)
    not_ours = tempfile.mkdtemp(prefix="eppo-learner-model-")  # another command's (here: no marker at all)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "owner.py")], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        paths = json.loads(proc.stdout.readline() or "[]")
        assert len(paths) == 2 and all(Path(p).exists() for p in paths), paths
        assert paths[1].startswith("/dev/shm/")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + watchdog.GRACE_S + 7
        while time.monotonic() < deadline and any(Path(p).exists() for p in paths):
            time.sleep(0.1)
        assert [p for p in paths if Path(p).exists()] == []
        assert Path(not_ours).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        import shutil

        shutil.rmtree(not_ours, ignore_errors=True)


def test_the_engine_socket_folder_fits_an_ipc_path(tmp_path, monkeypatch):
    """vLLM names its sockets "<folder>/<uuid4>" and ZeroMQ takes at most 107 bytes: under a long TMPDIR (pytest's
    tmp_path) with a watchdog's marker in the name, the engine would not start ("longer than 107 characters")."""
    import tempfile

    from eppo_envs.tools.teardown import watchdog
    from eppo_train.policy.vllm import IPC_FOLDER_MAX, socket_folder

    long_temp = tmp_path / ("x" * 60)
    long_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_temp))
    monkeypatch.setenv(watchdog.TAG_ENV, "0123456789abcdef")
    folder = socket_folder()
    try:
        assert len(folder) <= IPC_FOLDER_MAX and len(f"ipc://{folder}/{'0' * 36}") - len("ipc://") <= 107
        assert "0123456789abcdef" in folder  # the watchdog's marker kept where it fits: /tmp is short
    finally:
        os.rmdir(folder)
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    short = socket_folder()
    os.rmdir(short)
    assert short.startswith("/tmp/eppo-vllm-ipc-0123456789abcdef-")


def test_an_owned_folder_in_tmp_is_removed_under_another_temp_folder(tmp_path, monkeypatch):
    """Under a long TMPDIR (pytest's tmp_path) the engine's socket folder, with vLLM's rendezvous file in it, is made
    in /tmp; the watchdog looks there too, so the folder goes when the engine is killed."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    owned = tempfile.mkdtemp(prefix="eppo-vllm-ipc-0123456789abcdef-", dir="/tmp")
    other = tempfile.mkdtemp(prefix="eppo-vllm-ipc-fedcba9876543210-", dir="/tmp")  # another command's
    (Path(owned) / "vllm_dist_0").write_bytes(b"x" * 2423)
    try:
        assert watchdog.remove_owned_temp("0123456789abcdef") == [os.path.basename(owned)]
        assert not Path(owned).exists() and Path(other).exists()
    finally:
        import shutil

        shutil.rmtree(owned, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
