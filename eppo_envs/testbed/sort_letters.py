"""Sort: `letters` distinct letters in alphabetical order, with a second try after a wrong answer. The testbed's
hard task: after a short SFT the default model sorts almost no three letters, so its groups seldom vary."""

from __future__ import annotations

import random
import string
from typing import Any

import eppo_envs
from eppo_envs.core import StepResult
from eppo_envs.core.tools import Tool
from eppo_envs.testbed.base import AnswerTask


class SortEnv(AnswerTask):
    task = "sort"
    action_hint = "Reply with <answer>LETTERS</answer>, the letters in alphabetical order with no spaces."
    tools = (Tool("answer", "Give the sorted letters.", (("letters", "the letters in alphabetical order, no spaces"),), "<answer>{letters}</answer>"),)

    def __init__(self, split: str = "train", letters: int = 5, **kwargs: Any) -> None:
        super().__init__(split, **kwargs)
        if not 2 <= letters <= 26:
            raise ValueError(f"letters must be in 2..26, got {letters}")
        self.letters = letters

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        rng = random.Random(f"sort/{self.letters}/{split}/{index}")
        self.given = "".join(rng.sample(string.ascii_lowercase, self.letters))
        return f"Sort the letters {self.given} alphabetically. {self.action_hint}", f"Letters: {self.given}.", {}

    def transition(self, text: str) -> StepResult:
        answer = self.read_answer(text)
        if isinstance(answer, StepResult):
            return answer
        answer = answer.lower()
        if answer == "".join(sorted(self.given)):
            return StepResult("Right.", reward=1.0, terminated=True, won=True)
        return StepResult(f"{answer[:40]} is not right. Try again.")

    def expert_action(self) -> str:
        return f"<answer>{''.join(sorted(self.given))}</answer>"


eppo_envs.register("testbed/Sort-v0", entry_point=SortEnv, task="sort",
                   description="Sort letters alphabetically, two tries", max_episode_steps=2)
