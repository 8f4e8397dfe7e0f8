"""`AgentEnv`: the one base class every EPPO task derives from.

A task implements four small hooks (`num_instances`, `load_instance`, `transition`, `expert_action`); the base
class owns everything the contract promises to users: Text spaces, choosing the instance from `(split, seed)`,
the `info` keys, printable observations, and turning malformed input into an observation instead of an error.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.error import ResetNeeded

from eppo_envs.core.parsing import clip
from eppo_envs.core.spaces import action_space, observation_space, to_printable
from eppo_envs.core.tools import ACTION_FORMATS, Tool, as_call, read_call, tools_hint


@dataclass
class StepResult:
    """What a task's `transition` returns; the base class turns it into Gymnasium's 5-tuple."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    won: bool = False
    action_valid: bool = True
    info: dict[str, Any] = field(default_factory=dict)


class TaskError(TypeError):
    """A task's hook returned something the contract does not allow: one line naming the hook and what to return."""


@dataclass(frozen=True)
class Instance:
    split: str
    index: int
    instance_id: str


class AgentEnv(gym.Env[str, str]):
    """A multi-turn text task. Subclasses set the class attributes and implement the four hooks below."""

    task: ClassVar[str] = ""  # short name, tags every episode: "alfworld", "webshop", ...
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    eval_split: ClassVar[str] = "test"  # the held-out split evaluations and benchmarks use
    tool_tags: ClassVar[tuple[str, ...]] = ("action",)  # tags this task accepts (see core.parsing)
    action_hint: ClassVar[str] = "Reply with <action>your command</action>."  # appended to every invalid-action reply
    # The same actions as function calls, for the `tools` action format (core/tools.py): each tool renders a valid
    # call into the tag text above, so both formats reach `transition` with the same text.
    tools: ClassVar[tuple[Tool, ...]] = ()
    # One dated line per change that can give the same replies another reward or verdict, oldest first. Results
    # record `reward_revision()` beside every evaluation, so a study or a comparison can tell a figure scored by an
    # earlier reward from one scored today instead of reading both as the same measure.
    reward_changes: ClassVar[tuple[str, ...]] = ()
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"]}

    def __init__(self, split: str = "train", render_mode: str | None = None, action_format: str = "tags") -> None:
        self._check_split(split)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if action_format not in ACTION_FORMATS:
            raise ValueError(f"action_format must be one of {', '.join(ACTION_FORMATS)}, got {action_format!r}")
        if action_format == "tools" and not self.tools:
            raise ValueError(f"{self.task or type(self).__name__} declares no tools (AgentEnv.tools); use "
                             "action_format 'tags'")
        self.split = split
        self.render_mode = render_mode
        self.action_format = action_format
        if action_format == "tools":
            self.action_hint = tools_hint(self.tools)  # every invalid reply (and instructions quoting it) says this
            # The expert answers in the env's input format: its tag text as a call. Bound here so that every caller
            # (conformance, pools, the remote server, `eppo-envs expert`) gets it through the one hook name.
            tags_expert = self.expert_action
            self.expert_action = lambda: as_call(tags_expert(), self.tools)  # type: ignore[method-assign]
        self.observation_space = observation_space()
        self.action_space = action_space()
        self.instance: Instance | None = None
        self._last_observation = ""
        self._ended = False  # the current episode terminated: step() needs a reset() first

    @classmethod
    def reward_revision(cls) -> int:
        """1 + the number of `reward_changes`: revision 1 is the task's reward before any listed change."""
        return 1 + len(cls.reward_changes)

    # ----------------------------------------------------------------- hooks a task implements
    def num_instances(self, split: str) -> int:
        """How many problems `split` holds (seeds wrap around modulo this)."""
        raise NotImplementedError

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict[str, Any]]:
        """Start problem `index` of `split`: return (instruction, first observation, extra info)."""
        raise NotImplementedError

    def transition(self, text: str) -> StepResult:
        """Apply the model's raw text (already a bounded `str`). Never raise for bad input: use `self.invalid`."""
        raise NotImplementedError

    def expert_action(self) -> str:
        """The oracle's next reply (in the same text format a model would write)."""
        raise NotImplementedError(f"{type(self).__name__} has no expert")

    def instance_id(self, split: str, index: int) -> str:
        return f"{self.task}/{split}/{index:05d}"

    def refuse(self, reason: str) -> StepResult:
        """The reply to a tool call refused before `transition` (tools format only). A task that counts turns or
        shows state in its invalid replies overrides this to do the same here."""
        return self.invalid(reason)

    # ----------------------------------------------------------------- helpers for tasks
    def invalid(self, reason: str, **info: Any) -> StepResult:
        """The reply to a malformed turn: what was wrong, then how to act. The episode goes on."""
        return StepResult(observation=f"Invalid action: {reason}\n{self.action_hint}", action_valid=False, info=info)

    # ----------------------------------------------------------------- Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        split = options.get("split", self.split)
        self._check_split(split)
        count = self.num_instances(split)
        if count <= 0:
            raise ValueError(f"{self.task}: split {split!r} has no instances")
        if "index" in options:
            index = _as_index(options["index"], self.task) % count
        elif seed is not None:
            index = int(seed) % count
        else:
            index = int(self.np_random.integers(count))
        loaded = self.load_instance(split, index)
        if not (isinstance(loaded, tuple) and len(loaded) == 3 and isinstance(loaded[0], str)
                and isinstance(loaded[1], str) and isinstance(loaded[2], dict)):
            raise TaskError(f"{type(self).__name__}.load_instance returned {_shape(loaded)}; return (instruction: "
                            "str, first observation: str, extra info: dict)")
        instruction, observation, extra = loaded
        self.instance = Instance(split, index, self.instance_id(split, index))
        info = {
            "task": self.task,
            "instance_id": self.instance.instance_id,
            "split": split,
            "won": False,
            "action_valid": True,
            "instruction": to_printable(instruction),
            **extra,
        }
        if self.action_format == "tools":  # what the policy side renders with the chat template's `tools=`
            info.update(action_format="tools", tools=[t.schema() for t in self.tools])
        self._last_observation = to_printable(observation)
        self._ended = False
        return self._last_observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.instance is None:
            raise ResetNeeded("call reset() before step()")
        if self._ended:  # as Gymnasium: a terminated episode takes no more steps
            raise ResetNeeded(f"{self.task}: the episode has terminated; call reset() before step()")
        text = clip(action)
        if self.action_format == "tools":
            call = read_call(text, self.tools)
            result = self.refuse(call.error) if call.error is not None else self.transition(call.content)
        else:
            result = self.transition(text)
        # said here, naming the hook: else reading the fields below fails as "'tuple' object has no attribute
        # 'terminated'"
        if not isinstance(result, StepResult):
            raise TaskError(f"{type(self).__name__}.transition returned {_shape(result)}; return a StepResult"
                            "(observation, reward, terminated, won, action_valid, info)")
        if not isinstance(result.observation, str) or isinstance(result.reward, bool) or not isinstance(
                result.reward, numbers.Real) or not isinstance(result.info, dict):
            raise TaskError(f"{type(self).__name__}.transition returned StepResult(observation="
                            f"{type(result.observation).__name__}, reward={type(result.reward).__name__}, info="
                            f"{type(result.info).__name__}); they must be str, float and dict")
        self._ended = bool(result.terminated)
        info = {
            "task": self.task,
            "instance_id": self.instance.instance_id,
            "split": self.instance.split,
            **result.info,
            "won": bool(result.won),
            "action_valid": bool(result.action_valid),
        }
        self._last_observation = to_printable(result.observation)
        if self.render_mode == "human":
            print(self._last_observation)
        return self._last_observation, float(result.reward), bool(result.terminated), False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        if self.render_mode == "human":
            print(self._last_observation)
        return None

    # -----------------------------------------------------------------
    def _check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(f"{self.task}: unknown split {split!r}; choose one of {list(self.splits)}")


def _shape(value: Any) -> str:
    """`tuple of 5 (str, float, ...)`: what a hook returned, briefly, for TaskError."""
    if isinstance(value, tuple):
        kinds = ", ".join(type(v).__name__ for v in value[:5]) + (", ..." if len(value) > 5 else "")
        return f"a tuple of {len(value)} ({kinds})"
    return f"a {type(value).__name__}"


def _as_index(value: Any, task: str) -> int:
    """The `index` reset option as an int, or one clear error naming the option."""
    if isinstance(value, bool):
        raise ValueError(f"{task}: reset option 'index' must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{task}: reset option 'index' must be an integer, got {value!r}") from None


def first_prompt(observation: str, info: dict[str, Any]) -> str:
    """The first user message of an episode: the task's instruction (with its tool format), then the observation."""
    instruction = info.get("instruction", "")
    return f"{instruction}\n\n{observation}" if instruction else observation
