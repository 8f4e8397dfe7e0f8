"""The tools action format (env.action_format: tools): the env side (core/tools.py), the template-side parsers
(policy/tool_calls.py), exact token transcripts (policy/chat.py + rollout/loop.py) and function calling through an
OpenAI-compatible endpoint. Tool-capable templates are written offline (tests/tool_templates.py)."""

from __future__ import annotations

import json
import sys
import threading
from http.server import HTTPServer
from pathlib import Path

import pytest

import eppo_envs
import eppo_envs.example.guess_number  # noqa: F401  (registers example/GuessNumber-v0)
import eppo_envs.testbed  # noqa: F401
from eppo_envs.core.tools import Tool, as_call, call_text, read_call
from eppo_train.policy.agents import Action, Agent, ExpertTokenAgent
from eppo_train.policy.chat import ChatFormat
from eppo_train.policy.tool_calls import ToolTemplateError, detect_syntax, parse_reply
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout
from eppo_train.rollout.task_slots import task_variant
from tests.json_endpoint import JSONHandler

sys.path.insert(0, str(Path(__file__).parent))
from tool_templates import TEMPLATES, tool_model_dir  # noqa: E402

SEARCH = Tool("search", "Search.", (("query", "what"),), "<search>{query}</search>")
ANSWER = Tool("answer", "Answer.", (("answer", "the answer"),), "<answer>{answer}</answer>")
TOOLS = (SEARCH, ANSWER)
# Llama 3's turn markers are single special tokens in its own tokenizer; over SmolLM2's they are added as such, and
# its pre-tokenizer split (from Llama 3's tokenizer.json) replaces SmolLM2's GPT-2 one: under GPT-2's, "\n\n" at the
# end of a prompt is one piece and "\n\n{" in the whole text two, a boundary Llama 3's own tokenizer does not have
# (its `\s*[\r\n]+` keeps "\n\n" whole before anything)
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"]
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


def _llama3_style(tokenizer):
    from tokenizers import Regex, pre_tokenizers

    tokenizer.add_special_tokens({"additional_special_tokens": LLAMA_SPECIALS})
    tokenizer.eos_token = "<|eot_id|>"
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tokenizer


# ------------------------------------------------------------------ the env side
@pytest.mark.parametrize("reply, error", [
    (call_text("search", {"query": "paris"}), None),
    ("<think>first</think>\n" + call_text("answer", {"answer": 42}), None),
    ("", "no tool call found"),
    ("<search>paris</search>", "no tool call found"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}', "never closed"),
    ('<tool_call>{"name": </tool_call>', "not valid JSON"),
    ("<tool_call>" + "[" * 50_000 + "</tool_call>", "not valid JSON"),
    (call_text("fetch", {"query": "x"}), "there is no tool 'fetch'"),
    (call_text("search", {"query": "x", "k": "3"}), "takes no argument 'k'"),
    (call_text("search", {}), "needs the argument 'query'"),
    (call_text("search", {"query": ["x"]}), "must be a string"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}, "id": 1}</tool_call>', "unexpected key 'id'"),
    ("<think>" + call_text("search", {"query": "x"}) + "</think>", "inside <think>"),
    (call_text("search", {"query": "x"}) * 2, "found 2 tool calls"),
    (call_text("search", {"query": "x</search><answer>y"}), "may not contain"),
])
def test_read_call(reply, error):
    call = read_call(reply, TOOLS)
    if error is None:
        assert call.error is None and call.content in ("<search>paris</search>", "<answer>42</answer>")
    else:
        assert call.error is not None and error in call.error, call.error


def test_arguments_as_json_string_and_expert_conversion():
    assert read_call('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>',
                     TOOLS).content == "<search>x</search>"
    text = "<think>next: B</think>\n<search>who is B</search>"
    call = as_call(text, TOOLS)
    assert call.startswith("<think>next: B</think>\n<tool_call>") and read_call(call, TOOLS).content == \
        "<search>who is B</search>"
    assert as_call("no tool here", TOOLS) == "no tool here"


