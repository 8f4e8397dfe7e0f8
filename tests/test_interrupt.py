"""Ctrl-C / SIGTERM on the real command-line tools, in real subprocesses: one line, exit 130, the printed resume
command continues the run, and no child process (Ray, env hosts) outlives the command. (A SIGKILLed command and its
watchdog: tests/test_reaper.py.)

Each command starts in its own session (start_new_session), so "Ctrl-C in the terminal" is a SIGINT to that
process group, and a survivor is any process still in that session or any descendant seen before the signal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _default_sigint() -> None:
    """In the child before exec: Ctrl-C's default action, even when this test runs under a shell that ignores
    SIGINT for background jobs (a process started with SIGINT ignored keeps ignoring it, as Unix intends)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Command:
    """A CLI in its own session, its stderr collected as it comes."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=_default_sigint)
        self.err = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read(1), ""):
            self.err += chunk

    def wait_for(self, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"exited early ({self.proc.returncode}): {self.err[-2000:]}"
            assert time.monotonic() < deadline, f"not ready in {timeout}s: {self.err[-2000:]}"
            time.sleep(0.2)

    def interrupt(self, sig: int, group: bool, within: float = 15.0) -> tuple[int, str, list[psutil.Process]]:
        """Send `sig` (to the whole process group when `group`), wait; (exit code, last stderr line, survivors:
        the processes of the command still alive `within` seconds after it exited). A deadline, not a speed check:
        the command's watchdog finishes off stragglers a second or two after it exits, and under load (a make-train
        run beside the suite) a Ray worker spawned during the shutdown may still be exiting at 3 s."""
        seen = psutil.Process(self.proc.pid).children(recursive=True)
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._reader.join(timeout=10)
        deadline = time.monotonic() + within
        while (survivors := _survivors(seen, self.proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.leftovers = [(p.pid, _cmdline(p)) for p in survivors]  # for the assertion's message
        for p in survivors:  # do not leave them to the next test
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        lines = [line for line in self.err.replace("\r", "\n").splitlines() if line.strip()]
        return self.proc.returncode, lines[-1] if lines else "", survivors


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()) or p.name()
    except psutil.Error:
        return "?"


def _survivors(seen: list[psutil.Process], sid: int) -> list[psutil.Process]:
    """Processes of `seen` still alive, and any process still in session `sid`."""
    survivors = [p for p in seen if _alive(p)]
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and _alive(p) and p not in survivors:
                survivors.append(p)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return survivors


# How long a stage may take before the test calls the command hung. A deadline, not a speed check: under a load of
# 5+ on 2 cores (a study run and a CI rehearsal beside it) a tiny Ray run can take over 300 s to its first iteration.
HUNG_S = 900


def _finish(args: list[str], cwd: Path, timeout: float = HUNG_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_ctrl_c_during_eppo_train_with_ray_then_resume(tmp_path: Path):
    run = tmp_path / "runs" / "tiny"
    cmd = Command(["eppo_train.cli", "--config", "tiny", "--set", f"run.out_dir={tmp_path / 'runs'}",
                   "--set", "sft.steps=0", "--set", "run.iterations=3", "--set", "run.plots=false",
                   "--set", "ray.enabled=true"], tmp_path)
    cmd.wait_for(lambda: (run / "latest").exists(), timeout=HUNG_S)  # one iteration done and saved
    rc, line, survivors = cmd.interrupt(signal.SIGINT, group=True)
    assert rc == 130, cmd.err[-3000:]
    assert re.fullmatch(rf"eppo-train: interrupted at {re.escape(str(run))}, iteration \d/3; "
                        rf"resume with: eppo-train --resume {re.escape(str(run))}", line), line
    assert "Traceback" not in cmd.err and "KeyboardInterrupt" not in cmd.err
    assert not survivors, [p.name() for p in survivors]  # raylet, gcs_server, the Ray actors: all gone
    done = int((run / "latest").read_text().strip().split("_")[1])
    assert done in (1, 2)
    resumed = _finish(["eppo_train.cli", "--resume", str(run)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3] and (run / "latest").read_text().strip() == "step_000003"


@pytest.mark.slow  # ~1-1.5 min: two pipeline runs
def test_sigterm_during_the_pipeline_then_resume(tmp_path: Path):
    run = tmp_path / "run"
    cmd = Command(["eppo_train.cli", "pipeline", "--config", "tiny", "--run-dir", str(run),
                   "--set", "sft.steps=5", "--set", "run.iterations=2", "--set", "ray.enabled=false",
                   "--set", "evaluation.episodes=3", "--set", "evaluation.max_turns=2", "--set", "run.plots=false"],
                  tmp_path)
    state = run / "pipeline.json"
    cmd.wait_for(lambda: state.exists() and "eval_sft" in json.loads(state.read_text())["done"], timeout=HUNG_S)
    before = json.loads(state.read_text())["done"]
    rc, line, survivors = cmd.interrupt(signal.SIGTERM, group=False)
    assert rc == 130, cmd.err[-3000:]
    assert re.fullmatch(rf'eppo-train: interrupted at stage [45]/5 (rl|eval_rl)(, .*)?; '
                        rf'resume with: make train ARGS="--resume {re.escape(str(run))}"', line), line
    assert "Traceback" not in cmd.err and not survivors
    resumed = _finish(["eppo_train.cli", "pipeline", "--resume", str(run)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads(state.read_text())["done"]
    assert list(after) == ["eval_base", "sft", "eval_sft", "rl", "eval_rl"]
    assert all(after[k] == before[k] for k in before)  # finished stages were kept, not redone
    assert "already done" in resumed.stderr and (run / "summary.md").exists()


def test_ctrl_c_during_eppo_eval(tmp_path: Path):
    args = ["eppo_train.eval", "--policy", "tiny", "--backend", "hf", "--tasks", "guess_number", "--import",
            "eppo_envs.example.guess_number", "--episodes", "2000", "--max-new-tokens", "8", "--batch-size", "16"]
    cmd = Command(args, tmp_path)
    cmd.wait_for(lambda: "eval:" in cmd.err and "/4000" not in cmd.err and re.search(r"\d+/2000", cmd.err),
                 timeout=120)
    rc, line, survivors = cmd.interrupt(signal.SIGINT, group=True)
    assert rc == 130
    assert re.fullmatch(r"eppo-eval: interrupted at episode \d+/2000; rerun with: eppo-eval --policy tiny --backend hf .*", line)
    assert "Traceback" not in cmd.err and not survivors


def test_sigterm_before_the_first_checkpoint_says_start_over(tmp_path: Path):
    run = tmp_path / "runs" / "tiny"
    cmd = Command(["eppo_train.cli", "--config", "tiny", "--set", f"run.out_dir={tmp_path / 'runs'}",
                   "--set", "sft.steps=0", "--set", "run.iterations=3", "--set", "ray.enabled=false"], tmp_path)
    cmd.wait_for(lambda: (run / "config.yaml").exists(), timeout=120)
    rc, line, survivors = cmd.interrupt(signal.SIGTERM, group=True)
    assert rc == 130 and not survivors and "Traceback" not in cmd.err
    assert "no checkpoint yet; start over with: eppo-train train --config tiny" in line
    assert line.endswith("--set run.overwrite=true")


@pytest.mark.parametrize("command", ["train", "eval"])
def test_sigterm_with_ray_is_one_line_not_rays_abort(tmp_path: Path, command: str):
    """ray.init takes SIGTERM: with Ray too, the command's one line, not its core worker's C++ handler printing
    '*** SIGTERM received ***' with a stack and aborting (exit 134), Ray's processes left to the watchdog."""
    if command == "train":
        args = ["eppo_train.cli", "--config", "tiny", "--set", f"run.out_dir={tmp_path / 'runs'}", "--set",
                "sft.steps=0", "--set", "ray.enabled=true"]
        ready = "ray::GeneratorWorker"
    else:
        args = ["eppo_train.eval", "--policy", "tiny", "--backend", "hf", "--tasks", "guess_number", "--import",
                "eppo_envs.example.guess_number", "--episodes", "2000", "--workers", "2", "--no-progress"]
        ready = "ray::EnvHost"
    cmd = Command(args, tmp_path)
    cmd.wait_for(lambda: any(ready in _cmdline(p) for p in psutil.Process(cmd.proc.pid).children(recursive=True)),
                 timeout=HUNG_S)
    rc, line, survivors = cmd.interrupt(signal.SIGTERM, group=False)
    assert rc == 130, (rc, cmd.err[-3000:])
    assert line.startswith(f"eppo-{command}: interrupted at "), line
    assert "SIGTERM received" not in cmd.err and "Traceback" not in cmd.err, cmd.err[-3000:]
    assert not survivors, cmd.leftovers


