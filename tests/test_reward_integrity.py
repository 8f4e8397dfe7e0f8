"""Reward integrity under a policy's attacks on the text tasks: no reply may turn a loss into a win (or a win into a
loss), and a malformed one is refused, not half-read. Each test pins a hole found by attacking the real envs."""

from __future__ import annotations

import pytest
from gymnasium.error import ResetNeeded

import eppo_envs
import eppo_envs.alfworld  # noqa: F401  (registers the ids)
import eppo_envs.example.guess_number  # noqa: F401


def _play_past_the_cap(env_id: str, **kwargs) -> None:
    """Two idle steps hit a cap of 2 (truncated); the expert's next move must be refused, not scored."""
    env = eppo_envs.make(env_id, max_episode_steps=2, **kwargs)
    env.reset(seed=0)
    for _ in range(2):
        _, reward, terminated, truncated, info = env.step("no tool call")
    assert truncated and not terminated and not info["won"]
    for _ in range(6):  # without the guard the expert would go on and win on step 4 (ALFWorld) / 3-5 (guess)
        with pytest.raises(ResetNeeded, match=r"truncated.*call reset\(\)"):
            env.step(env.unwrapped.expert_action())
    env.reset(seed=0)  # a new episode steps again
    env.step(env.unwrapped.expert_action())
    env.close()


@pytest.mark.parametrize("env_id, kwargs", [("example/GuessNumber-v0", {}),
                                            ("eppo/ALFWorld-v0", {"split": "valid_unseen"})])
def test_no_step_and_no_win_past_the_step_cap(env_id, kwargs):
    _play_past_the_cap(env_id, **kwargs)


def test_the_remote_session_refuses_a_step_past_the_cap():
    from eppo_envs.remote.environment import EppoEnvironment
    from eppo_envs.remote.models import TextAction

    session = EppoEnvironment("example/GuessNumber-v0", env_kwargs={"max_episode_steps": 1})
    session.reset(seed=0)
    assert session.step(TextAction(text="no tool call")).done
    with pytest.raises(ResetNeeded):  # the server answers 409, as after a terminated episode
        session.step(TextAction(text=session.env.unwrapped.expert_action()))
    session.close()


@pytest.fixture(scope="module")
def alfworld():
    env = eppo_envs.make("eppo/ALFWorld-v0", split="valid_unseen")
    yield env
    env.close()


def test_alfworld_reads_a_bare_command_only_from_a_reply_without_tags(alfworld):
    _, info = alfworld.reset(seed=0)
    target = [a for a in info["admissible_actions"] if a.startswith("go to ")][1]
    # an unclosed tag, or another tool's, is not a command even when its last line is one
    for reply in (f"<action>\n{target}", f"<think>x</think><action>\n{target}\n", f"<answer>\n{target}",
                  f"<search>x</search>\n{target}", f"</action>\n{target}"):
        obs, reward, terminated, _, info = alfworld.step(reply)
        assert not info["action_valid"] and "command" not in info and "You arrive" not in obs, reply
    for reply in (target, f"I will move.\n{target}", f"<think>plan</think>\n{target.upper()}."):  # still tolerated
        alfworld.reset(seed=0)
        obs, _, _, _, info = alfworld.step(reply)
        assert info["action_valid"] and info["command"] == target and obs.startswith("You arrive"), reply


@pytest.fixture
def frame_shop(tmp_path, monkeypatch):
    """WebShop's file format with option values outside ASCII, as Amazon's sizes often are ("4\u00d76")."""
    import json

    monkeypatch.setenv("EPPO_CACHE_DIR", str(tmp_path / "cache"))

    def item(asin: str, name: str, sizes: list[str]) -> dict:
        return {"asin": asin, "name": name, "query": "photo frame", "category": "home",
                "product_category": "Home \u203a Decor \u203a Frames", "full_description": name, "pricing": "$10.00",
                "small_description": ["wood"], "customization_options": {"Size": [{"value": s} for s in sizes]}}

    files = {
        "items": [item("B0FRAME001", "Wood Photo Frame", ["4\u00d76", "5\u00d77", "8\u00d710"]),
                  item("B0FRAME002", "Metal Photo Frame", ["4x6"])],
        "attributes": {"B0FRAME001": {"attributes": ["wood"]}, "B0FRAME002": {"attributes": ["metal"]}},
        "human": {"B0FRAME001": [{"instruction": f"a wood photo frame, {size}", "instruction_attributes": ["wood"],
                                  "instruction_options": [size]} for size in ("4\u00d76", "5\u00d77")]},
    }
    for name, data in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    env = eppo_envs.make("eppo/WebShop-v0", split="test", items_path=str(tmp_path / "items.json"),
                         attributes_path=str(tmp_path / "attributes.json"),
                         human_instructions_path=str(tmp_path / "human.json"))
    yield env
    env.close()