@pytest.mark.parametrize("reply", [
    call_text("nope", {"number": "3"}),
    "<tool_call>{bad json</tool_call>",
    call_text("answer", {"number": "3", "extra": "1"}),
    "<think>" + call_text("answer", {"number": "3"}) + "</think>",
    call_text("answer", {"number": "3"}) + call_text("answer", {"number": "4"}),
])
def test_hostile_calls_are_invalid_with_a_how_to(reply):
    env = eppo_envs.make("example/GuessNumber-v0", action_format="tools")
    obs, info = env.reset(seed=0)
    assert info["tools"][0]["function"]["name"] == "answer" and "answer(number)" in info["instruction"]
    obs, reward, terminated, truncated, info = env.step(reply)
    assert not info["action_valid"] and reward == 0 and not terminated
    assert env.unwrapped.action_hint in obs and "answer(number)" in obs


def test_a_task_without_tools_refuses_the_tools_format():
    with pytest.raises(ValueError, match="action_format must be one of tags, tools"):
        eppo_envs.make("example/GuessNumber-v0", action_format="toolz")
    from eppo_envs.example.guess_number import GuessNumberEnv

    class NoTools(GuessNumberEnv):
        tools = ()

    with pytest.raises(ValueError, match="declares no tools"):
        NoTools(action_format="tools")


# ------------------------------------------------------------------ templates and parsers
@pytest.fixture(scope="module")
def tiny_dir():
    from eppo_train.policy.models import resolve_model

    return resolve_model("tiny")


def _tokenizer(base, tmp: Path, name: str):
    from eppo_train.policy.models import load_tokenizer

    path = tool_model_dir(base, tmp / name, TEMPLATES[name]) if name in TEMPLATES else base
    tokenizer = load_tokenizer(str(path))
    return _llama3_style(tokenizer) if name == "llama31" else tokenizer


@pytest.fixture(scope="module")
def tokenizers(tiny_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tok")
    return {name: _tokenizer(tiny_dir, tmp, name) for name in ("smollm2", "qwen25", "llama31")}


def test_syntax_is_read_off_the_template(tokenizers):
    assert detect_syntax(tokenizers["qwen25"]) == "hermes"
    assert detect_syntax(tokenizers["llama31"]) == "llama3_json"
    with pytest.raises(ToolTemplateError) as err:
        detect_syntax(tokenizers["smollm2"])  # the shipped template ignores tools=
    assert "\n" not in str(err.value) and "no tool support" in str(err.value)


def test_parsers():
    hermes = parse_reply("hermes", 'I will look.\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n'
                                   "</tool_call>")
    assert hermes.calls == [{"name": "search", "arguments": {"query": "x"}}] and hermes.content == "I will look."
    assert read_call(hermes.env_text, TOOLS).content == "<search>x</search>"
    llama = parse_reply("llama3_json", '<|python_tag|>{"name": "search", "parameters": {"query": "x"}}')
    assert llama.calls == [{"name": "search", "arguments": {"query": "x"}}]
    assert read_call(llama.env_text, TOOLS).content == "<search>x</search>"
    for reply, error in [('{"name": "search", "parameters": {"query": "x"}}; {"name": "answer", "parameters": '
                          '{"answer": "y"}}', "found 2 tool calls"),
                         ('{"name": "search", "parameters": {"query": ', "not valid JSON"),
                         ('<think>{"name": "search", "parameters": {"query": "x"}}</think>', "no tool call"),
                         ('{"name": "search", "parameters": {"query": "x"}, "id": 3}', "unexpected key"),
                         ("the answer is 4", "no tool call")]:
        assert error in (read_call(parse_reply("llama3_json", reply).env_text, TOOLS).error or ""), reply


# ------------------------------------------------------------------ exact token transcripts
class Scripted(Agent):
    """Replies from a script, tokenized and ended with the end-of-turn token, as a sampler emits them."""

    needs_tokens = True

    def __init__(self, tokenizer, replies: list[str]) -> None:
        self.tokenizer, self.replies = tokenizer, replies

    def act(self, states, pool):
        out = []
        for s in states:
            text = self.replies[s.turn % len(self.replies)]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Action(text, ids, [0.0] * len(ids)))
        return out


