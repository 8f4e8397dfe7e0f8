"""Running a solution against a problem's tests inside the sandbox, one test at a time.

A problem's tests are HumanEval-shaped: `def check(candidate): ...` whose top-level statements are either setup
or tests (any statement containing an `assert`). The harness, run in the sandbox, defines the solution, then
executes check's statements one by one and prints one result line per test, tagged with a per-run nonce so a
solution printing look-alike lines is not mistaken for a result. Tests that never report (the solution exited,
hung or crashed the interpreter) count as failed.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from eppo_envs.tools.sandbox import RunResult, Sandbox

_HARNESS = r'''
import ast as _ast, json as _json, sys as _sys, traceback as _tb
_NONCE = {nonce!r}
_SOLUTION = {solution!r}
_TESTS = {tests!r}
_ENTRY = {entry!r}

def _report(**kw):
    _sys.__stdout__.write(_NONCE + _json.dumps(kw) + "\n")
    _sys.__stdout__.flush()

_ns = {{"__name__": "__main__"}}
try:
    exec(compile(_SOLUTION, "solution.py", "exec"), _ns)
    _candidate = _ns[_ENTRY]
except BaseException as _e:
    _report(kind="load", ok=False, msg="".join(_tb.format_exception_only(type(_e), _e)).strip()[-600:])
    raise SystemExit(0)
_tns = dict(_ns)
exec(compile(_TESTS, "tests.py", "exec"), _tns)
_check = next(n for n in _ast.parse(_TESTS).body if isinstance(n, _ast.FunctionDef) and n.name == "check")
_arg = _check.args.args[0].arg
_tns[_arg] = _candidate  # one namespace: comprehensions in the tests must see their imports and helpers
for _i, _stmt in enumerate(_check.body):
    _is_test = any(isinstance(_n, _ast.Assert) for _n in _ast.walk(_stmt))
    _code = compile(_ast.Module(body=[_stmt], type_ignores=[]), "tests.py", "exec")
    try:
        exec(_code, _tns)
        if _is_test:
            _report(kind="test", ok=True, src=_ast.get_source_segment(_TESTS, _stmt)[:300])
    except BaseException as _e:
        _msg = "".join(_tb.format_exception_only(type(_e), _e)).strip()[-600:]
        _report(kind="test" if _is_test else "setup", ok=False, src=(_ast.get_source_segment(_TESTS, _stmt) or "")[:300], msg=_msg)
        if not _is_test:
            break
_report(kind="done", ok=True)
'''


@dataclass
class TestReport:
    total: int  # tests in the problem
    passed: int
    first_failure: str  # the failing test and its error, for the model ("" when all passed)
    run: RunResult

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def pass_fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def count_tests(tests: str) -> int:
    import ast

    check = next(n for n in ast.parse(tests).body if isinstance(n, ast.FunctionDef) and n.name == "check")
    return sum(any(isinstance(n, ast.Assert) for n in ast.walk(stmt)) for stmt in check.body)


def run_tests(sandbox: Sandbox, solution: str, tests: str, entry_point: str, total: int) -> TestReport:
    nonce = "@@" + secrets.token_hex(8) + "@@"
    program = _HARNESS.format(nonce=nonce, solution=solution, tests=tests, entry=entry_point)
    run = sandbox.run(program)
    passed, failure, done = 0, "", False
    for line in run.stdout.splitlines():
        if not line.startswith(nonce):
            continue
        try:
            rec = json.loads(line[len(nonce):])
        except ValueError:
            continue
        if rec.get("kind") == "done":
            done = True
        elif rec.get("ok"):
            passed += 1
        elif not failure:
            where = "loading your code" if rec["kind"] == "load" else f"test `{rec.get('src', '')}`"
            failure = f"Error while {where}:\n{rec.get('msg', '')}" if rec["kind"] == "load" else f"Failed {where}\n{rec.get('msg', '')}"
    if not done and not failure:
        tail = run.stderr.strip().splitlines()[-3:]
        failure = f"The run ended early ({run.reason}) after {passed} passing tests:\n" + "\n".join(tail)
    return TestReport(total, min(passed, total), failure, run)
