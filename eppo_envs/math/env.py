"""`eppo/MathTool-v0`: solve a math problem, optionally running Python in the sandbox (ToRL style).

Each turn is either `<python>code</python>` (its stdout comes back as `<output>...</output>`; up to
`max_tool_calls` per episode) or a final `<answer>...</answer>` / `\\boxed{...}`, graded with math-verify.
Malformed turns are rejected before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eppo_envs.core import AgentEnv, StepResult, Tool, find_tags, parse_tool_call
from eppo_envs.core.parsing import extract_boxed
from eppo_envs.math.grading import is_correct
from eppo_envs.math.problems import LEVELS, SOURCES, MathProblem, ProblemSet
from eppo_envs.tools.sandbox import Limits, RunResult, Sandbox, SandboxConfig

TOOL_OUTPUT_CHARS = 2000  # what the model sees of one run's output


def format_output(result: RunResult) -> str:
    text = result.stdout
    if result.reason != "ok":
        tail = result.stderr.strip().splitlines()[-3:]
        text += f"\n[{result.reason}] " + "\n".join(tail)
    text = text.strip() or "(no output; use print() to see values)"
    if len(text) > TOOL_OUTPUT_CHARS:
        text = text[:TOOL_OUTPUT_CHARS] + "\n...[truncated]"
    return f"<output>\n{text}\n</output>"


class MathToolEnv(AgentEnv):
    task = "math"
    tool_tags = ("python", "answer")
    reward_changes = (
        "2026-12-06: an expression left to compute no longer answers a numeric question (copying the question's own "
        "expression had won 59 of 60 arithmetic problems); a percent answer is read as one value, not as X or X/100; "
        "both grading steps read a reply as the same value ('3 4' had won as 34); a NUL character no longer joins "
        "the digits around it",
        "2026-12-07: a numeric answer is one number as written, checked on its text: numbers side by side no longer "
        "add up ('81 80' had won 161, '1\\,234' 235), and chained or nested divisions, brackets, powers, \\binom and "
        "other LaTeX functions no longer evaluate to an answer ('-( -61 / 1 )' had won 61)",
        "2026-12-07: a number written with LaTeX's thin-space thousands separator, as python prints a small or large "
        "float, in scientific notation or with a squared or cubed unit wins ('5\\,000' for 5000 and '1e-05' for "
        "0.00001 had lost: latex2sympy read 5 and e - 5; '1.5 \\times 10^{3}' and '20 \\text{ cm}^2' were refused "
        "as computations)",
    )
    action_hint = (
        "Reply with <python>code</python> to run Python (print what you need), or give the final answer as "
        "<answer>...</answer> or \\boxed{...}."
    )
    tools = (Tool("python", "Run Python (numpy and sympy are available); what it prints comes back.",
                  (("code", "the program; print what you need"),), "<python>\n{code}\n</python>"),
             Tool("answer", "Give the final answer; the episode ends.", (("answer", "the final answer"),),
                  "<answer>{answer}</answer>"))

    def __init__(
        self,
        split: str = "train",
        level: int | Sequence[int] | None = None,
        sources: Sequence[str] | None = None,
        max_tool_calls: int = 3,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(split, **kwargs)
        self.levels = tuple(LEVELS if level is None else ([level] if isinstance(level, int) else level))
        self.sources = tuple(sources or SOURCES)
        self.max_tool_calls = max_tool_calls
        self._problem_sets = {s: ProblemSet(s, self.sources, self.levels) for s in self.splits}
        self._sandbox = sandbox
        self.problem: MathProblem | None = None

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:  # created on first tool call: building envs stays cheap
            self._sandbox = Sandbox(SandboxConfig(limits=Limits(wall_s=10.0, cpu_s=10, memory_mb=1024)))
        return self._sandbox

    def num_instances(self, split: str) -> int:
        return len(self._problem_sets[split])

    def instance_id(self, split: str, index: int) -> str:
        problem = self._problem_sets[split][index]
        return f"math/{split}/{problem.source}/{problem.key}"

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        self.problem = self._problem_sets[split][index]
        self.tool_calls = 0
        self.solver_output: str | None = None  # what the expert's own solver printed (None: not run yet)
        instruction = (
            "Solve the math problem. You may run Python (numpy and sympy are available) by writing "
            f"<python>code</python>; what it prints comes back in <output>...</output>. You can run code up to "
            f"{self.max_tool_calls} times. Give the final answer as <answer>...</answer> (or \\boxed{{...}})."
        ) if self.action_format == "tags" else (
            "Solve the math problem. You may run Python (numpy and sympy are available) with the python tool; what "
            f"it prints comes back in <output>...</output>. You can run code up to {self.max_tool_calls} times. Give "
            "the final answer with the answer tool."
        )
        extra = {"source": self.problem.source, "level": self.problem.level, "tool_calls_left": self.max_tool_calls}
        return instruction, f"Problem: {self.problem.question}", extra

    def transition(self, text: str) -> StepResult:
        calls = find_tags(text, self.tool_tags)
        answers = [content for tag, content in calls if tag == "answer"]
        boxed = extract_boxed(text)
        if answers or (boxed and not calls):
            final = answers[-1] if answers else boxed
            if not final:
                return self.invalid("the answer is empty.")
            return self._grade(final)
        call = parse_tool_call(text, ("python",))
        if not call.valid:
            if not calls and "<python>" not in text.lower():  # say how to act with both tags, not just python
                return self.invalid(call.error.replace("<python>...</python>", "<python>...</python> or <answer>...</answer>"))
            return self.invalid(call.error)
        if self.tool_calls >= self.max_tool_calls:
            return self.invalid(f"no Python runs left (limit {self.max_tool_calls}); give your final answer.")
        self.tool_calls += 1
        result = self.sandbox.run(call.content)
        if call.content.strip() == self.problem.solver.strip() and result.ok:
            # only the expert's own computation may feed its answer, never another call's output
            self.solver_output = result.stdout.strip()
        left = self.max_tool_calls - self.tool_calls
        return StepResult(
            format_output(result) + f"\n({left} Python run{'s' if left != 1 else ''} left)",
            info={"tool": "python", "sandbox_reason": result.reason, "tool_calls_left": left},
        )

    def _grade(self, final: str) -> StepResult:
        assert self.problem is not None
        correct = is_correct(final, self.problem.answer)
        verdict = "Correct." if correct else "Incorrect."
        return StepResult(verdict, reward=float(correct), terminated=True, won=correct, info={"answer": final[:200]})

    def expert_action(self) -> str:
        """Compute the answer with the tool first (so the tool path is exercised), then answer with what that
        computation printed; whatever else ran before (the user's own calls) does not count."""
        assert self.problem is not None
        if self.solver_output is None and self.tool_calls < self.max_tool_calls:
            return f"<python>\n{self.problem.solver}\n</python>"
        return f"<answer>{self.solver_output or self.problem.answer}</answer>"
