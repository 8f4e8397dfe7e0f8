"""The environment contract shared by every EPPO task: base class, spaces, parsing, records, registry."""

from eppo_envs.core.base import AgentEnv, Instance, StepResult, TaskError, first_prompt
from eppo_envs.core.parsing import (
    ToolCall,
    extract_boxed,
    extract_code_block,
    find_tags,
    parse_tool_call,
    strip_think,
)
from eppo_envs.core.play import Policy, expert_policy, play_episode
from eppo_envs.core.record import Episode, Turn
from eppo_envs.core.registry import TaskSpec, import_tasks, make, register, resolve, task_spec, tasks
from eppo_envs.core.tools import ACTION_FORMATS, Tool

__all__ = [
    "ACTION_FORMATS",
    "AgentEnv",
    "Episode",
    "Instance",
    "Policy",
    "StepResult",
    "TaskError",
    "TaskSpec",
    "Tool",
    "ToolCall",
    "Turn",
    "expert_policy",
    "extract_boxed",
    "extract_code_block",
    "find_tags",
    "import_tasks",
    "first_prompt",
    "make",
    "parse_tool_call",
    "play_episode",
    "register",
    "resolve",
    "strip_think",
    "task_spec",
    "tasks",
]
