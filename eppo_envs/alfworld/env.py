"""`eppo/ALFWorld-v0`: ALFWorld's household tasks on TextWorld's PDDL engine, installed with pip alone.

Observations are the engine's own text ("You are in the middle of a room. Looking quickly around you, you see ...",
"Your task is to: put a clean mug in cabinet."): `engine="fast"` (the default) gives byte for byte what TextWorld's
engine, `engine="textworld"`, gives (docs/alfworld.md). Each turn the model writes `<action>command</action>`; commands
that are not admissible in the current state change nothing, as in ALFWorld ("Nothing happens."), and count as
invalid actions here. Reward 1 when the goal holds. The expert is the engine's planner (`policy_commands`).

`show_admissible="all"` (or True) / `"compact"` appends the admissible commands to every observation
(admissible.py); off by default, so the observations stay exactly the engine's text. `expert="explorer"`
finds the target by looking, as a model must (explorer.py), instead of planning on the full state.
`repeat_goal=True` ends every later observation with the goal again ("Your task is to: ..."), as agent prompts
built on ALFWorld restate the task each turn (verl-agent), so a small model need not recall it from the first turn.
`task_types=[...]` keeps only some of the six task types, by name or by ALFWorld's number (1 pick_and_place_simple,
2 look_at_obj_in_light, ... as in its `env.task_types` setting); seeds then index the chosen types' games only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from eppo_envs.alfworld.actions import read_command
from eppo_envs.alfworld.admissible import FORMS, admissible_line, room_receptacles
from eppo_envs.alfworld.engine import AlfredEngine
from eppo_envs.alfworld.explorer import Explorer, game_params
from eppo_envs.alfworld.sources import GameRef, choose_source
from eppo_envs.alfworld.tasks import select_types
from eppo_envs.core import AgentEnv, StepResult, Tool

INSTRUCTION = (
    "You are an agent in a household (ALFWorld). The first observation describes the room and ends with your task.\n"
    "Each turn, think if you like inside <think>...</think>, then reply with exactly one command inside "
    "<action>...</action>, for example <action>go to cabinet 1</action>.\n"
    "Commands: go to [receptacle]; open [receptacle]; close [receptacle]; take [object] from [receptacle]; "
    "move [object] to [receptacle]; examine [object or receptacle]; use [lamp]; heat [object] with [microwave]; "
    "cool [object] with [fridge]; clean [object] with [sinkbasin]; inventory; look.\n"
    "Only commands that are possible right now change anything; others get \"Nothing happens.\""
)
# the same, for the tools format: one call of `act` instead of the tag
TOOLS_INSTRUCTION = INSTRUCTION.replace(
    "reply with exactly one command inside <action>...</action>, for example <action>go to cabinet 1</action>.",
    "call the act tool with exactly one command, for example act(command=\"go to cabinet 1\").")

LISTED = "\nEach observation ends with the commands possible now (\"Admissible commands: ...\"); pick one of them."
EXPERTS = ("planner", "explorer")
GOAL_PREFIX = "Your task is to:"  # how the engine's first observation states the goal


class AlfWorldEnv(AgentEnv):
    task = "alfworld"
    splits = ("train", "valid_seen", "valid_unseen")
    eval_split = "valid_unseen"
    tool_tags = ("action",)
    reward_changes = (
        "2026-12-06: an unclosed <action> is invalid (its last line had been applied as a command); no step, and so "
        "no win, past the step cap",
    )
    action_hint = "Reply with <action>command</action>, a command possible right now, e.g. <action>look</action>."
    listed_hint = "Reply with <action>command</action>, one of the admissible commands, e.g. <action>look</action>."
    tools = (Tool("act", "Do one household command, e.g. 'go to cabinet 1' or 'take apple 1 from countertop 1'.",
                  (("command", "the command, one that is possible right now"),), "<action>{command}</action>"),)

    def __init__(self, split: str = "train", data_path: str | os.PathLike[str] | None = None,
                 render_mode: str | None = None, engine: str = "fast", show_admissible: bool | str = False,
                 expert: str = "planner", task_types: str | int | Iterable[str | int] | None = None,
                 repeat_goal: bool = False, action_format: str = "tags") -> None:
        super().__init__(split, render_mode=render_mode, action_format=action_format)
        if expert not in EXPERTS:
            raise ValueError(f"expert must be one of {', '.join(EXPERTS)}; got {expert!r}")
        self.expert = expert
        if not isinstance(repeat_goal, bool):
            raise ValueError(f"repeat_goal must be true or false; got {repeat_goal!r}")
        self.repeat_goal = repeat_goal
        self._goal = ""
        self._explorer: Explorer | None = None
        self.show_admissible = _listing_form(show_admissible)
        if self.show_admissible and action_format == "tags":
            self.action_hint = self.listed_hint  # the hint may point at the list only when the model sees it
        self._receptacles: frozenset[str] = frozenset()
        self.source = choose_source(data_path)
        self.task_types = select_types(task_types)
        self._games: dict[str, tuple[int, ...]] = {}  # split -> the source's indices of the chosen task types
        # "fast": our exact engine (fastpddl.py); "textworld": TextWorld's PddlEnv + AlfredDemangler, the oracle.
        self.engine = AlfredEngine(engine)  # type: ignore[arg-type]  (AlfredEngine says which names exist)
        self.game: GameRef | None = None
        self._plan: list[str] | None = None  # the planner's remaining commands, while the episode follows them

    def _chosen(self, split: str) -> tuple[int, ...]:
        """The source's indices of the games of the chosen task types (computed once per split)."""
        if split not in self._games:
            types = self.source.task_types(split)
            self._games[split] = tuple(i for i, t in enumerate(types) if t in (self.task_types or ()))
        return self._games[split]

    def _source_index(self, split: str, index: int) -> int:
        return index if self.task_types is None else self._chosen(split)[index]

    def num_instances(self, split: str) -> int:
        return self.source.count(split) if self.task_types is None else len(self._chosen(split))

    def instance_id(self, split: str, index: int) -> str:
        return super().instance_id(split, self._source_index(split, index))  # the same game keeps one id

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict[str, Any]]:
        self.game = self.source.get(split, self._source_index(split, index))
        observation = self.engine.start(self.game.game)
        self._plan = None
        self._applied = 0  # commands applied since reset (the focused plan holds only from the initial state)
        self._receptacles = room_receptacles(self.engine.admissible)
        params = game_params(self.game.game) if self.expert == "explorer" else {}
        self._explorer = Explorer(self.game.task_type, str(params["object_target"]),
                                  str(params.get("parent_target") or ""), self._receptacles) \
            if params.get("object_target") else None
        goal = observation.rsplit(GOAL_PREFIX, 1)[-1].strip() if GOAL_PREFIX in observation else ""
        self._goal = goal
        observation = self._as_shown(observation, first=True)  # after the goal is read: the listing is not part of it
        extra = {"admissible_actions": list(self.engine.admissible), "task_type": self.game.task_type,
                 "goal": goal, "game": self.game.name, "source": self.source.name}
        instruction = (TOOLS_INSTRUCTION if self.action_format == "tools" else INSTRUCTION) + (
            LISTED if self.show_admissible else "")
        return instruction, observation, extra

    def refuse(self, reason: str) -> StepResult:
        result = self.invalid(reason, admissible_actions=list(self.engine.admissible))
        result.observation = self._as_shown(result.observation)  # as an invalid tag reply shows it
        return result

    def transition(self, text: str) -> StepResult:
        command = read_command(text, self.engine.admissible, self.tool_tags[0])
        state = {"admissible_actions": list(self.engine.admissible)}
        if command.error:
            result = self.invalid(command.error, **state)
            result.observation = self._as_shown(result.observation)
            return result
        if not command.admissible:
            why = f"{command.text[:80]!r} is not possible now" + ("; see the admissible commands." if
                                                                  self.show_admissible else ".")
            return StepResult(self._as_shown(f"Nothing happens. ({why})\n{self.action_hint}"),
                              action_valid=False, info=state)
        if self._plan and self._plan[0] == command.text:
            self._plan.pop(0)
        else:
            self._plan = None  # off the plan: the expert replans on its next call
        observation = self._as_shown(self.engine.step(command.text))
        self._applied += 1
        if self._explorer is not None:
            self._explorer.observe(command.text, self.engine.admissible)
        won = self.engine.won
        info = {"admissible_actions": list(self.engine.admissible), "command": command.text}
        return StepResult(observation, reward=1.0 if won else 0.0, terminated=won, won=won, info=info)

    def expert_action(self) -> str:
        if self._explorer is not None:
            found = self._explorer.next_command(self.engine.admissible)
            if found is not None:
                return f"<action>{found}</action>"
        if not self._plan or self._plan[0] not in self.engine.admissible:
            focus = self.game.focus_problem if self.game is not None and self._applied == 0 else None
            self._plan = self.engine.plan_from_start(focus) if focus else self.engine.plan()
        command = self._plan[0] if self._plan else "look"
        return f"<action>{command}</action>"

    def _as_shown(self, observation: str, first: bool = False) -> str:
        """The engine's text plus what the options add: the goal again (the first observation ends with it), then
        the admissible commands."""
        if self.repeat_goal and not first and self._goal:
            observation = f"{observation}\n{GOAL_PREFIX} {self._goal}"
        if not self.show_admissible:
            return observation
        return f"{observation}\n{admissible_line(self.engine.admissible, self.show_admissible, self._receptacles)}"

    def close(self) -> None:
        self.engine.close()
        super().close()


def _listing_form(value: bool | str) -> str:
    """`show_admissible` as "" (off), "all" or "compact"; one clear error for anything else."""
    if value is True:
        return "all"
    if value is False or value in ("", "off", "none"):
        return ""
    if isinstance(value, str) and value in FORMS:
        return value
    raise ValueError(f"show_admissible must be true, false or one of {', '.join(FORMS)}; got {value!r}")
