"""The ALFWorld engines: the fast exact one (default) and TextWorld's own PDDL engine (`engine="textworld"`).

`engine="fast"` is `FastAlfredGame` (fastpddl.py): the same observations, admissible lists and `won` as the stock
stack, checked against it by tests/test_alfworld_diff.py, at a fraction of the cost (docs/alfworld.md).

`engine="textworld"`: the engine is `textworld.envs.PddlEnv` wrapped in alfworld's `AlfredDemangler` (the wrapper that turns THOR ids
into "cabinet 1", "mug 2"), exactly as alfworld's `AlfredTWEnv` stacks them. Two things are not redone per game:
the parsed grammar and domain (`GameLogic`, keyed by the grammar with its task sentence blanked out, the sentence
being patched into the "task" rule instead), and the state built by `load` is reused by the first `reset` instead of
translating the problem to SAS a second time. The planner (`policy_commands`) runs only when the expert is asked.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

import fast_downward
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.core import GameState
from textworld.envs import PddlEnv
from textworld.envs.pddl import logic as pddl_logic

from eppo_envs.alfworld.fastpddl import FastAlfredGame, base_logic, split_task_rule, task_rules
from eppo_envs.alfworld.translation import ArgvGuard as _ArgvGuard

INTRO_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
ENGINES = ("fast", "textworld")


def _logic_for(domain: str, grammar: str) -> pddl_logic.GameLogic:
    """A private copy of the parsed logic for this domain and grammar, its "task" rule set to the game's sentence."""
    key_grammar, sentence = split_task_rule(grammar)
    logic = copy.deepcopy(base_logic(domain, key_grammar))
    if sentence is not None:
        logic.grammar._rules["task"] = task_rules(sentence)
    return logic


class CachedLogicPddlEnv(PddlEnv):
    """`PddlEnv` whose `load` reuses the parsed logic and whose first `reset` reuses the state `load` built."""

    def load(self, filename_or_data: str | dict[str, Any]) -> None:
        if isinstance(filename_or_data, str):
            with open(filename_or_data) as f:
                data = json.load(f)
            self._game_file = filename_or_data
        else:
            data, self._game_file = filename_or_data, None
        self._game_data = data
        self.walkthrough = data.get("walkthrough")
        self._logic = _logic_for(data["pddl_domain"], data["grammar"])
        with _ArgvGuard():
            self._pddl_state = pddl_logic.PddlState(self.downward_lib, data["pddl_problem"], self._logic)
        self._entity_infos = self._get_entity_infos()
        self._fresh = True

    def reset(self) -> GameState:
        # PddlEnv.reset, except that the state `load` has just built (nothing applied to it yet) is used as is.
        if not getattr(self, "_fresh", False):
            with _ArgvGuard():
                self._pddl_state = pddl_logic.PddlState(self.downward_lib, self._game_data["pddl_problem"], self._logic)
        self._fresh = False
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        context = {"state": self._pddl_state, "facts": list(self._pddl_state.facts), "variables": {}, "mapping": {},
                   "entity_infos": self._entity_infos}
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        return self.state

    def step(self, command: str) -> tuple[GameState, float, bool]:
        self._fresh = False
        return super().step(command)


class AlfredEngine:
    """One ALFWorld game at a time on the chosen engine: load, reset, step, plan."""

    def __init__(self, engine: Literal["fast", "textworld"] = "fast") -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown ALFWorld engine {engine!r}; choose one of {', '.join(ENGINES)}")
        self.engine = engine
        self._fast = FastAlfredGame() if engine == "fast" else None
        if self._fast is None:
            infos = textworld.EnvInfos(admissible_commands=True, won=True)
            self._pddl = CachedLogicPddlEnv(infos)
            self._env = AlfredDemangler(self._pddl, shuffle=False)
        self.admissible: list[str] = []
        self.won = False
        self.feedback = ""  # the engine's text of the last reset/step, unstripped
        self._planner_lib: Any = None

    def start(self, game: str | dict[str, Any]) -> str:
        """Load a game (a path or a game-file dict) and return the intro (banner dropped, as ALFWorld agents do)."""
        if self._fast is not None:
            self._fast.load(game)
            self._fast.reset()
            self._record_fast()
        else:
            self._env.load(game)
            self._record(self._env.reset())
        feedback = self.feedback.strip()
        if feedback.startswith(INTRO_BANNER):
            feedback = feedback[len(INTRO_BANNER):].strip()
        return feedback

    def step(self, command: str) -> str:
        if self._fast is not None:
            self._fast.step(command)
            self._record_fast()
        else:
            state, _, _ = self._env.step(command)
            self._record(state)
        return self.feedback.strip()

    def plan(self) -> list[str]:
        """The planner's commands from the current state to the goal (`policy_commands`); [] if it finds none."""
        if self._fast is not None:
            return self._fast.plan()
        with _ArgvGuard():
            return self._pddl._pddl_state.replan(self._pddl._entity_infos)

    def plan_from_start(self, problem: str) -> list[str]:
        """The planner's commands for `problem`, a variant of the loaded game's initial state (same ids, fewer
        objects), named as in the loaded game. Runs in a second copy of fast-downward's library."""
        if self._planner_lib is None:
            self._planner_lib = fast_downward.load_lib()
        if self._fast is not None:
            game = self._fast._need_game()
            logic, infos = game.logic, game.infos
        else:
            logic, infos = self._pddl._logic, self._pddl._entity_infos
        with _ArgvGuard():
            state = pddl_logic.PddlState(self._planner_lib, problem, logic)
            return state.replan(infos)

    def _record(self, state: Any) -> None:
        self.feedback = state.feedback
        self.admissible = list(state["admissible_commands"])
        self.won = bool(state["won"])

    def _record_fast(self) -> None:
        assert self._fast is not None
        self.feedback = self._fast.feedback
        self.admissible = list(self._fast.admissible)
        self.won = self._fast.won

    def close(self) -> None:
        if self._fast is None:
            self._env.close()
