import json
import subprocess
import sys

from eppo_envs.cli import main

PLUGIN = ["--import", "eppo_envs.example.guess_number"]


def test_list_shows_ids_and_counts(capsys):
    assert main([*PLUGIN, "list"]) == 0
    out = capsys.readouterr().out
    assert "example/GuessNumber-v0" in out and "1,000" in out


def test_expert_json(capsys):
    assert main([*PLUGIN, "expert", "example/GuessNumber-v0", "--episodes", "5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"env_id", "split", "episodes", "success_rate", "mean_reward", "mean_steps", "steps_per_s"}
    assert result["success_rate"] == 1.0 and result["episodes"] == 5


def test_unknown_task_is_one_line_not_a_traceback(capsys):
    assert main(["show", "eppo/Nope-v0"]) == 2
    assert "no task" in capsys.readouterr().out


def test_play_in_a_terminal():
    # A person types a bare guess, asks for help, lets the expert move, then quits.
    proc = subprocess.run(
        [sys.executable, "-m", "eppo_envs.cli", *PLUGIN, "play", "guess_number", "--seed", "1"],
        input="50\nhelp\nexpert\nquit\n", capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "too" in proc.stdout or "Correct" in proc.stdout
    assert "[expert] <answer>" in proc.stdout and "Reply with <answer>" in proc.stdout
