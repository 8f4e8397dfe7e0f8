"""eppo-eval: fixed instances, repeatable numbers, CIs, transcripts, one-line errors, an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import HTTPServer

import pytest

from eppo_train.eval.cli import main
from eppo_train.policy.factory import newest_model_folder
from eppo_train.policy.models import tiny_model_dir
from tests.json_endpoint import JSONHandler

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
    assert stats["reward_revision"] == 1  # the reward it was scored by: GuessNumber's has never changed


def test_samples_give_pass_at_k_from_k_replies_to_each_instance(tmp_path):
    """`--samples K` plays every instance K times (sampled): success becomes the mean over those replies (pass@1)
    and the report adds pass@K, the share of instances at least one reply won; each matches the transcripts."""
    report, transcripts = _run(tmp_path, "k", "--policy", "tiny", "--backend", "hf", "--episodes", "4",
                               "--max-new-tokens", "6", "--max-turns", "3", "--temperature", "1.0",
                               "--samples", "3", "--batch-size", "6")
    assert sorted(t["seed"] for t in transcripts) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    stats = report["tasks"]["example/GuessNumber-v0"]
    wins = {seed: [t["won"] for t in transcripts if t["seed"] == seed] for seed in range(4)}
    assert stats["samples"] == 3 and stats["episodes"] == 12
    assert stats["success"] == sum(map(sum, wins.values())) / 12
    assert stats["pass_at_k"] == sum(any(w) for w in wins.values()) / 4
    assert 0.0 <= stats["pass_at_k_ci95"][0] <= stats["pass_at_k"] <= stats["pass_at_k_ci95"][1] <= 1.0
    again, _ = _run(tmp_path, "k2", "--policy", "tiny", "--backend", "hf", "--episodes", "4", "--max-new-tokens",
                    "6", "--max-turns", "3", "--temperature", "1.0", "--samples", "3", "--batch-size", "6")
    assert again["tasks"] == report["tasks"], "seeded sampling: the same command gives the same replies"


def test_pass_at_k_against_hand_counted_outcomes():
    """Two instances, two replies each: wins (1, 0) and (0, 0). pass@1 = 1/4, pass@2 = 1/2; success's (and the
    reward's) interval is a bootstrap over the instances' shares (0.5 and 0), so it spans [0, 0.5], not an interval
    over 4 independent draws."""
    from eppo_envs.core.record import Episode, Turn
    from eppo_train.eval.evaluation import summarise

    def episode(seed: int, won: bool) -> Episode:
        return Episode("t", "t", "test", seed, f"t/{seed}", "", "", [Turn("a", "o", float(won), True)], won=won)

    stats = summarise([episode(0, True), episode(0, False), episode(1, False), episode(1, False)])
    assert stats["success"] == 0.25 and stats["samples"] == 2 and stats["pass_at_k"] == 0.5
    assert stats["success_ci95"] == [0.0, 0.5] and stats["mean_reward_ci95"] == [0.0, 0.5]
    single = summarise([episode(0, True), episode(1, False)])
    assert "pass_at_k" not in single and single["success_ci95"][0] > 0.0  # one reply each: Wilson, as before


def test_expert_and_random_policies(tmp_path):
    expert, transcripts = _run(tmp_path, "expert", "--policy", "expert", "--episodes", "4")
    assert expert["tasks"]["example/GuessNumber-v0"]["success"] == 1.0
    assert all(t["won"] for t in transcripts)
    rnd, _ = _run(tmp_path, "random", "--policy", "random", "--episodes", "4", "--max-turns", "4")
    assert rnd["tasks"]["example/GuessNumber-v0"]["invalid_action_rate"] > 0


def test_random_policy_answers_code_in_a_fenced_block(tmp_path):
    """Code reads a fenced python block, no tag: the random floor wrapped its words in <action> tags, which Code
    rejects before running anything (invalid action rate 1.0, 6 turns and no attempt used)."""
    out, transcripts = tmp_path / "code.json", tmp_path / "code.jsonl"
    assert main(["--policy", "random", "--tasks", "code", "--episodes", "1", "--no-progress", "--json", str(out),
                 "--transcripts", str(transcripts)]) == 0
    (episode,) = [json.loads(line) for line in transcripts.read_text().splitlines()]
    assert episode["turns"] and all(t["action"].startswith("```python\n") for t in episode["turns"])
    assert json.loads(out.read_text())["tasks"]["eppo/Code-v0"]["invalid_action_rate"] == 0.0
    assert len(episode["turns"]) == 3 and episode["terminated"]  # its 3 attempts, each one run against the tests


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
        (["--policy", "expert", *TASK, "--samples", "4"], "needs a temperature > 0"),
        (["--policy", "expert", *TASK, "--samples", "0", "--temperature", "1"], "must be at least 1"),
        # unchecked, these run as if the flag were absent (--max-turns 0: every task's own cap) or make empty episodes
        (["--policy", "expert", *TASK, "--max-turns", "0"], "--max-turns must be at least 1"),
        (["--policy", "expert", *TASK, "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
        (["--policy", "expert", *TASK, "--temperature", "-1"], "--temperature must be >= 0"),
        (["--policy", "expert", *TASK, "--top-p", "1.5"], "--top-p must be in (0, 1]"),
        (["--policy", "expert", *TASK, "--workers", "-1"], "--workers must be >= 0"),
        (["--policy", "expert", *TASK[:4], "--split", "nope"], "--split: 'nope' is not a split of example/GuessNumber-v0"),
        # an AssertionError traceback from the model load ("Torch not compiled with CUDA enabled"), torch's RuntimeError
        (["--policy", "tiny", "--backend", "hf", *TASK, "--device", "cuda:99"], "--device cuda:99: no such CUDA device"),
        (["--policy", "tiny", "--backend", "hf", *TASK, "--device", "nonsense"], "not a torch device"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_a_lost_worker_is_one_error_line_with_the_rerun_hint(monkeypatch, capsys):
    # eppo-train's line for the same event, not "eppo-eval: WorkerLost: ..." (the class name, no rerun hint)
    import eppo_train.eval.cli as eval_cli
    from eppo_train.runtime.interrupt import WorkerLost

    def dies(args):
        raise WorkerLost("the env worker 0 died (its process ended: killed, out of memory, or its node went away)")

    monkeypatch.setattr(eval_cli, "run", dies)
    assert main(["--policy", "expert", *TASK, "--episodes", "1"]) == 1
    assert capsys.readouterr().err == (
        "eppo-eval: error: the env worker 0 died (its process ended: killed, out of memory, or its node went away); "
        f"rerun with: eppo-eval --policy expert {' '.join(TASK)} --episodes 1\n")


def test_an_unknown_task_option_names_the_task_and_its_options(capsys):
    # not gymnasium's "AgentEnv.__init__() got an unexpected keyword argument 'nokey' was raised from the
    # environment creator for run/math-v0 with kwargs ({'nokey': 1})"
    assert main(["--policy", "expert", "--tasks", "math", "--episodes", "1", "--env-kwarg", "math.nokey=1",
                 "--no-progress"]) == 2
    assert capsys.readouterr().err == ("eppo-eval: error: --env-kwarg for math: no option 'nokey' (its options: "
                                       "action_format, level, max_tool_calls, render_mode, sandbox, sources, split)\n")


def test_an_output_path_that_cannot_be_written_is_refused_before_the_evaluation(tmp_path, capsys):
    # a folder given as --json: refused up front, not an IsADirectoryError traceback after the whole evaluation
    for flag in ("--json", "--transcripts"):
        assert main(["--policy", "expert", *TASK, "--episodes", "1", flag, str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert f"{flag} {tmp_path}: is a directory" in err and "\n" not in err
    # a path under a file: refused up front, not after the whole evaluation (exit 1, the results lost)
    (tmp_path / "a-file").write_text("")
    for flag in ("--json", "--transcripts"):
        bad = tmp_path / "a-file" / "sub" / "out.json"
        assert main(["--policy", "expert", *TASK, "--episodes", "1", flag, str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"eppo-eval: error: {flag} {bad}: cannot be written there"
    # missing folders are made
    report = tmp_path / "new" / "folder" / "out.json"
    assert main(["--policy", "expert", *TASK, "--episodes", "1", "--json", str(report)]) == 0 and report.exists()


def test_the_progress_bar_is_redrawn_between_turns(capsys):
    """One turn of `make eval` is one engine call of minutes; the bar (elapsed time included) moves during it."""
    import time

    from eppo_train.eval.cli import _Bar

    bar = _Bar(12, True, every_s=0.2)
    time.sleep(1.1)
    bar.close()
    frames = [f for f in capsys.readouterr().err.split("\r") if "0/12" in f]
    assert len(frames) >= 4  # the first draw, ~5 redraws, the close
    quiet = _Bar(12, False, every_s=0.05)
    time.sleep(0.2)
    quiet.close()
    assert capsys.readouterr().err == ""  # --no-progress: nothing, and no thread


def test_latest_finds_the_newest_checkpoint(tmp_path):
    assert newest_model_folder(tmp_path / "runs") is None
    older = tmp_path / "runs" / "a" / "checkpoints" / "step_1"
    newer = tmp_path / "runs" / "b" / "checkpoints" / "step_2"
    shutil.copytree(tiny_model_dir(), older)
    shutil.copytree(tiny_model_dir(), newer)
    assert newest_model_folder(tmp_path / "runs") == newer


def test_latest_says_which_checkpoint_it_evaluates(tmp_path, monkeypatch, capsys):
    from eppo_train.policy.factory import make_policy

    shutil.copytree(tiny_model_dir(), tmp_path / "runs" / "b" / "checkpoints" / "step_2")
    monkeypatch.chdir(tmp_path)
    make_policy("latest", backend="hf")
    assert capsys.readouterr().err.strip() == "latest: runs/b/checkpoints/step_2"


class _Endpoint(JSONHandler):
    """A minimal OpenAI-compatible server: answers every chat with a fixed guess and records what it was sent."""

    requests: list[dict] = []
    content = "<answer>50</answer>"

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.read_json()
        _Endpoint.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        self.send_json(200, {"choices": [{"message": {"role": "assistant", "content": _Endpoint.content}}]})


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


def test_an_endpoints_reply_keeps_its_stop_string(monkeypatch):
    """The OpenAI API leaves the matched stop string out of the reply ("<action>go north" for a reply that wrote
    "</action>"), which every task refuses as an unclosed tag. The backend sends no `stop` and cuts the reply after
    its first stop string itself, keeping it, as the HF and vLLM backends do."""
    from eppo_train.policy.base import SamplingParams
    from eppo_train.policy.openai import OpenAIChat

    server = HTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(_Endpoint, "content", "<action>go north</action> and then <action>look</action></answer>")
    monkeypatch.setattr(_Endpoint, "requests", [])
    try:
        chat = OpenAIChat(f"http://127.0.0.1:{server.server_port}/v1", api_key="")
        messages = [{"role": "user", "content": "where?"}]
        cut = chat.chat([messages], SamplingParams(32, 0.0, 1.0, None, ("</answer>", "</action>")))
        whole = chat.chat([messages], SamplingParams(32, 0.0, 1.0, None, ()))
    finally:
        server.shutdown()
    assert cut == ["<action>go north</action>"]
    assert whole == ["<action>go north</action> and then <action>look</action></answer>"]
    assert all("stop" not in r for r in _Endpoint.requests)


def test_an_endpoint_gets_one_seed_per_conversation(monkeypatch):
    """k sampled replies to one instance are k conversations with the same messages: sent with one seed, a server that
    honours seeds (vLLM's does) returned k copies of one reply. Each conversation gets its own seed, and the next
    turn's call (the rollout's seed + 1) reuses none of them."""
    from eppo_train.policy.base import SamplingParams
    from eppo_train.policy.openai import OpenAIChat

    server = HTTPServer(("127.0.0.1", 0), _Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(_Endpoint, "requests", [])
    try:
        chat = OpenAIChat(f"http://127.0.0.1:{server.server_port}/v1", api_key="")
        same = [[{"role": "user", "content": "guess"}]] * 4
        chat.chat(same, SamplingParams(8, 1.0, 1.0, 5))
        first = {r["seed"] for r in _Endpoint.requests}
        chat.chat(same, SamplingParams(8, 1.0, 1.0, 6))
        second = {r["seed"] for r in _Endpoint.requests} - first
        chat.chat(same[:1], SamplingParams(8, 0.0, 1.0, None))
    finally:
        server.shutdown()
    assert len(first) == 4 and len(second) == 4
    assert "seed" not in _Endpoint.requests[-1]


def test_a_transcript_holding_a_lone_surrogate_is_written_and_reads_back(tmp_path):
    # the raw reply is kept in the transcript, and a lone surrogate (a JSON "\ud800" escape) cannot be UTF-8
    import argparse

    from eppo_envs.core import Episode, Turn
    from eppo_train.eval.cli import write_outputs
    from eppo_train.eval.evaluation import EvalReport

    episode = Episode("eppo/X-v0", "x", "test", 0, "x/0", "", "", [Turn("a\ud800b", "ok", 0.0, False)])
    report = EvalReport("p", "test", 1, 0.0, {}, 0, {}, episodes=[episode])
    args = argparse.Namespace(json=None, transcripts=tmp_path / "t.jsonl", policy="p")
    write_outputs(args, report)
    assert json.loads(args.transcripts.read_text(encoding="utf-8"))["turns"][0]["action"] == "a\ud800b"
