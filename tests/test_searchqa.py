"""Search QA: the Search-R1 protocol, answer scoring, the corpora's questions, user data and the expert."""

import json
import re
from collections import Counter

import pytest

import eppo_envs
from eppo_envs.core.play import expert_policy, play_episode
from eppo_envs.searchqa import wordnet
from eppo_envs.searchqa.answers import exact_match, f1_score, normalize_answer
from eppo_envs.searchqa.sources import load_source


@pytest.fixture(scope="module")
def env():
    return eppo_envs.make("eppo/SearchQA-v0", split="test")


def test_search_r1_normalisation():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert exact_match("an Apple.", ["apple"]) and not exact_match("apples", ["apple"])
    assert f1_score("the big red apple", ["red apple"]) == pytest.approx(2 / 3 * 2 / (2 / 3 + 1) * 1.0, rel=1e-6)
    assert f1_score("", ["x"]) == 0.0


def test_protocol_search_then_answer(env):
    obs, info = env.reset(seed=3)
    assert info["instance_id"].startswith("searchqa/kb/test/") and obs.startswith("Question: ")
    assert "<search>" in info["instruction"] and "<answer>" in info["instruction"]
    obs, reward, terminated, _, info = env.step(env.unwrapped.expert_action())
    assert re.match(r"<information>Doc 1 \(Title: .+?\) ", obs) and obs.count("\nDoc ") == 2  # top-3
    assert not terminated and reward == 0 and info["action_valid"] and len(info["retrieved"]) == 3
    question = env.unwrapped.question
    obs, reward, terminated, _, info = env.step(f"<think>sure</think><answer> {question.answers[0].upper()}. </answer>")
    assert terminated and reward == 1.0 and info["won"] and info["em"] == 1.0 and info["f1"] == 1.0


def test_wrong_answer_and_bad_turns(env):
    env.reset(seed=4)
    _, reward, _, _, info = env.step("no tags at all")
    assert not info["action_valid"] and reward == 0
    obs, _, _, _, info = env.step("<search>a</search><search>b</search>")
    assert not info["action_valid"] and "found 2 tool calls" in obs
    obs, reward, terminated, _, info = env.step("<answer>Nobody</answer>")
    assert terminated and reward == 0.0 and not info["won"] and info["f1"] == 0.0


def test_hedged_answers_and_tags_injected_in_a_query_never_win(env):
    env.reset(seed=5)
    gold = env.unwrapped.question.answers[0]
    for query in (f"x</information><answer>{gold}</answer>", f"x </information> {gold}"):  # a query, no more
        obs, reward, terminated, _, info = env.step(f"<search>{query}</search>")
        assert not terminated and reward == 0.0 and info["query"] == query and obs.startswith("<information>")
    obs, reward, terminated, _, info = env.step(f"<search>x</search><answer>{gold}</answer>")
    assert not terminated and reward == 0.0 and not info["action_valid"]  # two calls: one per turn
    for hedge in (f"{gold} or engineer", f"engineer, {gold}", f"{gold}\n{gold}", f"<answer>{gold}"):
        env.reset(seed=5)
        _, reward, terminated, _, info = env.step(f"<answer>{hedge}</answer>")
        assert terminated and reward == 0.0 and not info["won"], hedge  # exact match, as Search-R1's em_check


def test_search_limit_then_turn_limit():
    env = eppo_envs.make("eppo/SearchQA-v0", split="test", max_searches=2)
    env.reset(seed=0)
    for _ in range(2):
        assert env.step("<search>city</search>")[4]["action_valid"]
    obs, _, terminated, _, info = env.step("<search>city</search>")
    assert not info["action_valid"] and "used all 2 searches" in obs and not terminated
    _, _, terminated, _, info = env.step("<search>again</search>")
    assert not terminated
    obs, _, terminated, _, info = env.step("<search>again</search>")
    assert terminated and not info["won"] and "turn limit" in obs


def test_expert_wins_kb_test_split(env):
    n = 150
    wins = sum(play_episode(env, expert_policy(env), seed=i, split="test").won for i in range(n))
    assert wins >= 0.98 * n


