"""Echo: repeat a made-up word. The testbed's easy task: one turn, learned within a few updates."""

from __future__ import annotations

import random
from typing import Any

import eppo_envs
from eppo_envs.core import StepResult
from eppo_envs.core.tools import Tool
from eppo_envs.testbed.base import AnswerTask
from eppo_envs.testbed.words import made_up_word


class EchoEnv(AnswerTask):
    task = "echo"
    action_hint = "Reply with <answer>WORD</answer>, the word exactly as given."
    tools = (Tool("answer", "Repeat the word.", (("word", "the word exactly as given"),), "<answer>{word}</answer>"),)

    def __init__(self, split: str = "train", syllables: int = 3, **kwargs: Any) -> None:
        super().__init__(split, **kwargs)
        if syllables < 1:
            raise ValueError(f"syllables must be >= 1, got {syllables}")
        self.syllables = syllables

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        self.word = made_up_word(random.Random(f"echo/{split}/{index}"), self.syllables)
        instruction = f"Repeat the word {self.word} exactly. {self.action_hint}"
        return instruction, f"The word is {self.word}.", {}

    def transition(self, text: str) -> StepResult:
        answer = self.read_answer(text)
        if isinstance(answer, StepResult):
            return answer
        won = answer == self.word
        return StepResult("Right." if won else "Wrong.", reward=float(won), terminated=True, won=won)

    def expert_action(self) -> str:
        return f"<answer>{self.word}</answer>"


eppo_envs.register("testbed/Echo-v0", entry_point=EchoEnv, task="echo",
                   description="Repeat a made-up word (the testbed's easy task)", max_episode_steps=1)