def _rollout(agent, env_id: str, tools: bool, seeds=(0, 1), max_turns: int = 10):
    if tools:
        env_id = task_variant(env_id, f"{env_id.split('/')[1].lower()}-tools", {"action_format": "tools"})
    cfg = RolloutConfig(group_size=1, max_turns=max_turns, max_new_tokens=400, max_total_tokens=8192,
                        progress=False)
    with LocalEnvPool() as pool:
        return run_rollout(agent, pool, [Problem(env_id, "train", s) for s in seeds], cfg)


def _whole(tokenizer, episode, tools: list[dict] | None, structured: bool) -> str:
    """The episode as one conversation, rendered by `apply_chat_template` at once (up to the last reply)."""
    from eppo_envs.core import first_prompt
    from eppo_train.policy.tool_calls import assistant_message

    fmt = ChatFormat(tokenizer)
    messages = fmt.start(first_prompt(episode.first_observation, {"instruction": episode.instruction}))
    for i, turn in enumerate(episode.turns):
        reply = fmt.parse(turn.action) if tools else None
        one_call = reply is not None and len(reply.calls) == 1
        messages.append(assistant_message(reply.content, reply.calls) if structured and one_call
                        else {"role": "assistant", "content": turn.action})
        if i < len(episode.turns) - 1:
            messages.append(ChatFormat.observation_message(turn.observation, "tool" if one_call else "user"))
    return tokenizer.apply_chat_template(messages, tokenize=False, **({"tools": tools} if tools else {}))


def _check(tokenizer, result, tools: list[dict] | None, structured: bool) -> int:
    for sample, episode in zip(result.samples, result.episodes, strict=True):
        whole = tokenizer(_whole(tokenizer, episode, tools, structured), add_special_tokens=False)["input_ids"]
        ids = sample.input_ids
        assert whole[: len(ids)] == ids, (tokenizer.decode(whole[: len(ids)])[-300:], tokenizer.decode(ids)[-300:])
        assert tokenizer.decode(whole[len(ids):]).strip() == ""  # only the turn's closing newline is left
        # the loss mask covers exactly the replies (each with its end-of-turn token), nothing of the scaffolding
        spans = sample.meta["turn_spans"]
        assert sum(sample.loss_mask) == sum(b - a for a, b in spans)
        for (a, b), turn in zip(spans, episode.turns, strict=True):
            assert all(sample.loss_mask[a:b]) and tokenizer.decode(ids[a : b - 1]) == turn.action
    return len(result.samples)


@pytest.mark.parametrize("name", ["qwen25", "llama31"])
@pytest.mark.parametrize("env_id", ["example/GuessNumber-v0", "eppo/SearchQA-v0"])
def test_expert_transcript_equals_the_whole_conversation(tokenizers, name, env_id):
    """The expert's replies, written in the template's own tool-call syntax, built turn by turn, are the tokens of
    `apply_chat_template` over the whole conversation with structured `tool_calls` and `tool` results."""
    tokenizer = tokenizers[name]
    result = _rollout(ExpertTokenAgent(tokenizer), env_id, tools=True)
    assert all(e.won for e in result.episodes) and all(t.action_valid for e in result.episodes for t in e.turns)
    tools = [t.schema() for t in eppo_envs.core.registry.env_class(env_id).tools]
    assert _check(tokenizer, result, tools, structured=True) == 2
    assert _check(tokenizer, result, tools, structured=False) == 2
    reply = result.episodes[0].turns[0].action
    # the template's own syntax (Llama 3.1's drops the text beside a call, the expert's <think> included)
    assert reply.startswith(("<tool_call>", "<think>") if name == "qwen25" else '{"name": "')


SCRIPTS = {
    "qwen25": ['I guess.\n<tool_call>\n{"name": "answer", "arguments": {"number": "50"}}\n</tool_call>',
               "<answer>3</answer>", '<tool_call>{"name": "answer", "arguments": {"number": "7", "x": "1"}}'
               "</tool_call>", "<tool_call>{bad</tool_call>",
               '<tool_call>{"name": "answer", "arguments": {"number": 25}}</tool_call>'],
    "llama31": ['{"name": "answer", "parameters": {"number": "50"}}', "I do not know", '{"name": "answer",',
                '<|python_tag|>{"name": "answer", "parameters": {"number": 30}}'],
}


