"""The OpenEnv wire types of an EPPO task: text in, text out, the Gymnasium `info` in the observation's metadata."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import Action, Observation, State
from pydantic import Field


class TextAction(Action):
    """The model's raw reply. Any string: the env clips it and answers malformed text with a how-to."""

    text: str = Field(default="", description="the model's reply, e.g. '<answer>42</answer>'")


class TextObservation(Observation):
    """What the env says back. `info` (and, in-process, `metadata`) is the Gymnasium info dict (`task`,
    `instance_id`, `won`, `action_valid`, `admissible_actions`, ...) plus `terminated`/`truncated`, which `done`
    merges. Both are set because OpenEnv's serializer leaves `metadata` off the wire; `info` travels."""

    text: str = Field(default="", description="the observation text (printable ASCII)")
    info: dict[str, Any] = Field(default_factory=dict, description="the Gymnasium info dict + terminated/truncated")


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
    return {"observation": {"text": obs.text, "info": obs.info}, "reward": obs.reward, "done": obs.done}
