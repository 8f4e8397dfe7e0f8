"""What the testbed's tasks share: one `<answer>` tool, 10,000 seeded instances a split, and reading the answer."""

from __future__ import annotations

from eppo_envs.core import AgentEnv, StepResult, parse_tool_call


class AnswerTask(AgentEnv):
    tool_tags = ("answer",)

    def num_instances(self, split: str) -> int:
        return 10_000

    def read_answer(self, text: str) -> str | StepResult:
        """The stripped content of the reply's one `<answer>` call, or the invalid-action result to return."""
        call = parse_tool_call(text, self.tool_tags)
        return call.content.strip() if call.valid else self.invalid(call.error)