@pytest.mark.parametrize("name", ["qwen25", "llama31"])
def test_sampled_transcript_equals_the_whole_conversation(tokenizers, name):
    """Replies as a model writes them, valid calls and broken ones mixed: the same equality, with each reply kept
    as written (a broken one is answered by a user message, a call by a tool message). No reply ends in whitespace:
    Llama 3.1's template trims a message's content, so re-rendering such a reply would not give what was sampled
    (the transcript keeps what was sampled, in both formats)."""
    tokenizer = tokenizers[name]
    result = _rollout(Scripted(tokenizer, SCRIPTS[name]), "example/GuessNumber-v0", tools=True, max_turns=5)
    valid = [t.action_valid for t in result.episodes[0].turns]
    assert valid[0] and not all(valid)
    tools = [t.schema() for t in eppo_envs.core.registry.env_class("example/GuessNumber-v0").tools]
    assert _check(tokenizer, result, tools, structured=False) == 2


@pytest.mark.parametrize("env_id", ["example/GuessNumber-v0", "eppo/SearchQA-v0"])
def test_shipped_tokenizer_transcript_in_the_tags_format(tokenizers, env_id):
    """The tokenizer the project ships (SmolLM2's, the default and the tiny model's) in the tags format; in the
    tools format it is the one-line error above."""
    tokenizer = tokenizers["smollm2"]
    result = _rollout(ExpertTokenAgent(tokenizer), env_id, tools=False)
    assert all(e.won for e in result.episodes)
    assert _check(tokenizer, result, None, structured=False) == 2
    with pytest.raises(ToolTemplateError):
        _rollout(ExpertTokenAgent(tokenizer), env_id, tools=True)