def test_webshop_scores_the_chosen_value_not_its_printable_label(frame_shop):
    """The page shows "4\u00d76" as [4x6]; buying it for a "4\u00d76" goal scored 2/3 (the label "4x6" against the
    goal's "4\u00d76", which thefuzz reads as "46"), where WebShop, comparing the product's own value, gives 1."""
    from eppo_envs.core import expert_policy, play_episode

    for split in ("test", "train"):
        for pick, right in ((None, True), ("8x10", False)):
            _, info = frame_shop.reset(seed=0, options={"split": split})
            wanted = next(iter(frame_shop.unwrapped.goal.options.values())).replace("\u00d7", "x")
            frame_shop.step("<action>search[wood photo frame]</action>")
            frame_shop.step("<action>click[B0FRAME001]</action>")
            obs, *_ = frame_shop.step(f"<action>click[{pick or wanted}]</action>")
            assert f"[{pick or wanted}] (selected)" in obs
            _, reward, terminated, _, info = frame_shop.step("<action>click[buy now]</action>")
            assert terminated and info["won"] is right and reward == (1.0 if right else pytest.approx(2 / 3)), split
        assert play_episode(frame_shop, expert_policy(frame_shop), seed=0, split=split).won


def test_searchqa_user_answers_are_text_and_never_empty_once_normalised(tmp_path, caplog):
    """A numeric golden answer is read as text (no 'int' object has no attribute 'lower' at the answer step); a
    golden answer that normalises to "" ("The The") is dropped, else '<answer>a</answer>' would win it, as would any
    article or punctuation."""
    import json
    import logging

    monkey_cache = tmp_path / "cache"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "contents": '"Ulmo Bay"\nUlmo Bay was founded in 1987 by The The.'}))
    rows = [{"question": f"When was Ulmo Bay founded? ({i})", "golden_answers": [1987]} for i in range(10)]
    rows += [{"question": "Which band founded Ulmo Bay?", "golden_answers": ["The The"]},  # nothing left: skipped
             {"question": "Who sang in The The?", "golden_answers": ["The", "Matt Johnson"], "split": "test"}]
    qa = tmp_path / "qa.jsonl"
    qa.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.MonkeyPatch.context() as mp, caplog.at_level(logging.WARNING):
        mp.setenv("EPPO_CACHE_DIR", str(monkey_cache))
        env = eppo_envs.make("eppo/SearchQA-v0", split="test", corpus="user", corpus_path=str(corpus), qa_path=str(qa))
    assert "dropped 2 golden answers that normalise to nothing" in caplog.text and "1 questions" in caplog.text
    questions = env.unwrapped.source.questions
    assert sum(len(q) for q in questions.values()) == 11
    assert not any("Which band" in q.question for q in questions["train"] + questions["test"])
    for seed, question in enumerate(questions["test"]):
        for reply, won in (("<answer>a</answer>", False), ("<answer>.</answer>", False),
                           (f"<answer>{question.answers[0]}</answer>", True)):
            env.reset(seed=seed)
            _, reward, terminated, _, info = env.step(reply)
            assert terminated and info["won"] is won and reward == float(won), (question, reply)
    assert {a for q in questions["test"] for a in q.answers} == {"1987", "Matt Johnson"}
    env.close()


def test_a_nul_character_joins_nothing():
    """clip() dropped NUL characters, so '<answer>Par\\x00is</answer>' won for "Paris" (Search-R1's exact match reads
    "par\\x00is") and a NUL inside a number joined its digits; it now stands as U+FFFD."""
    import eppo_envs.math  # noqa: F401  (registers eppo/MathTool-v0)
    import eppo_envs.searchqa  # noqa: F401

    env = eppo_envs.make("eppo/SearchQA-v0", split="test")
    for seed in range(5):
        env.reset(seed=seed)
        answer = env.unwrapped.question.answers[0]
        cut = len(answer) // 2
        for reply, won in ((f"<answer>{answer[:cut]}\x00{answer[cut:]}</answer>", False), (f"<answer>{answer}</answer>", True)):
            env.reset(seed=seed)
            _, reward, terminated, _, info = env.step(reply)
            assert terminated and info["won"] is won and reward == float(won), reply
    env.close()
    env = eppo_envs.make("eppo/MathTool-v0", split="test", sources=["basic_arithmetic"], level=3)
    env.reset(seed=0)
    answer = env.unwrapped.problem.answer
    assert len(answer.lstrip("-")) > 1
    _, reward, terminated, _, info = env.step(f"<answer>{answer[:-1]}\x00{answer[-1]}</answer>")
    assert terminated and not info["won"] and reward == 0.0
    env.close()
