import json
import random
import re
import time

import gymnasium as gym
import pytest

import eppo_envs
import eppo_envs.example.guess_number  # noqa: F401
from eppo_envs.core import Episode, Turn, expert_policy, parsing, play_episode


def test_parse_single_tool_call():
    call = parsing.parse_tool_call("<think>go</think> <action> open fridge 1 </action>", ["action"])
    assert call.valid and call.tag == "action" and call.content == "open fridge 1"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "no tool call"),
        ("<action>go to desk 1", "never closed"),
        ("<search>x</search>", "not a tool of this task"),
        ("<action>a</action><action>b</action>", "exactly one"),
        ("<action></action>", "empty"),
        ("<think><action>hidden</action>", "no tool call"),
    ],
)
def test_parse_errors_explain(text, fragment):
    call = parsing.parse_tool_call(text, ["action"])
    assert not call.valid and fragment in call.error


def test_tags_are_case_insensitive_and_think_is_ignored():
    assert parsing.find_tags("<THINK><answer>1</answer></THINK><Answer>2</Answer>", ["answer"]) == [("answer", "2")]


def test_code_block_and_boxed():
    text = "draft\n```python\nx = 1\n```\nfixed:\n```python\ndef f():\n    return {1: 2}\n```"
    assert parsing.extract_code_block(text) == "def f():\n    return {1: 2}\n"
    assert parsing.extract_boxed(r"so \boxed{\frac{1}{2}} and then \boxed{3}") == "3"
    assert parsing.extract_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert parsing.extract_boxed("no box") is None
    assert parsing.extract_boxed(r"\boxed{\boxed{5}} \boxed{x") == "5" and parsing.extract_boxed("} \\boxed{1}}") == "1"
    assert parsing.extract_boxed(r"<think>maybe \boxed{3}</think> so 4") is None  # reasoning is not the answer
    assert parsing.extract_boxed(r"\boxed{4} <think>or \boxed{3}?") == "4"  # nor is an unclosed think