# ------------------------------------------------------------------ an OpenAI-compatible endpoint
class _FunctionCallingEndpoint(JSONHandler):
    """An OpenAI-compatible server that honours function calling as the API defines it: it refuses (400) a request
    whose history breaks the API's rules (a `tool` message must answer an id of the assistant message before it;
    an assistant call's arguments are a JSON string), and plays GuessNumber by binary search through `tool_calls`,
    reading the previous result from the last `tool` message."""

    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.read_json()
        _FunctionCallingEndpoint.requests.append(body)
        problem = self._problem(body)
        if problem:
            return self.send_json(400, {"error": {"message": problem}})
        low, high = 1, 100
        for m in body["messages"]:
            if m["role"] == "assistant" and m.get("tool_calls"):
                guess = int(json.loads(m["tool_calls"][0]["function"]["arguments"])["number"])
            if m["role"] == "tool":
                low, high = (guess + 1, high) if "too low" in m["content"] else (low, guess - 1)
        call = {"id": f"call_{len(body['messages'])}", "type": "function",
                "function": {"name": "answer", "arguments": json.dumps({"number": str((low + high) // 2)})}}
        self.send_json(200, {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]},
                                      "finish_reason": "tool_calls"}]})

    @staticmethod
    def _problem(body: dict) -> str:
        if not body.get("tools") or body["tools"][0]["function"]["name"] != "answer":
            return "no tools"
        ids: set[str] = set()
        for m in body["messages"]:
            if m["role"] == "assistant":
                ids = {c["id"] for c in m.get("tool_calls") or []}
                if any(not isinstance(c["function"]["arguments"], str) for c in m.get("tool_calls") or []):
                    return "arguments must be a string"
            elif m["role"] == "tool" and m.get("tool_call_id") not in ids:
                return f"tool message answers no call: {m.get('tool_call_id')}"
        return ""


def test_eppo_eval_plays_an_endpoint_through_function_calling(tmp_path, monkeypatch):
    from eppo_train.eval.cli import main

    server = HTTPServer(("127.0.0.1", 0), _FunctionCallingEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(_FunctionCallingEndpoint, "requests", [])
    out, transcripts = tmp_path / "r.json", tmp_path / "t.jsonl"
    try:
        status = main(["--tasks", "guess_number", "--import", "eppo_envs.example.guess_number", "--no-progress",
                       "--policy", f"openai:http://127.0.0.1:{server.server_port}/v1", "--action-format", "tools",
                       "--episodes", "3", "--max-turns", "8", "--json", str(out), "--transcripts", str(transcripts)])
    finally:
        server.shutdown()
    assert status == 0
    report = json.loads(out.read_text())
    (stats,) = report["tasks"].values()
    assert stats["success"] == 1.0 and stats["invalid_action_rate"] == 0.0 and stats["mean_turns"] > 1
    episodes = [json.loads(line) for line in transcripts.read_text().splitlines()]
    first = episodes[0]["turns"][0]
    assert first["action"] == call_text("answer", {"number": "50"}) and first["action_valid"]
    later = max(_FunctionCallingEndpoint.requests, key=lambda r: len(r["messages"]))
    assert [m["role"] for m in later["messages"][1:3]] == ["assistant", "tool"]


def test_an_endpoint_without_a_tool_call_is_an_invalid_action(monkeypatch):
    """A reply with no `tool_calls` (a server without a tool parser) goes to the env as its text: invalid, with a
    how-to; the observation comes back as a user message."""
    from eppo_train.policy.agents import ChatAgent
    from eppo_train.policy.base import ChatBackend, ChatReply, SamplingParams

    class Talker(ChatBackend):
        seen: list = []

        def chat(self, conversations, params):
            raise AssertionError("the tools format asks chat_tools")

        def chat_tools(self, conversations, tools, params):
            Talker.seen.append(conversations[0])
            return [ChatReply("I think it is 50.") for _ in conversations]

    result = _rollout(ChatAgent(Talker(), SamplingParams()), "example/GuessNumber-v0", tools=True, seeds=(0,),
                      max_turns=2)
    turns = result.episodes[0].turns
    assert not turns[0].action_valid and "no tool call found" in turns[0].observation
    assert Talker.seen[-1][-1]["role"] == "user"


# ------------------------------------------------------------------ runs in the tools format
def test_a_run_refuses_a_template_without_tools_in_one_line(tmp_path, capsys):
    from eppo_train.cli import main

    assert main(["--config", "tiny", "--set", "env.action_format=tools", "--set", f"run.out_dir={tmp_path}",
                 "--set", "ray.enabled=false"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no tool support" in err and "env.action_format" in err
    assert main(["--config", "tiny", "--set", "env.action_format=json", "--set", f"run.out_dir={tmp_path}"]) == 2
    assert "env.action_format: one of tags, tools" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(3600)  # an SFT step took a minute on the shared 2-core machine under load
def test_tiny_model_trains_and_evaluates_in_the_tools_format(tmp_path, tiny_dir, capsys):
    """`make train ARGS="--model PATH --set env.action_format=tools"` in small: the SFT warm start on the expert's
    calls in the template's syntax, then RL iterations, then `eppo-eval` of the model in the tools format."""
    from eppo_train.cli import main as train_main
    from eppo_train.eval.cli import main as eval_main

    model = tool_model_dir(tiny_dir, tmp_path / "qwen-style-tiny", TEMPLATES["qwen25"])
    sets = [f"model.name={model}", "env.action_format=tools", f"run.out_dir={tmp_path / 'runs'}", "ray.enabled=false",
            "run.iterations=2", "sft.steps=4", "sft.batch_size=4", "sft.episodes=2", "rollout.max_new_tokens=40"]
    assert train_main(["--config", "tiny", *[a for s in sets for a in ("--set", s)]]) == 0
    run = tmp_path / "runs" / "tiny"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics][-1] >= 2
    out, transcripts = tmp_path / "eval.json", tmp_path / "eval.jsonl"
    args = ["--tasks", "guess_number", "--import", "eppo_envs.example.guess_number", "--no-progress", "--backend",
            "hf", "--episodes", "2", "--max-turns", "2", "--max-new-tokens", "40", "--action-format", "tools"]
    assert eval_main(["--policy", str(model), *args, "--json", str(out), "--transcripts", str(transcripts)]) == 0
    (stats,) = json.loads(out.read_text())["tasks"].values()
    assert stats["episodes"] == 2
    capsys.readouterr()
    assert eval_main(["--policy", "tiny", *args]) == 2  # SmolLM2's own template: one line
    assert "no tool support" in capsys.readouterr().err