def test_a_sigterm_while_ray_starts_is_the_interrupt(tmp_path: Path):
    """While ray.init runs, Ray's own Python handler makes SIGTERM `sys.exit(15)`: a SystemExit that guard() let
    through (exit 15, no line). Here a stand-in for ray.init installs that handler and is signalled inside it."""
    proc = _guarded(tmp_path,
                    "    import os, signal, sys\n"
                    "    from eppo_train.runtime.interrupt import ray_init_signals\n"
                    "    with ray_init_signals():\n"
                    "        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does\n"
                    "        os.kill(os.getpid(), signal.SIGTERM)\n"
                    "        time.sleep(30)\n"
                    "    print('not interrupted', flush=True)\n")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "not interrupted" not in out, (proc.returncode, err)
    assert err.strip().splitlines() == ["prog: interrupted at start-up; resume with: nothing"], err


def test_guards_handlers_are_back_after_ray_init(tmp_path: Path):
    proc = _guarded(tmp_path,
                    "    import signal\n"
                    "    from eppo_train.runtime.interrupt import ray_init_signals\n"
                    "    with ray_init_signals():\n"
                    "        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what a connected core worker does\n"
                    "    print('initialised', flush=True)\n"
                    "    time.sleep(30)\n")
    assert proc.stdout.readline().strip() == "initialised"
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines() == ["prog: interrupted at start-up; resume with: nothing"], err


