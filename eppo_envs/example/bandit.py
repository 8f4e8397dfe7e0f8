"""A one-step bandit: the digit `target` wins, any other digit loses. The smallest task on which RL must learn.

The learning test (`tests/test_learning.py`) warm-starts the tiny model on demonstrations of the *uniform*
demonstrator (`expert="uniform"`: a random digit per instance), so RL begins from a policy that answers at random
and has to find the one rewarded answer. The default expert answers `target` and wins, as every task's must.
"""

from __future__ import annotations

import random
from typing import Any

import eppo_envs
from eppo_envs.core import AgentEnv, StepResult, parse_tool_call
from eppo_envs.core.tools import Tool

EXPERTS = ("oracle", "uniform")


class BanditEnv(AgentEnv):
    task = "bandit"
    tool_tags = ("answer",)
    action_hint = "Reply with <answer>D</answer>, where D is one digit."
    tools = (Tool("answer", "Pick a digit.", (("digit", "one digit, 0 to 9"),), "<answer>{digit}</answer>"),)

    def __init__(self, split: str = "train", target: int = 7, expert: str = "oracle", **kwargs: Any) -> None:
        super().__init__(split, **kwargs)
        if expert not in EXPERTS:
            raise ValueError(f"expert must be one of {', '.join(EXPERTS)}, got {expert!r}")
        if not 0 <= target <= 9:
            raise ValueError(f"target must be a digit, got {target!r}")
        self.target, self.expert = target, expert

    def num_instances(self, split: str) -> int:
        return 1000

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        # The request number varies the prompt, so greedy decoding over many seeds measures a policy, not one answer.
        rng = random.Random(f"{split}/{index}")
        self.request = rng.randrange(10**6)
        self.demo_digit = rng.randrange(10)
        return f"Request {self.request}: pick a digit from 0 to 9. {self.action_hint}", "Your pick?", {}

    def transition(self, text: str) -> StepResult:
        call = parse_tool_call(text, self.tool_tags)
        if not call.valid:
            return self.invalid(call.error)
        won = call.content.strip() == str(self.target)
        return StepResult("Right." if won else "Wrong.", reward=float(won), terminated=True, won=won)

    def expert_action(self) -> str:
        digit = self.target if self.expert == "oracle" else self.demo_digit
        return f"<answer>{digit}</answer>"


eppo_envs.register(
    "example/Bandit-v0",
    entry_point=BanditEnv,
    task="bandit",
    description="Pick the one rewarded digit (a one-step bandit)",
    max_episode_steps=1,
)
