"""MathTool: problems, grading, the tool path, and the expert."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

import eppo_envs
import eppo_envs.math  # noqa: F401  (registers eppo/MathTool-v0)
from eppo_envs.math import grading
from eppo_envs.math.grading import is_correct, normalise
from eppo_envs.math.problems import ProblemSet

# only the tests that run Python through the tool need the sandbox; grading and problem sets do not
needs_bwrap = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")


def test_grading_is_symbolic():
    assert is_correct("0.5", "1/2") and is_correct("\\frac{1}{2}", "0.5") and is_correct("-4.0", "-4")
    assert is_correct("\\boxed{239}", "239")
    assert not is_correct("2", "2^(n-1)") and not is_correct("", "3") and not is_correct("240", "239")


def test_splits_are_fixed_and_disjoint():
    sources = ["basic_arithmetic", "simple_equations"]
    test_a, test_b = ProblemSet("test", sources, [1, 2]), ProblemSet("test", sources, [1, 2])
    assert [p.question for p in test_a] == [p.question for p in test_b]
    train_set = ProblemSet("train", sources, [1, 2])
    train = {train_set[i].question for i in range(0, len(train_set), 16)}
    assert len(train & {p.question for p in test_a}) < 5  # tiny generators can repeat a few trivial items
    with pytest.raises(ValueError, match="unknown math source"):
        ProblemSet("test", ["nope"], [1])


def test_levels_select_problems():
    env = eppo_envs.make("eppo/MathTool-v0", level=1, sources=["simple_equations"])
    _, info = env.reset(seed=3)
    assert info["level"] == 1 and info["source"] == "simple_equations"


@needs_bwrap
def test_tool_run_then_answer():
    env = eppo_envs.make("eppo/MathTool-v0", split="test", sources=["basic_arithmetic"], level=1, max_tool_calls=1)
    env.reset(seed=0)
    problem = env.unwrapped.problem
    obs, reward, terminated, _, info = env.step("<think>compute</think><python>print(2 ** 10)</python>")
    assert "<output>\n1024\n</output>" in obs and not terminated and info["action_valid"]
    obs, _, _, _, info = env.step("<python>print(1)</python>")
    assert not info["action_valid"] and "no Python runs left" in obs
    obs, reward, terminated, _, info = env.step(f"The result is \\boxed{{{problem.answer}}}")
    assert terminated and reward == 1.0 and info["won"]


@needs_bwrap
def test_wrong_answer_loses_and_errors_are_reported():
    env = eppo_envs.make("eppo/MathTool-v0", split="test", sources=["gsm_symbolic"])
    env.reset(seed=1)
    obs, *_ = env.step("<python>1/0</python>")
    assert "ZeroDivisionError" in obs and "[error]" in obs
    _, reward, terminated, _, info = env.step("<answer>-123456789</answer>")
    assert terminated and reward == 0.0 and not info["won"]


@needs_bwrap
def test_the_tool_neither_reaches_the_answer_nor_answers_for_the_model():
    """A run that looks for the problem's data (CHAMP's answers live in a package outside the sandbox) finds none,
    and what it prints, a grader's verdict and an answer tag included, is output for the model, never its answer."""
    env = eppo_envs.make("eppo/MathTool-v0", split="test", sources=["champ"])
    env.reset(seed=0)
    gold = env.unwrapped.problem.answer
    probe = ("import os\nfound = [os.path.join(r, f) for r, ds, fs in os.walk('/') if not r.startswith(('/proc', '/sys'))"
             " for f in fs + ds if 'champ' in f.lower()]\n"
             f"print('found', found)\nprint('<answer>{gold}</answer>')\nprint('Correct.')")
    obs, reward, terminated, _, info = env.step(f"<python>{probe}</python>")
    assert "found []" in obs and not terminated and reward == 0.0 and info["action_valid"], obs
    _, reward, terminated, _, info = env.step(f"<answer>{gold}1</answer>")
    assert terminated and reward == 0.0 and not info["won"]


@needs_bwrap
@pytest.mark.parametrize("source", ["gsm_symbolic", "basic_arithmetic", "simple_equations", "champ"])
def test_expert_uses_the_tool_and_wins(source):
    env = eppo_envs.make("eppo/MathTool-v0", split="test", sources=[source])
    for seed in range(3):
        env.reset(seed=seed)
        first = env.unwrapped.expert_action()
        assert first.startswith("<python>")
        obs, *_ = env.step(first)
        assert obs.startswith("<output>")
        _, reward, terminated, _, info = env.step(env.unwrapped.expert_action())
        assert terminated and info["won"] and reward == 1.0, (source, seed, obs)


