"""Code-v0: HumanEval and generated problems, test feedback, the expert, and invalid replies."""

from __future__ import annotations

from pathlib import Path

import pytest

import eppo_envs
import eppo_envs.code  # noqa: F401  (registers eppo/Code-v0)
from eppo_envs.code.generated import FAMILIES, generated_problems
from eppo_envs.code.humaneval import humaneval_problems

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")


def expert_wins(env, indices):
    lost = []
    for i in indices:
        env.reset(options={"index": i})
        obs, reward, terminated, _, info = env.step(env.unwrapped.expert_action())
        if not (info["won"] and reward == 1.0 and info["pass_fraction"] == 1.0):
            lost.append((info["instance_id"], obs))
    return lost


def test_problem_sets():
    assert len(humaneval_problems()) == 164
    generated = generated_problems()
    assert len(generated) >= 500 and {p.level for p in generated} == {1, 2, 3, 4}
    assert len({p.entry_point for p in generated}) == len(generated)
    assert generated == tuple(generated_problems.__wrapped__())  # deterministic
    assert len(FAMILIES) >= 10


def test_all_humaneval_canonical_solutions_pass():
    env = eppo_envs.make("eppo/Code-v0", split="test")
    assert expert_wins(env, range(164)) == []  # ~15 s here: cheap enough for the default suite


def test_generated_sample_expert_wins_at_every_level():
    for level in (1, 2, 3, 4):
        env = eppo_envs.make("eppo/Code-v0", split="train", level=level)
        assert env.unwrapped.num_instances("train") == 200
        assert expert_wins(env, range(0, 200, 40)) == []


def _passes(code: str, entry_point: str, tests: str) -> bool:
    namespace: dict = {}
    try:  # the generator's own reference bodies, not model output: run here, without the sandbox
        exec(code, namespace)
        exec(tests, namespace)
        namespace["check"](namespace[entry_point])
    except Exception:
        return False
    return True


def test_level_4_tests_reject_every_other_problem_of_the_family():
    """A level-4 body is drawn step by step, so a near miss (one step wrong) is another problem of the same family:
    each problem's hidden tests must reject every other problem's body that differs from its own."""
    by_family: dict[str, list] = {}
    for problem in generated_problems():
        if problem.level == 4:
            by_family.setdefault(problem.entry_point.rsplit("_", 1)[0], []).append(problem)
    assert len(by_family) == 4 and all(len(problems) == 50 for problems in by_family.values())
    accepted = []
    for problems in by_family.values():
        bodies = [p.reference[len(p.prompt):] for p in problems]
        for problem, own in zip(problems, bodies, strict=True):
            assert _passes(problem.reference, problem.entry_point, problem.tests), problem.key
            for body in set(bodies) - {own}:
                if _passes(problem.prompt + body, problem.entry_point, problem.tests):
                    accepted.append((problem.key, body))
    assert accepted == []


def test_wrong_solution_gets_failing_test_then_runs_out():
    env = eppo_envs.make("eppo/Code-v0", split="test", max_attempts=2)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("```python\ndef has_close_elements(numbers, threshold):\n    return False\n```")
    assert reward == 0.0 and not terminated and info["action_valid"]
    assert 0 < info["pass_fraction"] < 1 and "Failed test `assert candidate(" in obs
    obs, reward, terminated, _, info = env.step("```python\n    return True\n```")  # a body completes the prompt
    assert terminated and reward == 0.0 and not info["won"] and "No attempts left" in obs


def test_the_last_test_not_yet_shown_stays_hidden():
    """A failing test is shown with its expected value, so on a problem with one or two tests a reply could copy
    them all and win (HumanEval/34: `return [0, 2, 3, 5, 9, 123]` on the second attempt). The last test the model
    has not seen is only named as failing; the ones already shown are shown again."""
    env = eppo_envs.make("eppo/Code-v0", split="test", max_attempts=3)
    env.reset(options={"index": 34})  # one test: never shown
    obs, *_ = env.step("```python\ndef unique(l: list):\n    return []\n```")
    assert "0/1 tests passed" in obs and "A hidden test failed" in obs and "123" not in obs

    env.reset(options={"index": 29})  # two tests: the first one to fail is shown, the other never
    obs, *_ = env.step("```python\n    return ['x']\n```")
    assert "Failed test `assert candidate([], 'john') == []`" in obs
    obs, *_ = env.step("```python\n    return []\n```")
    assert "1/2 tests passed" in obs and "A hidden test failed" in obs and "xxxAAA" not in obs
    obs, *_ = env.step("```python\n    return ['x']\n```")  # fails the shown test again: shown again
    assert "Failed test `assert candidate([], 'john') == []`" in obs and "xxxAAA" not in obs


def test_cheating_and_crashing_solutions_fail():
    env = eppo_envs.make("eppo/Code-v0", split="train", level=1)
    for code in [
        "import sys\nprint('@@0@@{\"kind\": \"done\", \"ok\": true}')\nsys.exit(0)",  # fake result lines, then exit
        "import os\nos._exit(0)",
        "while True:\n    pass",
        "def add_const_000(x):\n    return (",  # syntax error: no sandbox run needed
    ]:
        env.reset(options={"index": 0})
        _, reward, _, _, info = env.step(f"```python\n{code}\n```")
        assert reward == 0.0 and not info["won"] and info["pass_fraction"] == 0.0, code


@pytest.mark.parametrize("reply", ["def f(): pass", "```python\ndef f(): pass", "```python\n   \n```", "<answer>1</answer>"])
def test_replies_without_a_complete_block_are_invalid(reply):
    env = eppo_envs.make("eppo/Code-v0", split="test")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(reply)
    assert not info["action_valid"] and not terminated and "fenced code block" in obs
    assert env.unwrapped.attempts == 0  # no attempt used, nothing run