def test_kb_answers_need_a_search():
    """No test answer is in its question, and answering without searching (guessing any name or year the
    question contains, or the most common training answer) wins no more than chance."""
    questions = load_source("kb").questions
    common = Counter(a for q in questions["train"] for a in q.answers).most_common(1)[0][0]
    test = questions["test"]
    assert not any(normalize_answer(q.answers[0]) in normalize_answer(q.question) for q in test)
    guesses = sum(exact_match(common, q.answers) for q in test)
    chance = Counter(a for q in test for a in q.answers).most_common(1)[0][1]  # the best constant guess
    assert guesses <= chance <= 0.05 * len(test)
    assert all(len(q.hops) >= 1 for q in test)


def test_splits_are_fixed_and_disjoint():
    questions = load_source("kb").questions
    assert len(questions["train"]) == 5000 and len(questions["test"]) == 500
    assert not {q.question for q in questions["train"]} & {q.question for q in questions["test"]}
    starts_train = {q.hops[0].doc_id for q in questions["train"]}
    assert not starts_train & {q.hops[0].doc_id for q in questions["test"]}


def test_wordnet_parsing():
    line = ("02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 001 @ 02083346 n 0000 | a member of the "
            'genus Canis; "the dog barked all night"  ')
    s = wordnet.parse_line(line)
    assert s.lemmas == ("dog", "domestic dog", "Canis familiaris") and s.hypernyms == ("n/02083346",)
    assert s.definition == "a member of the genus Canis" and s.examples.startswith('"the dog')
    assert len(wordnet.load_synsets()) >= 100_000


def test_user_corpus_and_questions(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"id": "1", "contents": '"Ulmo Bay"\nUlmo Bay is where the Zephyr Cup is held.'},
            {"id": "2", "title": "Zephyr Cup", "text": "The Zephyr Cup is a sailing race."}]
    corpus.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    qa = tmp_path / "qa.jsonl"
    qa.write_text("\n".join(json.dumps({"question": f"Where is the Zephyr Cup held? ({i})",
                                        "golden_answers": ["Ulmo Bay"]}) for i in range(12)) + "\n")
    env = eppo_envs.make("eppo/SearchQA-v0", split="test", corpus="user", corpus_path=str(corpus), qa_path=str(qa))
    episode = play_episode(env, expert_policy(env), seed=0, split="test")
    assert episode.won and episode.instance_id == "searchqa/corpus/test/00000"
    assert "Doc 1 (Title: Ulmo Bay)" in episode.turns[0].observation
    with pytest.raises(ValueError, match="qa_path"):
        eppo_envs.make("eppo/SearchQA-v0", corpus="user", corpus_path=str(corpus))


@pytest.mark.slow
def test_expert_wins_wordnet_test_split():
    env = eppo_envs.make("eppo/SearchQA-v0", split="test", corpus="wordnet")
    wins = sum(play_episode(env, expert_policy(env), seed=i, split="test").won for i in range(500))
    assert wins >= 0.98 * 500


def test_exact_match_and_f1_by_hand():
    assert normalize_answer("A  Tale of\tTwo  Cities ") == "tale of two cities"  # "a" is an article too
    assert normalize_answer("the end") == "end" and normalize_answer("Theatre") == "theatre"
    # exact, not contained; any gold answer, not all
    assert not exact_match("paris", ["paris france"]) and exact_match("Paris", ["Lyon", "paris"])
    # precision 1/3, recall 1/1 -> F1 0.5; the best over the gold answers (0.5 against "apple", 0.4 against
    # "apple pie", none against "pear"); a repeated token is matched as often as both sides have it
    assert f1_score("red big apple", ["apple"]) == pytest.approx(0.5)
    assert f1_score("red big apple", ["apple", "apple pie", "pear"]) == pytest.approx(0.5)
    assert f1_score("apple apple", ["apple"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1_score("apple apple", ["apple apple"]) == 1.0
    from eppo_envs.searchqa.answers import answer_in_text

    assert answer_in_text(["Ulmo"], "the bay of ulmo.") and not answer_in_text(["Ulmo"], "the Ulmonian bay")
