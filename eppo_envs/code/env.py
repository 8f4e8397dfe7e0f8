"""`eppo/Code-v0`: write a Python function; the env runs the problem's unit tests in the sandbox.

The model answers with a fenced python block. All tests pass: reward 1, episode won. Otherwise the first failing
test and its error come back for another attempt (up to `max_attempts`); `info["pass_fraction"]` reports the
share of passing tests. The last test the model has not been shown stays hidden (only the pass count comes back),
so a win never rests on tests it was shown alone: HumanEval/29, /34 and /35 have one or two tests, and a reply
returning the revealed expected value would win them on the next attempt. Turns without a complete fenced block are
invalid and never start a sandbox run.
Splits: `test` is HumanEval's 164 problems; `train` the generated problems (levels 1-4, selectable).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from eppo_envs.code.generated import generated_problems
from eppo_envs.code.harness import DEFAULT_TIME_LIMIT_S, TestReport, count_tests, run_tests
from eppo_envs.code.humaneval import humaneval_problems
from eppo_envs.code.problems import CodeProblem
from eppo_envs.core import AgentEnv, StepResult, Tool, extract_code_block
from eppo_envs.tools.sandbox import Limits, Sandbox, SandboxConfig

PROBLEM_SOURCES = {"humaneval": humaneval_problems, "generated": generated_problems}
DEFAULT_SPLIT_SOURCES = {"train": "generated", "test": "humaneval"}
FEEDBACK_CHARS = 1500


class CodeEnv(AgentEnv):
    task = "code"
    tool_tags = ()
    reward_changes = (
        "2026-12-06: a solution's StopIteration is a plain failure (it could end a test's map or filter early and "
        "pass it); the last test not yet shown stays hidden, so a win never rests on copying a revealed value",
        "2026-12-07: a returned generator, range or numpy array travels as its items, so a test that iterates it "
        "(HumanEval/33 and /37 compare tuple(candidate(l))) passes as in HumanEval's own harness; it had scored 0",
    )
    action_hint = "Reply with the complete function in a fenced code block: ```python\\n<your code>\\n```."
    tools = (Tool("submit", "Submit the complete function (imports included); the unit tests run on it.",
                  (("code", "the Python source"),), "```python\n{code}\n```"),)

    def __init__(
        self,
        split: str = "train",
        level: int | Sequence[int] | None = None,
        max_attempts: int = 3,
        split_sources: dict[str, str] | None = None,
        sandbox: Sandbox | None = None,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(split, **kwargs)
        levels = None if level is None else set([level] if isinstance(level, int) else level)
        sources = {**DEFAULT_SPLIT_SOURCES, **(split_sources or {})}
        self._problems: dict[str, tuple[CodeProblem, ...]] = {}
        for name, source in sources.items():
            if source not in PROBLEM_SOURCES:
                raise ValueError(f"unknown code problem source {source!r}; choose from {sorted(PROBLEM_SOURCES)}")
            problems = PROBLEM_SOURCES[source]()
            if levels is not None and source == "generated":
                problems = tuple(p for p in problems if p.level in levels)
            self._problems[name] = problems
        if not time_limit_s > 0:
            raise ValueError(f"time_limit_s must be positive, got {time_limit_s!r}")
        self.max_attempts = max_attempts
        self.time_limit_s = float(time_limit_s)
        self._sandbox = sandbox
        self.problem: CodeProblem | None = None

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(SandboxConfig(limits=Limits(wall_s=15.0, cpu_s=15, memory_mb=1024)))
        return self._sandbox

    def num_instances(self, split: str) -> int:
        return len(self._problems[split])

    def instance_id(self, split: str, index: int) -> str:
        return f"code/{split}/{self._problems[split][index].key}"

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        self.problem = self._problems[split][index]
        self.attempts = 0
        self._total_tests = count_tests(self.problem.tests)
        self._shown_tests: set[int] = set()  # the tests whose source and error the model has seen
        how = ("Reply with the complete function (imports included) in one fenced code block: ```python ... ```."
               if self.action_format == "tags" else
               "Submit the complete function (imports included) with the submit tool.")
        instruction = (
            f"Write a Python function that solves the problem below. {how} Hidden unit tests will check it; you "
            f"have {self.max_attempts} attempts, and after a failing attempt you see the failing test."
        )
        observation = f"```python\n{self.problem.prompt}```"
        return instruction, observation, {"level": self.problem.level, "attempts_left": self.max_attempts}

    def solution_program(self, code: str) -> str:
        """The model may write the whole function or only its body (HumanEval style). Either way the prompt comes
        first, so its other definitions (HumanEval/10's `is_palindrome`, /38's `encode_cyclic`) exist; a whole
        function then redefines the prompt's stub."""
        assert self.problem is not None
        prompt = self.problem.prompt if self.problem.prompt.endswith("\n") else self.problem.prompt + "\n"
        if re.search(rf"\bdef\s+{re.escape(self.problem.entry_point)}\s*\(", code):
            return prompt + "\n" + code
        return prompt + code

    def transition(self, text: str) -> StepResult:
        code = extract_code_block(text)
        if code is None:
            return self.invalid("no complete fenced python block (```python ... ```) found.")
        if not code.strip():
            return self.invalid("the code block is empty.")
        assert self.problem is not None
        self.attempts += 1
        program = self.solution_program(code)
        report: TestReport | None = None
        try:
            compile(program, "solution.py", "exec")  # a syntax error needs no sandbox run
        # code nested too deeply makes CPython's compiler raise RecursionError or MemoryError instead of SyntaxError;
        # it would not compile in the sandbox either
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            feedback, passed = f"Your code does not compile: {type(exc).__name__}: {exc}", 0.0
        else:
            report = run_tests(self.sandbox, program, self.problem.tests, self.problem.entry_point,
                               self._total_tests, prompt=self.problem.prompt, time_limit_s=self.time_limit_s)
            feedback, passed = self._failure_shown(report), report.pass_fraction
        info = {"pass_fraction": passed, "attempts_left": self.max_attempts - self.attempts}
        if report is not None:
            info["sandbox_reason"] = report.run.reason
        if report is not None and report.all_passed:
            return StepResult("All tests passed.", reward=1.0, terminated=True, won=True, info=info)
        out_of_attempts = self.attempts >= self.max_attempts
        message = self._feedback(report, feedback)
        if out_of_attempts:
            message += "\nNo attempts left."
        else:
            message += f"\nFix the code and reply with the complete function again ({info['attempts_left']} left)."
        return StepResult(message, terminated=out_of_attempts, info=info)

    def _failure_shown(self, report: TestReport) -> str:
        """The failing test and its error, unless it is the last test the model has not seen: that one is only
        named as failing, so at least one test is always one the model could not copy expected values from."""
        index = report.failed_test
        if index is None or index in self._shown_tests:
            return report.first_failure
        if self._total_tests - len(self._shown_tests) <= 1:
            return "A hidden test failed (the last test you have not seen is not shown)."
        self._shown_tests.add(index)
        return report.first_failure

    def _feedback(self, report: TestReport | None, feedback: str) -> str:
        head = "" if report is None else f"{report.passed}/{report.total} tests passed. "
        text = head + feedback
        printed = "" if report is None else report.output_excerpt()
        if printed:  # the model sees what its code printed (cut short); the verdict never reads it
            text += "\n" + printed
        return text if len(text) <= FEEDBACK_CHARS else text[:FEEDBACK_CHARS] + "\n...[truncated]"

    def expert_action(self) -> str:
        assert self.problem is not None
        return f"```python\n{self.problem.reference}```"
