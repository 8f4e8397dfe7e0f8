"""Add: the sum of two numbers of `digits` digits, with a second try after a wrong answer. The testbed's graded
task: one digit is within the default model's reach, three are mostly not."""

from __future__ import annotations

import random
from typing import Any

import eppo_envs
from eppo_envs.core import StepResult
from eppo_envs.core.tools import Tool
from eppo_envs.testbed.base import AnswerTask


class AddEnv(AnswerTask):
    task = "add"
    action_hint = "Reply with <answer>N</answer>, where N is the sum as a whole number."
    tools = (Tool("answer", "Give the sum.", (("number", "the sum as a whole number"),), "<answer>{number}</answer>"),)

    def __init__(self, split: str = "train", digits: int = 2, **kwargs: Any) -> None:
        super().__init__(split, **kwargs)
        if not 1 <= digits <= 9:
            raise ValueError(f"digits must be in 1..9, got {digits}")
        self.digits = digits

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        rng = random.Random(f"add/{self.digits}/{split}/{index}")
        low, high = 10 ** (self.digits - 1) if self.digits > 1 else 0, 10**self.digits - 1
        self.a, self.b = rng.randint(low, high), rng.randint(low, high)
        return f"What is {self.a} + {self.b}? {self.action_hint}", f"Compute {self.a} + {self.b}.", {}

    def transition(self, text: str) -> StepResult:
        answer = self.read_answer(text)
        if isinstance(answer, StepResult):
            return answer
        if not answer.lstrip("-").isdigit():
            return self.invalid(f"{answer[:40]!r} is not a whole number.")
        if int(answer) == self.a + self.b:
            return StepResult("Right.", reward=1.0, terminated=True, won=True)
        return StepResult(f"{answer} is wrong. Try again.")

    def expert_action(self) -> str:
        return f"<answer>{self.a + self.b}</answer>"


eppo_envs.register("testbed/Add-v0", entry_point=AddEnv, task="add",
                   description="Add two numbers of `digits` digits, two tries", max_episode_steps=2)
