"""The OpenEnv wire types of an EPPO task: text in, text out, the Gymnasium `info` in the observation's metadata."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import Action, Observation, State
from pydantic import Field


class TextAction(Action):
    """The model's raw reply. Any string: the env clips it and answers malformed text with a how-to."""

    text: str = Field(default="", description="the model's reply, e.g. '<answer>42</answer>'")


class TextObservation(Observation):
    """What the env says back. `metadata` carries the Gymnasium info dict (`task`, `instance_id`, `won`,
    `action_valid`, `admissible_actions`, ...) plus `terminated`/`truncated`, which `done` merges."""

    text: str = Field(default="", description="the observation text (printable ASCII)")


class EpisodeState(State):
    """Where a session stands. `expert_action` is the oracle's next reply (only when the server allows it)."""

    env_id: str = ""
    task: str = ""
    instance_id: str | None = None
    split: str | None = None
    done: bool = False
    expert_action: str | None = None


def observation_payload(obs: TextObservation) -> dict[str, Any]:
    """One JSON shape for the HTTP session routes (the same fields OpenEnv's WebSocket replies carry)."""
    return {"observation": {"text": obs.text, "metadata": obs.metadata}, "reward": obs.reward, "done": obs.done}