def _working_children(pid: int) -> list[psutil.Process]:
    """The command's descendants other than its watchdog (eppo_envs/tools/teardown/watchdog.py)."""
    return [p for p in psutil.Process(pid).children(recursive=True) if "watchdog.py" not in _cmdline(p)]


def test_ctrl_c_during_a_bench_section(tmp_path: Path):
    """A Ctrl-C inside a make bench section (`--only sandbox`) is one line, not a KeyboardInterrupt traceback: exit
    130, its sandboxes gone and the last results file left as it was."""
    out = tmp_path / "results.json"
    cmd = Command(["eppo_train.benchmarks", "--only", "sandbox", "--out", str(out)], tmp_path)
    # the sandbox runs its snippets (a bwrap child): wait for one, so that the Ctrl-C lands inside the section, not
    # in the bench's set-up
    cmd.wait_for(lambda: [p for p in _working_children(cmd.proc.pid) if "bwrap" in _cmdline(p)], timeout=120)
    rc, line, survivors = cmd.interrupt(signal.SIGINT, group=True)
    assert rc == 130 and not survivors, (cmd.err[-3000:], cmd.leftovers)
    assert line == (f"eppo-bench: interrupted at section 1/1 sandbox; {out} not written; "
                    f'rerun with: make bench ARGS="--only sandbox --out {out}"'), line
    assert "Traceback" not in cmd.err and not out.exists()


