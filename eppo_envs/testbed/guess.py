"""Guess: find a number in 1..`high` from higher/lower feedback. The testbed's multi-turn task: winning takes
using the feedback, so its entropy stays high while the one-turn tasks settle."""

from __future__ import annotations

import random
from typing import Any

import eppo_envs
from eppo_envs.core import StepResult
from eppo_envs.core.tools import Tool
from eppo_envs.testbed.base import AnswerTask


class GuessEnv(AnswerTask):
    task = "guess"
    action_hint = "Reply with <answer>N</answer>, your guess as a whole number."
    tools = (Tool("answer", "Guess the number.", (("number", "your guess as a whole number"),), "<answer>{number}</answer>"),)

    def __init__(self, split: str = "train", high: int = 16, **kwargs: Any) -> None:
        super().__init__(split, **kwargs)
        if high < 2:
            raise ValueError(f"high must be >= 2, got {high}")
        self.high = high

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        self.secret = random.Random(f"guess/{self.high}/{split}/{index}").randint(1, self.high)
        self.bounds = [1, self.high]
        return (f"Find my number between 1 and {self.high}; after each guess I say higher or lower. "
                f"{self.action_hint}", "Your first guess?", {})

    def transition(self, text: str) -> StepResult:
        answer = self.read_answer(text)
        if isinstance(answer, StepResult):
            return answer
        if not answer.isdigit():
            return self.invalid(f"{answer[:40]!r} is not a whole number.")
        guess = int(answer)
        if guess == self.secret:
            return StepResult("Right.", reward=1.0, terminated=True, won=True)
        if guess < self.secret:
            self.bounds[0] = max(self.bounds[0], guess + 1)
            return StepResult(f"{guess} is too low. Higher.")
        self.bounds[1] = min(self.bounds[1], guess - 1)
        return StepResult(f"{guess} is too high. Lower.")

    def expert_action(self) -> str:  # binary search over what the feedback leaves
        return f"<answer>{sum(self.bounds) // 2}</answer>"


eppo_envs.register("testbed/Guess-v0", entry_point=GuessEnv, task="guess",
                   description="Find a number from higher/lower feedback", max_episode_steps=5)
