"""eppo-eval: fixed instances, repeatable numbers, CIs, transcripts, one-line errors, an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from eppo_train.eval import main
from eppo_train.policy.factory import newest_model_folder
from eppo_train.policy.models import tiny_model_dir

TASK = ["--tasks", "guess_number", "--import", "eppo_envs.example.guess_number", "--no-progress"]


def _run(tmp_path, name: str, *args: str) -> tuple[dict, list[dict]]:
    out, transcripts = tmp_path / f"{name}.json", tmp_path / f"{name}.jsonl"
    assert main([*TASK, *args, "--json", str(out), "--transcripts", str(transcripts)]) == 0
    return json.loads(out.read_text()), [json.loads(line) for line in transcripts.read_text().splitlines()]


def test_same_command_gives_the_same_numbers_on_fixed_instances(tmp_path):
    args = ("--policy", "tiny", "--backend", "hf", "--episodes", "3", "--max-new-tokens", "6", "--max-turns", "3", "--batch-size", "2")
    a, ta = _run(tmp_path, "a", *args)
    b, tb = _run(tmp_path, "b", *args)
    a.pop("timing"), b.pop("timing")
    assert a == b and ta == tb
    assert [t["seed"] for t in ta] == [0, 1, 2] and {t["split"] for t in ta} == {"test"}  # the task's eval_split
    stats = a["tasks"]["example/GuessNumber-v0"]
    assert stats["episodes"] == 3 and stats["mean_turns"] == 3.0 and a["tokens_generated"] > 0


def test_expert_and_random_policies(tmp_path):
    expert, transcripts = _run(tmp_path, "expert", "--policy", "expert", "--episodes", "4")
    assert expert["tasks"]["example/GuessNumber-v0"]["success"] == 1.0
    assert all(t["won"] for t in transcripts)
    rnd, _ = _run(tmp_path, "random", "--policy", "random", "--episodes", "4", "--max-turns", "4")
    assert rnd["tasks"]["example/GuessNumber-v0"]["invalid_action_rate"] > 0


def test_env_kwargs_reach_the_task(tmp_path):
    """`--env-kwarg TASK.KEY=VALUE` builds the task with that option (here a range of 1-8, so the expert's binary
    search needs at most 4 guesses); the report names the variant."""
    narrow, transcripts = _run(tmp_path, "narrow", "--policy", "expert", "--episodes", "16",
                               "--env-kwarg", "guess_number.high=8")
    wide, wide_transcripts = _run(tmp_path, "wide", "--policy", "expert", "--episodes", "16")
    assert list(narrow["tasks"]) == ["run/guess_number-v0"]
    assert all(t["won"] for t in transcripts) and max(len(t["turns"]) for t in transcripts) <= 4
    assert "between 1 and 8" in transcripts[0]["instruction"]
    assert max(len(t["turns"]) for t in wide_transcripts) > 4  # 1-100 takes the binary search more guesses


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "expert", *TASK, "--env-kwarg", "high=8"], "expects TASK.KEY=VALUE"),
        (["--policy", "expert", *TASK, "--env-kwarg", "math.level=1"], "not among the evaluated tasks"),
        (["--policy", "expert", *TASK, "--env-kwarg", "guess_number.colour=red"], "--env-kwarg for guess_number"),
        (["--policy", "expert", "--tasks", "nope"], "unknown task 'nope'"),
        (["--policy", "bogus", "--tasks", "all"], "unknown policy 'bogus'"),
        (["--policy", "hf:/no/such/dir", *TASK], "not found"),
        (["--policy", "expert", "--import", "no_such_module_xyz"], "cannot import"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_latest_finds_the_newest_checkpoint(tmp_path):
    assert newest_model_folder(tmp_path / "runs") is None
    older = tmp_path / "runs" / "a" / "checkpoints" / "step_1"
    newer = tmp_path / "runs" / "b" / "checkpoints" / "step_2"
    shutil.copytree(tiny_model_dir(), older)
    shutil.copytree(tiny_model_dir(), newer)
    assert newest_model_folder(tmp_path / "runs") == newer


class _Endpoint(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible server: answers every chat with a fixed guess and records what it was sent."""

    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Endpoint.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        reply = {"choices": [{"message": {"role": "assistant", "content": "<answer>50</answer>"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_endpoint_policy(tmp_path, monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        report, transcripts = _run(tmp_path, "oa", "--policy", f"openai:{url}", "--model-name", "m1",
                                   "--episodes", "2", "--max-turns", "2")
    finally:
        server.shutdown()
    assert all(t["action"] == "<answer>50</answer>" for e in transcripts for t in e["turns"])
    first = _Endpoint.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["model"] == "m1" and first["auth"] == "Bearer sk-test"
    assert "I am thinking of a number" in first["messages"][-1]["content"] and first["temperature"] == 0.0
    second_turn = [r for r in _Endpoint.requests if len(r["messages"]) == 3]
    assert second_turn and second_turn[0]["messages"][1] == {"role": "assistant", "content": "<answer>50</answer>"}
    assert report["tasks"]["example/GuessNumber-v0"]["episodes"] == 2
