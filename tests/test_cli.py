import json
import subprocess
import sys

import pytest

from eppo_envs.cli import main

PLUGIN = ["--import", "eppo_envs.example.guess_number"]


def test_list_shows_ids_and_counts(capsys):
    assert main([*PLUGIN, "list"]) == 0
    out = capsys.readouterr().out
    assert "example/GuessNumber-v0" in out and "1,000" in out
    # each task's reward revision: GuessNumber's reward never changed (r1), Math's did (2026-12-06, 2026-12-07)
    from eppo_envs.math.env import MathToolEnv

    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    math_revision = MathToolEnv.reward_revision()
    assert math_revision == 1 + len(MathToolEnv.reward_changes) >= 3
    assert "│ r1 " in rows["example/GuessNumber-v0"] and f"│ r{math_revision} " in rows["eppo/MathTool-v0"]


def test_expert_json(capsys):
    assert main([*PLUGIN, "expert", "example/GuessNumber-v0", "--episodes", "5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"env_id", "split", "episodes", "success_rate", "mean_reward", "mean_steps", "steps_per_s"}
    assert result["success_rate"] == 1.0 and result["episodes"] == 5


def test_unknown_task_is_one_line_not_a_traceback(capsys):
    assert main(["show", "eppo/Nope-v0"]) == 2
    assert "no task" in capsys.readouterr().err


def test_play_in_a_terminal():
    # A person types a bare guess, asks for help, lets the expert move, then quits.
    proc = subprocess.run(
        [sys.executable, "-m", "eppo_envs.cli", *PLUGIN, "play", "guess_number", "--seed", "1"],
        input="50\nhelp\nexpert\nquit\n", capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "too" in proc.stdout or "Correct" in proc.stdout
    assert "[expert] <answer>" in proc.stdout and "Reply with <answer>" in proc.stdout


def test_errors_go_to_stderr_as_one_plain_line(capsys):
    assert main(["expert", "eppo/Nope-v0", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing that a `--json > file` would capture
    assert captured.err.startswith("eppo-envs: error: no task 'eppo/Nope-v0'") and captured.err.count("\n") == 1


@pytest.mark.parametrize("args, words", [
    (["show", "guess_number", "--seed", "-1"], "--seed: must be >= 0"),
    (["play", "guess_number", "--seed", "-3"], "--seed: must be >= 0"),
    (["expert", "guess_number", "--episodes", "0"], "--episodes: must be >= 1"),
    (["expert", "guess_number", "--episodes", "-3"], "--episodes: must be >= 1"),
    (["expert", "guess_number", "--seed", "-1"], "--seed: must be >= 0"),
    (["bench", "--episodes", "-1"], "--episodes: must be >= 1"),
])
def test_out_of_range_counts_and_seeds_are_refused(capsys, args, words):
    # one argparse line, not gymnasium's traceback for a negative seed nor "success 0.0% over -3 episodes"
    with pytest.raises(SystemExit) as exc:
        main([*PLUGIN, *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


EXPERT_FOREVER = ["expert", "guess_number", "--episodes", "100000000"]


def _eppo_envs(args: list[str], sigint=None) -> subprocess.Popen:
    """eppo-envs in a child; `sigint`: that signal's disposition there (a shell may start background jobs with SIGINT
    ignored)."""
    import signal

    preexec = None if sigint is None else (lambda: signal.signal(signal.SIGINT, sigint))
    return subprocess.Popen([sys.executable, "-m", "eppo_envs.cli", *PLUGIN, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)


PLAY = ["play", "guess_number", "--seed", "1"]


@pytest.mark.parametrize("signame, args", [("SIGINT", EXPERT_FOREVER), ("SIGINT", PLAY), ("SIGTERM", EXPERT_FOREVER),
                                           ("SIGTERM", PLAY)],
                         ids=["ctrl-c-expert", "ctrl-c-play", "sigterm-expert", "sigterm-play"])
def test_an_interrupt_is_one_line_and_exit_130(signame, args):
    """Ctrl-C, or SIGTERM (a `kill`, a supervisor's stop; it ended eppo-envs silently, exit 143, its envs' clean-up
    unrun): one line and exit 130, as in eppo-train and eppo-eval. Ctrl-C at `play`'s prompt ended the game with
    exit 0, like 'quit'."""
    import os
    import signal
    import time

    proc = _eppo_envs(args, sigint=signal.SIG_DFL)
    if args[0] == "play":
        assert proc.stdout.readline().startswith("== ")  # the game has started; the prompt waits for input
    else:
        time.sleep(6)
    os.kill(proc.pid, getattr(signal, signame))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert err.strip().splitlines() == ["eppo-envs: interrupted"] and "Traceback" not in err


def test_a_signal_ignored_from_the_start_stays_ignored():
    # a background job's SIGINT (and nohup's SIGHUP-like intent): installing the interrupt handler must not undo it
    import os
    import signal
    import time

    proc = _eppo_envs(EXPERT_FOREVER, sigint=signal.SIG_IGN)
    time.sleep(6)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(2)
    assert proc.poll() is None, proc.stderr.read()
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().splitlines() == ["eppo-envs: interrupted"]


def test_ctrl_d_at_the_play_prompt_is_a_quit():
    """End of input is the player's quit (exit 0, nothing on stderr); Ctrl-C is an interrupt (above)."""
    args = [sys.executable, "-m", "eppo_envs.cli", *PLUGIN, *PLAY]
    ended = subprocess.run(args, input="", capture_output=True, text=True, timeout=120)
    assert ended.returncode == 0 and ended.stderr == "", ended.stderr[-2000:]


COUNTDOWN = '''
import eppo_envs
from eppo_envs.example.guess_number import GuessNumberEnv

eppo_envs.register("mylab/Mine-v0", entry_point=GuessNumberEnv, task="mine", max_episode_steps=10)
'''


def test_import_finds_your_module_in_the_folder_you_run_in(tmp_path):
    """README: `eppo-envs --import mylab.tasks list` with mylab/ beside you. A console script starts with its bin
    folder on sys.path, not the folder it runs in; the folder is searched too (as in eppo-eval --import and
    eppo-train's env.imports)."""
    from pathlib import Path

    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    (tmp_path / "mylab" / "tasks.py").write_text(COUNTDOWN)
    script = Path(sys.executable).parent / "eppo-envs"
    proc = subprocess.run([str(script), "--import", "mylab.tasks", "expert", "mylab/Mine-v0", "--episodes", "2",
                           "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["success_rate"] == 1.0


def test_import_tasks_looks_in_the_current_folder_last(tmp_path, monkeypatch):
    from eppo_envs.core import import_tasks

    (tmp_path / "mylab_here").mkdir()
    (tmp_path / "mylab_here" / "__init__.py").write_text("VALUE = 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "mylab_here", raising=False)
    assert import_tasks("mylab_here").VALUE == 7
    assert sys.path[-1] == str(tmp_path)  # appended: a folder of yours never shadows an installed package
    monkeypatch.delitem(sys.modules, "mylab_here")


def test_an_import_that_fails_names_the_module_asked_for():
    # `eppo-envs --import no.such.mod list` names no.such.mod, not only "No module named 'no'"
    from eppo_envs.core import import_tasks

    with pytest.raises(ModuleNotFoundError, match=r"^cannot import 'no_such_pkg_xyz\.tasks': No module named"):
        import_tasks("no_such_pkg_xyz.tasks")