def test_boxed_answers_are_found_in_time_linear_in_the_reply():
    start = time.monotonic()  # one scan from each unclosed \boxed{ to the end: 49 s on this reply
    assert parsing.extract_boxed("\\boxed{" * (parsing.MAX_PARSE_CHARS // 7)) is None
    assert time.monotonic() - start < 2.0


def _regex_strip_think(text: str) -> str:
    """The regex form the linear scanner replaced, kept as the reference it must equal."""
    text = re.sub(r"<think>.*?</think>", " ", text, flags=re.DOTALL | re.IGNORECASE)
    return re.sub(r"<think>.*\Z", " ", text, flags=re.DOTALL | re.IGNORECASE)


def _regex_find_tags(text: str, tags: tuple[str, ...]) -> list[tuple[str, str]]:
    body = _regex_strip_think(parsing.clip(text))
    pattern = re.compile(rf"<({'|'.join(tags)})>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
    return [(m.group(1).lower(), m.group(2).strip()) for m in pattern.finditer(body)]


def test_tag_scanning_equals_the_regex_form_on_random_replies():
    pieces = ["<think>", "</think>", "<THINK>", "<answer>", "</answer>", "</Answer>", "<action>", "</action>",
              "<python>", "</python>", "<answer", "x", "1", " ", "\n", "<", ">", "/"]
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert parsing.strip_think(text) == _regex_strip_think(text), text
        for tags in (parsing.TOOL_TAGS, ("answer",), ("python", "answer")):
            assert parsing.find_tags(text, tags) == _regex_find_tags(text, tags), (text, tags)


@pytest.mark.parametrize("tag", ["answer", "think"])
def test_thousands_of_unclosed_tags_are_read_in_time(tag):
    reply = f"<{tag}>x" * (parsing.MAX_PARSE_CHARS // (len(tag) + 3))  # the regex form: seconds a search
    start = time.process_time()  # this process's CPU time: the same on a loaded machine
    for _ in range(3):  # a turn searches a reply more than once (its tags, then other tasks' tags)
        call = parsing.parse_tool_call(reply, ["answer"])
    assert not call.valid and time.process_time() - start < 1.0


def test_clip_handles_bytes_none_and_huge():
    assert parsing.clip(b"ab\xff") == "ab\ufffd"
    assert parsing.clip(None) == ""
    assert len(parsing.clip("x" * 10**6)) == parsing.MAX_PARSE_CHARS


def test_registry_and_gymnasium_make():
    assert "example/GuessNumber-v0" in eppo_envs.tasks()
    env = gym.make("example/GuessNumber-v0")
    obs, info = env.reset(seed=3)
    assert info["task"] == "guess_number" and info["instance_id"] == "guess_number/train/00003"
    assert eppo_envs.resolve("guess_number") == "example/GuessNumber-v0"
    with pytest.raises(gym.error.NameNotFound, match="registered EPPO tasks"):
        eppo_envs.make("eppo/Nope-v0")
    with pytest.raises(ValueError, match="namespaced"):
        eppo_envs.register("Bare-v0", entry_point="x:y", task="x")


def test_episode_json_round_trip():
    env = eppo_envs.make("example/GuessNumber-v0")
    episode = play_episode(env, expert_policy(env), seed=5, split="test")
    assert episode.won and episode.total_reward == 1.0 and episode.turns
    again = Episode.from_json(episode.to_json())
    assert again == episode and isinstance(again.turns[0], Turn)


def test_time_limit_truncates():
    env = eppo_envs.make("example/GuessNumber-v0", max_episode_steps=2)
    episode = play_episode(env, lambda obs, info: "<answer>0</answer>", seed=0)
    assert episode.truncated and not episode.won and episode.num_steps == 2


def test_seed_and_index_choose_the_same_instance():
    env = eppo_envs.make("example/GuessNumber-v0")
    _, a = env.reset(seed=1003)
    _, b = env.reset(options={"index": 3})
    assert a["instance_id"] == b["instance_id"]


def test_every_tasks_reward_changes_are_dated_lines_oldest_first():
    """`reward_changes` is the history every evaluation's `reward_revision` counts: one 'YYYY-MM-DD: what' line
    per change, in order, so a report can print what changed since a result was scored."""
    import re

    import eppo_envs
    from eppo_envs.core.registry import env_class, reward_revision

    for env_id in eppo_envs.tasks():
        changes = env_class(env_id).reward_changes
        assert all(re.match(r"\d{4}-\d{2}-\d{2}: \S", line) for line in changes), env_id
        assert [line[:10] for line in changes] == sorted(line[:10] for line in changes), env_id
        assert reward_revision(env_id) == 1 + len(changes)


def test_clip_replaces_lone_surrogates_and_keeps_pairs():
    # a JSON "\ud800" escape decodes to a lone surrogate, which UTF-8 cannot encode: a transcript holding it failed
    # to write, and Code's sandbox answered with the host's encoding error
    assert parsing.clip("a\ud800b") == "a\ufffdb"
    assert parsing.clip("\udfff") == "\ufffd"
    assert parsing.clip("\ud83d\ude00") == "\U0001f600"  # a pair written as two escapes is the character it encodes
    assert parsing.clip("caf\u00e9 \U0001f600") == "caf\u00e9 \U0001f600"


def test_info_stays_utf8_with_a_lone_surrogate():
    import eppo_envs.searchqa  # noqa: F401  (registers eppo/SearchQA-v0)

    env = eppo_envs.make("eppo/SearchQA-v0")
    env.reset(seed=0, options={"split": "test"})
    _, _, _, _, info = env.step("<search>river\ud800</search>")
    json.dumps(info, ensure_ascii=False).encode("utf-8")
    _, reward, _, _, info = env.step("<answer>x\ud800</answer>")
    json.dumps(info, ensure_ascii=False).encode("utf-8")
    assert reward == 0.0
    env.close()
