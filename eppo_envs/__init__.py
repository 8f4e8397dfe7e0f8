"""eppo_envs: five multi-turn agent tasks behind one Gymnasium text API.

    import eppo_envs
    env = eppo_envs.make("eppo/ALFWorld-v0")
    obs, info = env.reset(seed=0)

Importing the package registers every built-in task (entry points are imported lazily, on `make`).
"""

from importlib import import_module

from eppo_envs.core import AgentEnv, Episode, StepResult, Turn, make, register, resolve, task_spec, tasks

# Each built-in task package registers its ids in its __init__ (one `register` call each, no heavy imports).
_BUILTIN_TASKS: tuple[str, ...] = ("alfworld", "searchqa", "webshop", "math", "code")

for _name in _BUILTIN_TASKS:
    import_module(f"eppo_envs.{_name}")

__all__ = ["AgentEnv", "Episode", "StepResult", "Turn", "make", "register", "resolve", "task_spec", "tasks"]