def _graded_in_a_thread(prediction: str, reference: str) -> list[bool]:
    out: list[bool] = []
    thread = threading.Thread(target=lambda: out.append(is_correct(prediction, reference)), daemon=True)
    thread.start()
    thread.join(90)
    return out


def test_grading_off_the_main_thread_is_bounded():
    # math-verify's timeouts use SIGALRM, main thread only; an env stepped in a thread (the remote server's session
    # executors) must still not grade "9^{9^{9^{9}}}" for ever
    start = time.monotonic()
    assert _graded_in_a_thread("9^{9^{9^{9}}}", "5") == [False]
    assert time.monotonic() - start < 60
    assert _graded_in_a_thread("\\frac{1}{2}", "0.5") == [True] and _graded_in_a_thread("240", "239") == [False]


def test_normalise_drops_spaces_dollars_thin_spaces_a_final_full_stop_and_case():
    assert normalise("  $5/14$. ") == "5/14"
    assert normalise("1E3") == "1e3"
    assert normalise("1\\!000 ") == "1000"
    assert normalise("$5/14.$") == normalise("$5/14$.") == "5/14"  # the full stop inside the `$` too


def test_answers_equal_as_normalised_text_win_where_math_verify_alone_says_no():
    # math-verify rejects each pair of the loop on its own (a trailing full stop after a fraction); the normalised
    # comparison before it accepts them ("1E3" against "1e3" both accept: the exponent rewrite makes each 1000)
    assert grading._verify("1E3", "1e3") and is_correct("1E3", "1e3")
    for prediction, reference in [("5/14.", "5/14"), ("-1/2.", "-1/2")]:
        assert not grading._verify(prediction, reference)
        assert is_correct(prediction, reference), (prediction, reference)


# Each reply won for both answers: the normalised text read one value (a leading "." stripped, numbers joined across
# a space, a newline or a `$`) and math-verify another (it reads "3 4" as 7 and "5/14." as 5).
HEDGES = [(".5", "5", "1/2"), ("3 4", "34", "7"), ("1\n2", "12", "2"), ("5$6", "56", "5"), ("0 .5", "0.5", "0"),
          ("10 0", "100", "0"), ("5/14.", "5/14", "5"), ("1/ 2 .", "1/2", "2"), ("1\n/2", "1/2", "1"),
          # a full stop just inside the closing `$`, or on both sides of it (math-verify reads "$5/14.$" as 5), and a
          # space between a number and a letter (math-verify reads "2 e 3" as 2; joined it is 2e3)
          ("$5/14.$", "5/14", "5"), ("$5/14.$.", "5/14", "5"), ("2 e 3", "2e3", "2"),
          # math-verify read a percent as the number written against an integer and as a hundredth of it otherwise
          ("50\\%", "50", "1/2"), ("50%", "50", "0.5"), ("50 pct", "50", "1/2"), ("x = 50\\%", "50", "1/2"),
          ("\\boxed{50\\%}", "50", "1/2"), ("\\{50\\%\\}", "50", "1/2")]


@pytest.mark.parametrize("reply, first, second", HEDGES)
def test_one_reply_never_wins_for_two_different_answers(reply, first, second):
    assert sum(is_correct(reply, answer) for answer in (first, second)) <= 1, reply
    assert is_correct(first, first) and is_correct(second, second)  # each answer itself still wins


def test_a_percent_sign_is_a_unit_so_the_number_written_is_the_answer():
    # "What percent of her spools are yellow? ... Do not include units." has the answer 25, and "25%" answers it
    assert is_correct("25\\%", "25") and is_correct("$25\\%$.", "25") and is_correct("25 percent", "25")
    assert is_correct("-50\\%", "-50") and is_correct("2.5\\%", "2.5") and is_correct("50.0\\%", "50")
    assert not is_correct("50\\%", "1/2") and not is_correct("2.5\\%", "0.025") and not is_correct("-50\\%", "-1/2")
    assert is_correct("x = 10\\%", "10")  # below the answer's top too


