"""Code-v0's verdict cannot be forged: hostile solutions of every known class lose, on generated problems and on
HumanEval, while correct solutions that print, or that drop the prompt's helpers, still win."""

from __future__ import annotations

import ast
import math
import textwrap
import time
from pathlib import Path

import pytest

import eppo_envs
import eppo_envs.code  # noqa: F401  (registers eppo/Code-v0)
from eppo_envs.code import env as code_env
from eppo_envs.code import wire
from eppo_envs.code.harness import run_tests
from eppo_envs.code.humaneval import humaneval_problems
from eppo_envs.code.problems import CodeProblem

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")

# Each is a whole reply body; {fn} is the entry point. None solves anything.
HOSTILE = {
    "nonce result lines (won 1.0 before the judge moved out)": """
        import sys, os
        nonce = getattr(sys.modules['__main__'], '_NONCE', '@@0@@')
        for i in range(50):
            print(nonce + '{"kind": "test", "ok": true}')
        print(nonce + '{"kind": "done", "ok": true}')
        sys.stdout.flush()
        os._exit(0)
        """,
    "fake replies from the harness state": """
        import os, sys
        main = sys.modules['__main__']
        rep = main._REP  # the reply channel, found by inspecting the harness
        os.write(rep, b'["loaded",true]\\n' + b'["value",true]\\n' * 5000)
        os._exit(0)
        """,
    "forged replies with gc and frames": """
        import gc, sys, os
        secrets = [o for o in gc.get_objects() if isinstance(o, str) and o.startswith('@@')]
        frame = sys._getframe()
        while frame.f_back:
            frame = frame.f_back
        frame.f_globals['encode'] = lambda value: 'true'  # every reply now says True
        def {fn}(*args):
            return None
        """,
    "exit 0 while loading": "import sys\nsys.exit(0)",
    "os._exit while loading": "import os\nos._exit(0)",
    "SystemExit in each call": "def {fn}(*args):\n    raise SystemExit(0)",
    "os._exit in the first call": "import os\ndef {fn}(*args):\n    os._exit(0)",
    "atexit writes results": """
        import atexit, os, sys
        rep = int(sys.argv[2])
        atexit.register(lambda: os.write(rep, b'["value",true]\\n' * 1000))
        def {fn}(*args):
            raise SystemExit(0)
        """,
    "patched assert, unittest and builtins": """
        import builtins, unittest
        builtins.AssertionError = type('Never', (BaseException,), {})
        unittest.TestCase.assertEqual = lambda *a, **k: None
        builtins.abs = lambda x: 0
        builtins.isinstance = lambda *a: True
        def {fn}(*args):
            return None
        """,
    "__eq__ always true": """
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
            def __lt__(self, other):
                return True
            def __sub__(self, other):
                return 0
        def {fn}(*args):
            return Anything()
        """,
    "builtin subclasses with __eq__": """
        class S(str):
            __eq__ = lambda self, other: True
            __hash__ = str.__hash__
        class I(int):
            __eq__ = lambda self, other: True
            __hash__ = int.__hash__
        class L(list):
            __eq__ = lambda self, other: True
        def {fn}(*args):
            return [S('x'), I(3), L()][len(args) % 3]
        """,
    "prints look-alike result lines": """
        print('["loaded",true]')
        print('@@0@@{"kind": "done", "ok": true}' * 100)
        def {fn}(*args):
            print('["value",true]\\n' * 50)
            return None
        """,
    "reads and writes files": """
        import glob, os
        for path in glob.glob('/sandbox/*') + glob.glob('/proc/*/cmdline'):
            try:
                open(path, 'rb').read()
            except OSError:
                pass
        with open('/sandbox/results.json', 'w') as f:
            f.write('{"passed": true}')
        def {fn}(*args):
            return None
        """,
    "replaces the server's send": """
        import sys
        main = sys.modules['__main__']
        real = main._send
        main._send = lambda text: real('["value",true]' if text.startswith('["raise"') else text)
        def {fn}(*args):
            raise ValueError('no')
        """,
    "unsendable self-referencing value": """
        def {fn}(*args):
            x = []
            x.append(x)
            return x
        """,
    "huge reply": "def {fn}(*args):\n    return 'x' * (6 << 20)",
    "forked child writes replies while the parent sleeps": """
        import os, sys, time
        rep = int(sys.argv[2])
        if os.fork() == 0:
            time.sleep(0.2)
            os.write(rep, b'["value",true]\\n' * 200)
            os._exit(0)
        def {fn}(*args):
            time.sleep(0.5)
            return None
        """,
    "thread floods the reply channel": """
        import os, sys, threading
        rep = int(sys.argv[2])
        def flood():
            while True:
                os.write(rep, b'["value",true]\\n')
        threading.Thread(target=flood, daemon=True).start()
        def {fn}(*args):
            return None
        """,
    "stdout duplicated onto the reply channel": """
        import os, sys
        os.dup2(int(sys.argv[2]), 1)
        def {fn}(*args):
            print('["value",true]')
            return None
        """,
    "nan and inf": "def {fn}(*args):\n    return float('nan') if len(args) % 2 else float('inf')",
}


