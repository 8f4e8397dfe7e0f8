"""`EppoEnvironment`: one EPPO task behind OpenEnv's `Environment` interface (one instance per session).

The Gymnasium env is built on the first reset, not in the constructor: OpenEnv calls the factory for cheap
requests too (`/metadata`), and a session that never resets should cost nothing (no Chromium, no sandbox).
"""

from __future__ import annotations

import uuid
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded
from openenv.core.env_server import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from eppo_envs.core.record import json_safe
from eppo_envs.core.registry import make, task_spec
from eppo_envs.remote.models import EpisodeState, TextAction, TextObservation


class EppoEnvironment(Environment[TextAction, TextObservation, EpisodeState]):
    # Every session owns its own Gymnasium env (own engine, own browser, own sandbox): nothing is shared.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, expert: bool = True, env_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.env_id = env_id
        self.expert = expert
        self.env_kwargs = dict(env_kwargs or {})
        self.env: gym.Env | None = None
        self._episode_id: str | None = None
        self._info: dict[str, Any] = {}
        self._steps = 0
        self._done = False
        self.closed = False

    # ----------------------------------------------------------------- OpenEnv interface
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> TextObservation:
        """Start the instance `(split, seed)` picks, exactly as `eppo_envs.make(id).reset(seed=, options=)` would."""
        if self.env is None:
            # Without Gymnasium's passive checker: after a refused reset (unknown split) it fails the next step
            # with a TypeError; it only warns anyway, and the conformance suite checks the task itself.
            self.env = make(self.env_id, disable_env_checker=True, **self.env_kwargs)
        options: dict[str, Any] = {}
        if split is not None:
            options["split"] = split
        if index is not None:
            options["index"] = index
        observation, info = self.env.reset(seed=seed, options=options or None)
        self._episode_id = episode_id or str(uuid.uuid4())
        self._steps, self._done = 0, False
        self._info = json_safe(info)
        metadata = {**self._info, "terminated": False, "truncated": False}
        return TextObservation(text=observation, reward=None, done=False, info=metadata, metadata=metadata)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        if self.env is None or "instance_id" not in self._info:
            raise ResetNeeded("reset the session before stepping it")
        observation, reward, terminated, truncated, info = self.env.step(action.text)
        self._steps += 1
        self._done = bool(terminated or truncated)
        self._info = json_safe(info)
        metadata = {**self._info, "terminated": bool(terminated), "truncated": bool(truncated)}
        return TextObservation(text=observation, reward=float(reward), done=self._done, info=metadata, metadata=metadata)

    @property
    def state(self) -> EpisodeState:
        expert_action = None
        if self.expert and self.env is not None and "instance_id" in self._info and not self._done:
            try:
                expert_action = self.env.unwrapped.expert_action()
            except Exception:  # a task without an expert, or none for this state: the field stays empty
                expert_action = None
        return EpisodeState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self.env_id,
            task=task_spec(self.env_id).task,
            instance_id=self._info.get("instance_id"),
            split=self._info.get("split"),
            done=self._done,
            expert_action=expert_action,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        spec = task_spec(self.env_id)
        return EnvironmentMetadata(name=self.env_id, description=spec.description or spec.task, version="0")

    def close(self) -> None:
        """Close the Gymnasium env (browser, sandbox, engine). Idempotent: expiry and shutdown may both call it."""
        if self.env is not None:
            env, self.env = self.env, None
            env.close()
        self.closed = True