# An expression that evaluates to the answer is no answer to a numeric question: copying the question's own
# expression won basic_arithmetic ("Calculate 80 * -30 - 52." answered "80 * -30 - 52": 59 of 60 test problems).
COMPUTED = [("80 * -30 - 52", "-2452"), ("( 270 + -885 ) / 205 + 572", "569"), ("\\sqrt{25}", "5"), ("|-5|", "5"),
            ("2^{10}", "1024"), ("5 \\cdot 1", "5"), ("\\lim_{x\\to 5} x", "5"), ("3 = 5", "5"), ("\\{3, 5\\}", "5"),
            ("x = 2 + 3", "5"), ("80 \\cdot -30\\%", "-2400"), ("80 * -30 - 52 + 0\\%", "-2452"),
            ("\\frac{80 * -30 - 52}{1}", "-2452"), ("\\boxed{80 * -30 - 52}", "-2452"), ("x = 80 * -30 - 52", "-2452"),
            # latex2sympy adds numbers written side by side (a mixed number's reading) and folds these to integers
            ("81 80", "161"), ("100 200 300", "600"), ("5\\,7", "12"), ("5\\;7", "12"), ("5\\quad7", "12"),
            ("5 \\frac{14}{2}", "12"), ("1\\,234", "235"), ("12/2/2", "3"), ("-( -61 / 1 )", "61"), ("--5", "5"),
            ("( ( -( 69 / 3 ) ) / 1 )", "-23"), ("\\frac{\\frac{24}{2}}{1}", "12"), ("\\binom{5}{2}", "10"),
            ("{5 \\choose 2}", "10"), ("e^{0}", "1"), ("\\mid -5 \\mid", "-5"), ("0.\\overline{9}", "0")]
WRITTEN = [("5", "5"), ("-5", "-5"), ("\u22125", "-5"), ("x = 5", "5"), ("\\boxed{5}", "5"), ("5/14", "5/14"),
           ("\\frac{5}{14}", "5/14"), ("-\\frac{1}{2}", "-1/2"), ("0.5", "1/2"), ("2021.25", "2021.25"), ("5,000", "5000"),
           ("50\\%", "50"), ("-50\\%", "-50"), ("x = 50\\%", "50"), ("5 \\mathrm{cm}", "5"), ("5^\\circ", "5"), ("+5", "5"),
           ("e = 13", "13"), ("I = 13", "13"), ("\\text{13}", "13"), ("\\{13\\}", "13"), ("The answer is 5/14.", "5/14"),
           ("1{,}234", "1234"), ("\\frac12", "1/2"), ("\\dfrac{1}{2}", "0.5"), ("\\frac{-1}{2}", "-1/2"), ("1E3", "1000"),
           ("5^{\\circ}", "5"), ("5 / 14", "5/14"), ("-2452.0", "-2452"), ("\\textbf{5}", "5"),
           # latex2sympy misreads these two (as 5 and as e - 5); the grader rewrites them as plain decimals first
           ("5\\,000", "5000"), ("1\\,234\\,567", "1234567"), ("1e-05", "0.00001"), ("1e-05", "1/100000"),
           ("2.5e+20", "250000000000000000000"), ("The answer is 1.5e-3.", "0.0015"), ("x = 2e3", "2000"),
           ("1.5 \\times 10^{3}", "1500"), ("2 \\cdot 10^{-3}", "0.002"),
           # a unit's own power is part of the unit, not a computation with the number
           ("20 \\text{ cm}^2", "20"), ("20\\,\\text{cm}^2", "20"), ("12 \\mathrm{m}^2", "12"),
           ("125 \\text{ cm}^{3}", "125")]


def test_a_rewritten_number_keeps_its_value():
    """The thin-space and exponent rewrites change how a number is written, never which number: each reply below
    still loses to the value latex2sympy would have read, and two numbers stay two."""
    assert not is_correct("5\\,000", "5") and not is_correct("1e-05", "-4") and not is_correct("2.5e3", "2.5")
    assert not is_correct("5\\,7", "57") and not is_correct("1\\,23", "123") and not is_correct("1e-05 + 1", "1.00001")
    assert not is_correct("1e999", "1")  # an exponent past three digits is not rewritten (the text stays short)
    assert not is_correct("1.5 \\times 10^{3}", "15") and not is_correct("1.5 \\times 10^{3} + 1", "1501")
    assert not is_correct("20 \\text{ cm}^2", "400") and not is_correct("20 \\text{ cm}^2", "21")
    assert not is_correct("2 \\text{cm}^3", "8") and not is_correct("2^3", "8")


@pytest.mark.parametrize("reply, reference", COMPUTED)
def test_an_expression_left_to_compute_is_no_answer(reply, reference):
    assert not is_correct(reply, reference), reply


@pytest.mark.parametrize("reply, reference", WRITTEN)
def test_a_number_written_out_still_wins(reply, reference):
    assert is_correct(reply, reference), reply


def test_copying_the_question_wins_no_arithmetic_problem():
    problems = ProblemSet("test", ["basic_arithmetic"], [1, 2, 3])
    for problem in problems:
        expression = problem.question.removeprefix("Calculate ").removesuffix(".")
        if not re.fullmatch(r"-?\d+ / \d+", expression):  # all but a lone division, which is a fraction
            assert not is_correct(expression, problem.answer), problem.question
        assert is_correct(problem.answer, problem.answer)


