"""Playing one episode with any policy (a function from observation and info to the model's text)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from eppo_envs.core.record import TURN_INFO_DROPPED, Episode, Turn, json_safe

Policy = Callable[[str, dict[str, Any]], str]


def expert_policy(env: gym.Env) -> Policy:
    """The env's own oracle as a policy."""
    return lambda observation, info: env.unwrapped.expert_action()


def play_episode(
    env: gym.Env,
    policy: Policy,
    *,
    seed: int,
    split: str | None = None,
    max_steps: int | None = None,
) -> Episode:
    """Reset on `(split, seed)` and step until the episode ends (or `max_steps`, on an env without a TimeLimit)."""
    options = {"split": split} if split else None
    observation, info = env.reset(seed=seed, options=options)
    spec_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    episode = Episode(
        env_id=spec_id,
        task=info["task"],
        split=info.get("split", split or ""),
        seed=seed,
        instance_id=info["instance_id"],
        instruction=info.get("instruction", ""),
        first_observation=observation,
    )
    limit = max_steps or 1_000
    for _ in range(limit):
        action = policy(observation, info)
        observation, reward, terminated, truncated, info = env.step(action)
        extras = {k: v for k, v in json_safe(info).items() if k not in TURN_INFO_DROPPED}
        episode.turns.append(Turn(action, observation, float(reward), bool(info["action_valid"]), extras))
        episode.won = episode.won or bool(info["won"])
        if terminated or truncated:
            episode.terminated, episode.truncated = bool(terminated), bool(truncated)
            break
    else:
        episode.truncated = True
    return episode
