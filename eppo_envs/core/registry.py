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


@dataclass(frozen=True)
class TaskSpec:
    env_id: str
    task: str
    description: str = ""
    max_episode_steps: int | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


_SPECS: dict[str, TaskSpec] = {}


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
    gym.register(id=env_id, entry_point=entry_point, max_episode_steps=max_episode_steps, kwargs=kwargs)
    spec = TaskSpec(env_id, task, description, max_episode_steps, dict(kwargs))
    _SPECS[env_id] = spec
    return spec


def import_tasks(module: str) -> Any:
    """Import a module that registers your own tasks (`--import mylab.tasks`, a config's `env.imports`), looking in
    the current folder too, as `python -m` does: a console script (`eppo-envs`, `eppo-eval`, `eppo-train`) starts
    with its own bin folder on `sys.path`, so `mylab/` beside you was "No module named 'mylab'"."""
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