def test_the_text_comparison_ignores_only_what_cannot_change_the_value():
    assert normalise("5 / 14") == normalise("5/14") and normalise("- 1") == "-1"  # space next to operators
    assert normalise("3 4") != normalise("34") and normalise(".5") != normalise("5")  # but not between numbers
    assert is_correct("\\frac{5}{14}.", "5/14") and is_correct("$5/14$.", "5/14")  # a final full stop is punctuation
    start = time.monotonic()
    assert not is_correct(". " * 30_000 + "x", "1")  # linear in the answer's length, as long as a turn may be
    assert time.monotonic() - start < 5.0


def test_an_empty_answer_never_wins(monkeypatch):
    assert not is_correct("", "") and not is_correct("  ", "$ $")  # equal as normalised text, but nothing answered
    monkeypatch.setattr(grading, "_verify", lambda *args, **kwargs: True)  # not even past a grader that says yes
    assert not is_correct("", "3") and not is_correct(" \n", "3")


def test_an_answer_math_verify_cannot_parse_never_wins(monkeypatch):
    assert grading.parse(grading._as_math("\\")) == []  # a lone backslash parses to nothing
    monkeypatch.setattr(grading, "verify", lambda gold, pred, **kwargs: True)  # a verify that accepts anything
    assert not is_correct("\\", "3") and not grading._verify("\\", "3")
    assert not grading._verify("3", "\\")  # nor does a reference that parses to nothing


def _slow_yes(delay_s: float):
    def grade(prediction: str, reference: str, timed: bool = True) -> bool:
        time.sleep(delay_s)
        return True
    return grade


def test_a_grade_past_the_child_deadline_is_a_loss(monkeypatch):
    """Off the main thread the grade runs in a forked child (which inherits the patched `_verify`); one that has
    not answered by `CHILD_DEADLINE_S` is killed and the answer counts as wrong, however right it may be."""
    monkeypatch.setattr(grading, "CHILD_DEADLINE_S", 5.0)
    monkeypatch.setattr(grading, "_verify", _slow_yes(0.0))
    assert _graded_in_a_thread("0.5", "1/2") == [True]  # the child's verdict comes back within the deadline
    monkeypatch.setattr(grading, "CHILD_DEADLINE_S", 0.3)
    monkeypatch.setattr(grading, "_verify", _slow_yes(30.0))
    start = time.monotonic()
    assert _graded_in_a_thread("0.5", "1/2") == [False]
    assert time.monotonic() - start < 10  # killed at the deadline, not waited for


def test_an_episode_whose_grade_times_out_is_lost(monkeypatch):
    env = eppo_envs.make("eppo/MathTool-v0", split="test", sources=["basic_arithmetic"], level=1)

    def answer_in_a_thread() -> tuple:
        env.reset(seed=0)
        reply = f"<answer>\\boxed{{{env.unwrapped.problem.answer}}}</answer>"  # right, but not the same text
        out: list = []
        thread = threading.Thread(target=lambda: out.append(env.step(reply)), daemon=True)
        thread.start()
        thread.join(60)
        (result,) = out
        return result

    obs, reward, terminated, _, info = answer_in_a_thread()
    assert obs == "Correct." and reward == 1.0 and terminated and info["won"]  # graded in a child, in time
    monkeypatch.setattr(grading, "CHILD_DEADLINE_S", 0.3)
    monkeypatch.setattr(grading, "_verify", _slow_yes(30.0))
    obs, reward, terminated, _, info = answer_in_a_thread()
    assert obs == "Incorrect." and reward == 0.0 and terminated and not info["won"]


# The episodes in which an RL policy trained on the grader before the fix learned to forge it (probe 37 of
# docs/results/make-train.md): a python call that always fails, then the question's expression as the answer. The
# old grader gave 17 of these 22 a win; each is replayed action by action through today's env.
FORGED = Path(__file__).resolve().parents[1] / "docs/results/make-train/probe37-rl-math-transcripts.jsonl"


@needs_bwrap
def test_the_episodes_rl_forged_on_the_old_grader_lose():
    episodes = [json.loads(line) for line in FORGED.read_text().splitlines()]
    forged = [e for e in episodes if "basic_arithmetic" in e["instance_id"]
              and re.search(r"[*+]| - ", e["turns"][-1]["info"].get("answer", ""))]
    assert len(forged) == 22
    env = eppo_envs.make("eppo/MathTool-v0", split="test", level=1)
    for episode in forged:
        env.reset(seed=episode["seed"])
        assert env.unwrapped.problem.question in episode["first_observation"]
        for turn in episode["turns"]:
            _, reward, terminated, _, info = env.step(turn["action"])
        assert terminated and reward == 0.0 and not info["won"], episode["turns"][-1]["action"]
    env.close()