def test_ctrl_c_during_the_study_then_the_done_run_is_kept(tmp_path: Path):
    """make experiment-quick: after a Ctrl-C during its second run the interrupt line is the only one after the
    signal (no progress display's closing line such as '[  1m14s] finished: <results>' above it), and a second
    invocation skips the run that had finished."""
    tiny = ["sft.steps=0", "run.save_every=1", "evaluation.episodes=2", "env.tasks.0.problems=1",
            "env.tasks.1.problems=1", "rollout.group_size=2", "rollout.max_new_tokens=6", "run.iterations=2"]
    args = ["eppo_train.cli", "study", "--quick", "--seeds", "1", "--out", str(tmp_path / "study"),
            *(a for o in tiny for a in ("--set", o))]
    cmd = Command([*args, "--algos", "grpo,eppo"], tmp_path)
    cmd.wait_for(lambda: "stage 4/4 eppo-seed0" in cmd.err, timeout=HUNG_S)  # grpo-seed0 has its result file
    before = len(cmd.err)
    rc, line, survivors = cmd.interrupt(signal.SIGINT, group=True)
    after = [s for s in cmd.err[before:].replace("\r", "\n").splitlines() if s.strip()]
    assert rc == 130 and not survivors, (cmd.err[-3000:], cmd.leftovers)
    assert re.fullmatch(r"eppo-train: interrupted at stage 4/4 eppo-seed0(, .*)?; run the same command again: "
                        r"eppo-train study --quick .*", line), line
    assert "Traceback" not in cmd.err and not any("finished:" in s for s in after), after
    again = _finish([*args, "--algos", "grpo"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "study: 1/1 runs done (grpo-seed0)" in again.stdout and "every run is done" in again.stdout


def _guarded(tmp_path: Path, body: str) -> subprocess.Popen:
    """A script running `body` (indented, with `time` and `logging` imported) inside guard('prog', ...), started
    and ready: its stdout said so."""
    script = tmp_path / "guarded.py"
    script.write_text("import logging, time\n"
                      "from eppo_train.runtime.interrupt import guard\n"
                      "with guard('prog', lambda: 'resume with: nothing'):\n"
                      "    print('ready', flush=True)\n" + body)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_an_interrupt_swallowed_by_a_library_is_raised_again(tmp_path):
    """vLLM's engine start catches KeyboardInterrupt and goes on waiting for its engine; guard() raises the
    interrupt again until its own cleanup runs, so the command still ends at once with one line and exit 130."""
    proc = _guarded(tmp_path,
                    "    try:\n"
                    "        time.sleep(30)\n"
                    "    except KeyboardInterrupt:\n"
                    "        pass  # what vLLM's zmq_socket_ctx does\n"
                    "    time.sleep(30)\n"
                    "    print('not interrupted', flush=True)\n")
    t0 = time.monotonic()
    proc.terminate()
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "not interrupted" not in out
    assert err.strip().splitlines()[-1] == "prog: interrupted at start-up; resume with: nothing"
    assert time.monotonic() - t0 < 10


def test_a_library_logging_while_the_interrupt_unwinds_is_not_heard(tmp_path: Path):
    """selenium logs "Error stopping service after a failed start" with a traceback when a Ctrl-C lands while
    chromedriver starts (about once in 6 runs of the browser eval's Ctrl-C test on a loaded machine). After the signal
    the command's one line is all its user reads, whatever a library logs on the way out."""
    proc = _guarded(tmp_path,
                    "    try:\n"
                    "        time.sleep(30)\n"
                    "    except BaseException:\n"
                    "        try:\n"
                    "            raise OSError('the service is gone')\n"
                    "        except OSError:\n"
                    "            logging.getLogger('some.library').error('Error stopping service', exc_info=True)\n"
                    "        raise\n")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["prog: interrupted at start-up; resume with: nothing"], err


CHATTY_CHILD = (
    "import signal, sys, time\n"
    "def noisy(signum, frame):\n"
    "    for i in range(40):\n"
    "        print(f'ERROR worker shutdown noise {i}', file=sys.stderr, flush=True)\n"
    "        print(f'INFO worker shutdown noise {i}', flush=True)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGINT, noisy)\n"
    "signal.signal(signal.SIGTERM, noisy)\n"
    "print('child says hi', file=sys.stderr, flush=True)\n"
    "print('child says hi on stdout', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c-to-the-group", "sigint-to-the-command"])
def test_child_shutdown_chatter_after_an_interrupt_is_dropped(tmp_path: Path, group: bool):
    """A child started inside relayed_child_output() (as vLLM's engine core is) is heard while the command runs, and
    the ~40 lines it prints while shutting down after a Ctrl-C are not: the command's one line is all that follows
    the signal, whether the child got the SIGINT itself (the terminal's Ctrl-C) or the reaper's SIGTERM."""
    (tmp_path / "child.py").write_text(CHATTY_CHILD)
    (tmp_path / "chatty.py").write_text(
        "import subprocess, sys, time\n"
        "from eppo_train.runtime.interrupt import guard, relayed_child_output\n"
        "with guard('prog', lambda: 'resume with: nothing'):\n"
        "    with relayed_child_output():\n"
        f"        child = subprocess.Popen([sys.executable, {str(tmp_path / 'child.py')!r}])\n"
        "    print('parent after the block', file=sys.stderr, flush=True)\n"
        "    child.wait()\n")
    cmd = Command(["chatty"], tmp_path)
    cmd.wait_for(lambda: "child says hi" in cmd.err and "parent after the block" in cmd.err, timeout=60)
    time.sleep(0.5)
    before = len(cmd.err)
    code, last, survivors = cmd.interrupt(signal.SIGINT, group=group)
    after = [line for line in cmd.err[before:].splitlines() if line.strip()]
    assert code == 130 and not survivors, cmd.leftovers
    assert after == ["prog: interrupted at start-up; resume with: nothing"], after
    out = cmd.proc.stdout.read()
    assert "child says hi on stdout" in out and "noise" not in out


@pytest.mark.slow  # ~2-3 min: one vLLM engine start on the default model
def test_ctrl_c_mid_generate_with_vllm_prints_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Ctrl-C while vLLM generates: exit 130, the one line, nothing from the engine's processes after the signal
    (before the relay, ~40 lines: a worker 'died unexpectedly', a config and scheduler dump, `RuntimeError:
    cancelled`), and no engine process left."""
    pytest.importorskip("vllm")
    args = ["eppo_train.eval", "--policy", "default", "--backend", "vllm", "--dtype", "float32", "--tasks",
            "guess_number", "--import", "eppo_envs.example.guess_number", "--episodes", "512", "--batch-size", "64",
            "--max-new-tokens", "64", "--temperature", "1.0"]
    if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:  # for this command only, not the rest of the session
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    cmd = Command(args, tmp_path)
    cmd.wait_for(lambda: "eval:" in cmd.err, timeout=HUNG_S)  # the bar appears once the engine has started
    time.sleep(10)  # well inside the first generate calls
    before = len(cmd.err)
    # the watchdog sweeps the engine's shared memory after the command exits: under load that takes > 3 s
    rc, line, survivors = cmd.interrupt(signal.SIGINT, group=True)
    after = [s for s in cmd.err[before:].replace("\r", "\n").splitlines() if s.strip() and not s.startswith("eval:")]
    assert rc == 130 and not survivors, cmd.leftovers
    assert re.fullmatch(r"eppo-eval: interrupted at episode \d+/512; rerun with: eppo-eval --policy default .*", line)
    assert after == [line], after


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="Debian chromium is not installed")
def test_ctrl_c_during_a_browser_eval_leaves_no_profile_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Each WebShop-Browser env has a Chromium profile folder in $TMPDIR; the cleanup's SIGTERM to the browser's
    reaper must still remove it (killing the reaper first would leave one folder per env)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    profiles = lambda: list(tmp.glob("eppo-webshop-chromium-*"))  # noqa: E731
    cmd = Command(["eppo_train.eval", "--policy", "expert", "--tasks", "eppo/WebShop-Browser-v0", "--episodes", "64",
                   "--batch-size", "2"], tmp_path)
    cmd.wait_for(lambda: profiles() and "eval:" in cmd.err, timeout=120)
    rc, line, survivors = cmd.interrupt(signal.SIGINT, group=True)
    assert rc == 130 and line.startswith("eppo-eval: interrupted at episode"), line
    assert not survivors and "Traceback" not in cmd.err
    assert profiles() == []


def test_sighup_is_the_interrupt(tmp_path: Path):
    """A closed terminal (or ssh session) sends SIGHUP: it is an interrupt like SIGTERM, not its default action of
    ending the command at once (exit 129) with no line, no clean-up but the watchdog's and no resume hint."""
    proc = _guarded(tmp_path, "    time.sleep(30)\n    print('not interrupted', flush=True)\n")
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "not interrupted" not in out, (proc.returncode, err)
    assert err.strip().splitlines() == ["prog: interrupted at start-up; resume with: nothing"], err
