"""What happened in an episode: one `Turn` per `step`, an `Episode` around them, JSON in and out."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# Info keys a transcript's turns leave out: the Episode record holds them already, or they are large
# (admissible-action lists, tracebacks). The one list for `core.play` and the learner's rollout.
TURN_INFO_DROPPED = frozenset({"task", "instance_id", "split", "won", "action_valid", "admissible_actions",
                               "instruction", "traceback"})


@dataclass
class Turn:
    action: str  # the raw model text, exactly as sent to `step`
    observation: str  # what the env answered
    reward: float
    action_valid: bool
    info: dict[str, Any] = field(default_factory=dict)  # JSON-safe extras from the env (e.g. tool output size)


@dataclass
class Episode:
    env_id: str
    task: str
    split: str
    seed: int
    instance_id: str
    instruction: str
    first_observation: str
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    terminated: bool = False
    truncated: bool = False

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def num_steps(self) -> int:
        return len(self.turns)

    @property
    def invalid_actions(self) -> int:
        return sum(not t.action_valid for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["total_reward"] = self.total_reward
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        d = {k: v for k, v in d.items() if k != "total_reward"}
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> Episode:
        return cls.from_dict(json.loads(text))


def json_safe(info: dict[str, Any]) -> dict[str, Any]:
    """The part of an info dict that survives JSON (numbers, strings, bools, lists and dicts of them)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out
