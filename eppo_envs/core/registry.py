"""Registering and making tasks: a thin layer over `gymnasium.register`/`gymnasium.make` that remembers which
ids are EPPO tasks, so the CLI, the conformance suite and the trainer can list them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec
from gymnasium.error import ResetNeeded
from gymnasium.utils import RecordConstructorArgs


@dataclass(frozen=True)
class TaskSpec:
    env_id: str
    task: str
    description: str = ""
    max_episode_steps: int | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


_SPECS: dict[str, TaskSpec] = {}


class EndOfEpisode(gym.Wrapper, RecordConstructorArgs):
    """Refuses a step once the episode has ended, truncated included, until `reset()`.

    A task refuses a step after it terminated (`AgentEnv.step`), but truncation is Gymnasium's `TimeLimit`, which
    only flags it: a loop that ignores the flag plays on, and a goal reached past the step cap comes back as
    reward 1 and `won` (ALFWorld with `max_episode_steps=2` wins on step 4). Every `make` of a registered task wears
    this wrapper outside the `TimeLimit`, so an episode past its cap raises `ResetNeeded` as a finished one does.
    """

    def __init__(self, env: gym.Env) -> None:
        RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._ended = False

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._ended = False
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self._ended:
            raise ResetNeeded("the episode has ended (terminated or truncated at its step limit); call reset() "
                              "before step()")
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._ended = bool(terminated or truncated)
        return observation, reward, terminated, truncated, info


_END_OF_EPISODE = WrapperSpec("EndOfEpisode", f"{__name__}:EndOfEpisode", {})


def register(
    env_id: str,
    entry_point: str | Callable[..., gym.Env],
    *,
    task: str,
    description: str = "",
    max_episode_steps: int | None = None,
    **kwargs: Any,
) -> TaskSpec:
    """Register a task with Gymnasium and with EPPO's list. `entry_point` may be "module:Class" (imported lazily)."""
    if "/" not in env_id:
        raise ValueError(f"task ids are namespaced, e.g. 'eppo/{env_id}' or 'mylab/{env_id}'")
    gym.register(id=env_id, entry_point=entry_point, max_episode_steps=max_episode_steps, kwargs=kwargs,
                 additional_wrappers=(_END_OF_EPISODE,))
    spec = TaskSpec(env_id, task, description, max_episode_steps, dict(kwargs))
    _SPECS[env_id] = spec
    return spec


def import_tasks(module: str) -> Any:
    """Import a module that registers your own tasks (`--import mylab.tasks`, a config's `env.imports`), looking in
    the current folder too, as `python -m` does: a console script (`eppo-envs`, `eppo-eval`, `eppo-train`) starts
    with its own bin folder on `sys.path`, so `mylab/` beside you would be "No module named 'mylab'"."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.append(here)  # after the installed packages: a folder of yours never shadows one of them
    try:
        return import_module(module)
    except ImportError as exc:  # "No module named 'no'" for no.such.mod: say which import was asked for
        raise type(exc)(f"cannot import {module!r}: {exc}") from None


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """`gymnasium.make` with a clearer error for an unknown id."""
    if env_id not in gym.registry:
        raise gym.error.NameNotFound(f"unknown task {env_id!r}; registered EPPO tasks: {', '.join(tasks())}")
    return gym.make(env_id, **kwargs)


def env_class(env_id: str) -> type:
    """The class behind a registered id (its entry point, imported if given as "module:Class"), without building
    an env: for class attributes such as `eval_split` or `tool_tags`."""
    entry = gym.spec(env_id).entry_point
    return gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry


def reward_revision(env_id: str) -> int | None:
    """The reward revision of a registered task (`AgentEnv.reward_revision()`); None for an env that keeps none."""
    revision = getattr(env_class(env_id), "reward_revision", None)
    return revision() if callable(revision) else None


def reward_changes_after(env_id: str, revision: int) -> list[str]:
    """The task's reward changes made after `revision` (the lines that separate it from today's reward)."""
    return list(getattr(env_class(env_id), "reward_changes", ())[max(revision - 1, 0):])


def tasks() -> list[str]:
    """Ids of every registered EPPO task, sorted."""
    return sorted(_SPECS)


def task_spec(env_id: str) -> TaskSpec:
    try:
        return _SPECS[env_id]
    except KeyError:
        raise KeyError(f"{env_id!r} is not a registered EPPO task; known: {', '.join(tasks())}") from None


def resolve(name: str) -> str:
    """Accept an id ('eppo/ALFWorld-v0') or a task name ('alfworld'); return the id (first registered for a task)."""
    if name in _SPECS:
        return name
    for spec in _SPECS.values():
        if spec.task == name.lower():
            return spec.env_id
    raise KeyError(f"no task {name!r}; known ids: {', '.join(tasks())}")
