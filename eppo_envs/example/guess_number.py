"""Guess the number: the smallest complete EPPO task, and the template for adding your own.

One file plus one `register` call: importing this module makes `eppo_envs.make("example/GuessNumber-v0")` work,
and the conformance suite (`tests/test_conformance.py`) checks it like every built-in task.
"""

from __future__ import annotations

import random
from typing import Any

import eppo_envs
from eppo_envs.core import AgentEnv, StepResult, Tool, parse_tool_call


class GuessNumberEnv(AgentEnv):
    task = "guess_number"
    tool_tags = ("answer",)
    action_hint = "Reply with <answer>N</answer>, where N is a whole number."
    # the tools format (core/tools.py): answer(number="42") is read as <answer>42</answer>
    tools = (Tool("answer", "Guess the number.", (("number", "a whole number"),), "<answer>{number}</answer>"),)

    def __init__(self, split: str = "train", low: int = 1, high: int = 100, **kwargs: Any) -> None:
        super().__init__(split, **kwargs)
        self.low, self.high = low, high

    def num_instances(self, split: str) -> int:
        return 1000

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        # The secret depends only on (split, index): same seed, same problem.
        self.secret = random.Random(f"{split}/{index}").randint(self.low, self.high)
        self.bounds = [self.low, self.high]
        instruction = f"I am thinking of a number between {self.low} and {self.high}. {self.action_hint}"
        return instruction, "Make your first guess.", {}

    def transition(self, text: str) -> StepResult:
        call = parse_tool_call(text, self.tool_tags)
        if not call.valid:
            return self.invalid(call.error)
        try:
            guess = int(call.content)
        except ValueError:
            return self.invalid(f"{call.content[:40]!r} is not a whole number.")
        if guess == self.secret:
            return StepResult("Correct!", reward=1.0, terminated=True, won=True)
        if guess < self.secret:
            self.bounds[0] = max(self.bounds[0], guess + 1)
            return StepResult(f"{guess} is too low.")
        self.bounds[1] = min(self.bounds[1], guess - 1)
        return StepResult(f"{guess} is too high.")

    def expert_action(self) -> str:  # binary search over what the feedback has ruled out
        return f"<answer>{sum(self.bounds) // 2}</answer>"


eppo_envs.register(
    "example/GuessNumber-v0",
    entry_point=GuessNumberEnv,
    task="guess_number",
    description="Guess a number from too-high/too-low feedback",
    max_episode_steps=10,
)