def _problem_index(env, key: str) -> int:
    split = "test" if key.startswith("HumanEval") else "train"
    problems = env.unwrapped._problems[split]
    return next(i for i, p in enumerate(problems) if p.key == key)


@pytest.fixture(scope="module")
def envs():
    return {"test": eppo_envs.make("eppo/Code-v0", split="test"), "train": eppo_envs.make("eppo/Code-v0", split="train")}


def _step(env, index: int, code: str):
    env.reset(options={"index": index})
    return env.step(f"```python\n{code}\n```")


@pytest.mark.parametrize("problem", ["HumanEval_0", "HumanEval_53", "gen_l1_add_const_000", "gen_l3_caesar_000"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_solutions_never_win(envs, problem, name):
    env = envs["test" if problem.startswith("HumanEval") else "train"]
    index = _problem_index(env, problem)
    entry = env.unwrapped._problems["test" if problem.startswith("HumanEval") else "train"][index].entry_point
    code = textwrap.dedent(HOSTILE[name]).strip().replace("{fn}", entry)
    obs, reward, terminated, _, info = _step(env, index, code)
    assert reward == 0.0 and not info["won"] and info["pass_fraction"] < 1.0, (name, obs)


def _function_only(problem) -> str:
    """The reference as a model writes it: imports and the entry function, none of the prompt's helpers."""
    tree = ast.parse(problem.reference)
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            or (isinstance(n, ast.FunctionDef) and n.name == problem.entry_point)]
    return "\n".join(ast.get_source_segment(problem.reference, n) for n in keep) + "\n"


@pytest.mark.parametrize("number", [10, 32, 38, 50])
def test_complete_function_without_the_prompts_helpers_passes(envs, number):
    problem = humaneval_problems()[number]
    code = _function_only(problem)
    helpers = {n.name for n in ast.parse(problem.prompt).body if isinstance(n, ast.FunctionDef)} - {problem.entry_point}
    assert helpers and not any(f"def {h}(" in code for h in helpers)  # the reply really lacks them
    obs, reward, *_ = _step(envs["test"], number, code)
    assert reward == 1.0, obs


def _printing(problem, per_call: int = 2048) -> str:
    """The canonical solution wrapped so that every call prints `per_call` bytes."""
    entry = problem.entry_point
    return (_function_only(problem) + f"\n_eppo_real = {entry}\n"
            f"def {entry}(*args):\n    print('x' * {per_call - 1})\n    return _eppo_real(*args)\n")


@pytest.mark.parametrize("number", [0, 12, 32, 53, 63, 99, 129, 151, 163])  # 63: recursive, prints > 8 MB
def test_correct_solution_that_prints_still_passes(envs, number):
    obs, reward, *_ = _step(envs["test"], number, _printing(humaneval_problems()[number]))
    assert reward == 1.0, obs


@pytest.mark.slow
def test_every_printing_canonical_solution_passes(envs):
    lost = [n for n in range(164) if _step(envs["test"], n, _printing(humaneval_problems()[n]))[1] != 1.0]
    assert lost == []


def test_model_sees_a_truncated_copy_of_its_output(envs):
    env = envs["train"]
    index = _problem_index(env, "gen_l1_add_const_000")
    obs, reward, *_ = _step(env, index, "print('hello ' * 1000)\ndef add_const_000(x):\n    return x")
    assert reward == 0.0 and "Your code's stdout:\nhello hello" in obs and "...[truncated]" in obs
    assert len(obs) < 3000


def test_per_problem_time_limit_is_three_seconds_by_default_and_configurable():
    env = eppo_envs.make("eppo/Code-v0", split="test", time_limit_s=0.3)
    assert eppo_envs.make("eppo/Code-v0", split="test").unwrapped.time_limit_s == 3.0
    problem = humaneval_problems()[0]  # 7 tests: 0.1 s each is 0.7 s in all
    slow = _function_only(problem).replace('    """', '    import time; time.sleep(0.1)\n    """', 1)
    obs, reward, *_ = _step(env, 0, slow)
    assert reward == 0.0 and "Timed out" in obs, obs
    env = eppo_envs.make("eppo/Code-v0", split="test", time_limit_s=3.0)
    obs, reward, *_ = _step(env, 0, slow)
    assert reward == 1.0, obs
    with pytest.raises(ValueError, match="time_limit_s"):
        eppo_envs.make("eppo/Code-v0", time_limit_s=0)


def test_judging_leaves_the_process_random_state_alone(envs):
    import random

    random.seed(1234)
    expected = random.Random(1234).random()
    _step(envs["test"], 38, _function_only(humaneval_problems()[38]))  # its tests draw from `random`
    assert random.random() == expected


@pytest.mark.parametrize("value", [None, True, 0, -(10**40), 2.5, math.inf, "s", b"b", 1 + 2j, [1, [2]], (1, (2,)),
                                   {1, 2}, frozenset({3}), {"a": 1, 2: (3,)}, []])
def test_wire_round_trip_keeps_builtin_types(value):
    back = wire.decode(wire.encode(value))
    assert back == value and type(back) is type(value)


def test_wire_rejects_malformed_lines_and_opaque_values_equal_nothing():
    for line in ['{"x": 1}', '{"s": [[1]]}', '{"d": [[[1], 2]]}', "[" * 100_000, "nope", '{"t": 1}']:
        with pytest.raises(wire.WireError):
            wire.decode(line)
    opaque = wire.decode(wire.encode(object()))
    assert isinstance(opaque, wire.Opaque) and opaque != opaque and not (opaque == 1)
    # another iterable (a generator, range, a numpy array) travels as its items, still equal to nothing: HumanEval's
    # `tuple(candidate(l)) == ...` passes it, `candidate(l) == [...]` does not, as in HumanEval's own harness
    items = wire.decode(wire.encode(x * x for x in range(3)))
    assert isinstance(items, wire.Opaque) and tuple(items) == (0, 1, 4) and items != [0, 1, 4] and items != items


@pytest.mark.parametrize("code", ["x = 1" + "+1" * 30000, "x = " + "-" * 60000 + "1", "x = a" + ".b" * 30000])
def test_code_nested_too_deeply_to_compile_is_feedback_not_a_crash(envs, code):
    # CPython's compiler raises RecursionError or MemoryError (not SyntaxError) on these; the env must not crash
    obs, reward, terminated, _, info = _step(envs["train"], 0, code)
    assert reward == 0.0 and not info["won"] and info["action_valid"] and "does not compile" in obs, obs


def _colliding_set_line(n: int) -> str:
    """A wire set of `n` distinct ints that all share one hash (they are equal modulo 2**61 - 1)."""
    modulus = (1 << 61) - 1
    return '{"s":[' + ",".join(wire.encode(modulus * k + 7) for k in range(1, n + 1)) + "]}"


def test_wire_rejects_sets_and_dicts_flooded_with_one_hash():
    # building such a set is quadratic: 130k members (4 MB, one reply) would hold the judge for minutes per call
    start = time.monotonic()
    with pytest.raises(wire.WireError, match="hash"):
        wire.decode(_colliding_set_line(3000))
    keys = ",".join(f"[{wire.encode(((1 << 61) - 1) * k)},0]" for k in range(1, 3001))
    with pytest.raises(wire.WireError, match="hash"):
        wire.decode('{"d":[' + keys + "]}")
    assert time.monotonic() - start < 1.0
    assert wire.decode('{"s":[-1,-2,1,2]}') == {-1, -2, 1, 2}  # a few shared hashes (hash(-1) == hash(-2)) are fine


def test_hash_flooding_replies_do_not_stall_the_judge(envs):
    index = _problem_index(envs["train"], "gen_l1_add_const_000")
    code = textwrap.dedent("""
        import os, sys
        main = sys.modules['__main__']
        modulus = (1 << 61) - 1
        members = ",".join(wire.encode(modulus * k + 7) for k in range(1, 20001))
        line = ('["value",{"s":[' + members + ']}]\\n').encode()
        real = main._send
        main._send = lambda text: os.write(main._REP, line) if text.startswith('["value"') else real(text)
        def add_const_000(x):
            return 0
        """)
    start = time.monotonic()
    obs, reward, *_ = _step(envs["train"], index, code)
    assert reward == 0.0 and time.monotonic() - start < 8.0, obs  # unchecked: ~3 s of set building per test call


INC = "def inc(x):\n    return x + 1\n"  # right on ints, raises TypeError on a string


def _own_problem(monkeypatch, tests: str):
    """Code-v0 on one hand-written problem (its training split), reset to it."""
    problem = CodeProblem("own_0", 'def inc(x):\n    """x + 1"""\n', INC, tests, "inc", 1, "generated")
    monkeypatch.setitem(code_env.PROBLEM_SOURCES, "generated", lambda: (problem,))
    env = eppo_envs.make("eppo/Code-v0", split="train")
    env.reset(options={"index": 0})
    return env


def test_a_problem_whose_check_asserts_nothing_is_never_won(monkeypatch):
    env = _own_problem(monkeypatch, "def check(candidate):\n    candidate(1)\n")  # 0 tests: nothing to pass
    obs, reward, terminated, _, info = env.step(f"```python\n{INC}```")
    assert reward == 0.0 and not info["won"] and info["pass_fraction"] == 0.0 and obs.startswith("0/0 tests"), obs


def test_setup_statements_are_not_counted_as_passed_tests(monkeypatch):
    tests = "def check(candidate):\n    offset = 1\n    assert candidate(1) == 1 + offset\n    assert candidate(2) == 99\n"
    obs, reward, terminated, _, info = _own_problem(monkeypatch, tests).step(f"```python\n{INC}```")
    assert reward == 0.0 and not info["won"] and info["pass_fraction"] == 0.5, obs
    assert obs.startswith("1/2 tests passed. Failed test `assert candidate(2) == 99`"), obs


def test_a_failed_setup_fails_every_test_after_it(monkeypatch):
    # as HumanEval's `check(candidate)` would: the exception ends the function, so the last test never passes
    tests = "def check(candidate):\n    assert candidate(1) == 2\n    probe = candidate('x')\n    assert candidate(2) == 3\n"
    obs, reward, terminated, _, info = _own_problem(monkeypatch, tests).step(f"```python\n{INC}```")
    assert reward == 0.0 and not info["won"] and info["pass_fraction"] == 0.5, obs
    assert obs.startswith("1/2 tests passed. Failed setup `probe = candidate('x')`") and "TypeError" in obs, obs


def test_a_stop_iteration_from_the_solution_fails_tests_that_map_it(monkeypatch):
    # crossing into the judge as itself, it would end the tests' `map` early: all([]) and not any([]) both hold
    tests = "def check(candidate):\n    assert all(map(candidate, [1, 2]))\n    assert not any(map(candidate, [-1]))\n"
    env = _own_problem(monkeypatch, tests)
    obs, reward, terminated, _, info = env.step("```python\ndef inc(x):\n    raise StopIteration\n```")
    assert reward == 0.0 and not info["won"] and info["pass_fraction"] == 0.0 and "StopIteration" in obs, obs
    env.reset(options={"index": 0})
    assert env.step(f"```python\n{INC}```")[1] == 1.0  # the problem itself can be won


def test_passed_tests_never_exceed_the_total_given(envs):
    tests = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
    sandbox = envs["train"].unwrapped.sandbox
    report = run_tests(sandbox, INC, tests, "inc", total=2)
    assert (report.passed, report.pass_fraction, report.all_passed) == (2, 1.0, True)
    report = run_tests(sandbox, INC, tests, "inc", total=1)  # a caller's stale count: still at most 1.0
    assert (report.passed, report.total, report.pass_fraction, report.all_passed) == (1, 1, 1.0, True)
