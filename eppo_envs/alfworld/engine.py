"""TextWorld's PDDL engine playing ALFWorld game files, with what is parsed once kept for the next game.

The engine is `textworld.envs.PddlEnv` wrapped in alfworld's `AlfredDemangler` (the wrapper that turns THOR ids
into "cabinet 1", "mug 2"), exactly as alfworld's `AlfredTWEnv` stacks them. Two things are not redone per game:
the parsed grammar and domain (`GameLogic`, keyed by the grammar with its task sentence blanked out, the sentence
being patched into the "task" rule instead), and the state built by `load` is reused by the first `reset` instead of
translating the problem to SAS a second time. The planner (`policy_commands`) runs only when the expert is asked.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from typing import Any

import fast_downward
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
from textworld.core import GameState
from textworld.envs import PddlEnv
from textworld.envs.pddl import logic as pddl_logic
from textworld.envs.pddl.textgen import ProductionRule
from textworld.envs.pddl.textgen import _parse_and_convert as parse_symbols

INTRO_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
_TASK_RULE = re.compile(r'("task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*)("(?:[^"\\]|\\.)*")')
_LOGIC_CACHE: dict[tuple[str, str], pddl_logic.GameLogic] = {}


class _ArgvGuard:
    """fast_downward's translator overwrites `sys.argv`; give the caller's back."""

    def __enter__(self) -> None:
        self._argv = list(sys.argv)

    def __exit__(self, *exc: object) -> None:
        sys.argv[:] = self._argv


def _logic_for(domain: str, grammar: str) -> pddl_logic.GameLogic:
    """A private copy of the parsed logic for this domain and grammar, its "task" rule set to the game's sentence."""
    match = _TASK_RULE.search(grammar)
    key_grammar = _TASK_RULE.sub(r'\1"Your task is to: UNKNOWN GOAL."', grammar) if match else grammar
    key = (domain, key_grammar)
    if key not in _LOGIC_CACHE:
        if len(_LOGIC_CACHE) > 32:  # official data has one grammar per game: keep memory bounded
            _LOGIC_CACHE.clear()
        _LOGIC_CACHE[key] = pddl_logic.GameLogic(domain=domain, grammar=key_grammar)
    logic = copy.deepcopy(_LOGIC_CACHE[key])
    if match:
        rhs = parse_symbols(json.loads(match.group(2)), rule_name="symbols")
        logic.grammar._rules["task"] = [ProductionRule(lhs="task", rhs=rhs)]
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

    def reset(self):
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

    def step(self, command: str):
        self._fresh = False
        return super().step(command)


class AlfredEngine:
    """One ALFWorld game at a time on the real engine: load, reset, step, plan."""

    def __init__(self) -> None:
        infos = textworld.EnvInfos(admissible_commands=True, won=True)
        self._pddl = CachedLogicPddlEnv(infos)
        self._env = AlfredDemangler(self._pddl, shuffle=False)
        self.admissible: list[str] = []
        self.won = False
        self._planner_lib: Any = None

    def start(self, game: str | dict[str, Any]) -> str:
        """Load a game (a path or a game-file dict) and return the intro (banner dropped, as ALFWorld agents do)."""
        self._env.load(game)
        state = self._env.reset()
        self._record(state)
        feedback = state.feedback.strip()
        if feedback.startswith(INTRO_BANNER):
            feedback = feedback[len(INTRO_BANNER):].strip()
        return feedback

    def step(self, command: str) -> str:
        state, _, _ = self._env.step(command)
        self._record(state)
        return state.feedback.strip()

    def plan(self) -> list[str]:
        """The planner's commands from the current state to the goal (`policy_commands`); [] if it finds none."""
        with _ArgvGuard():
            return self._pddl._pddl_state.replan(self._pddl._entity_infos)

    def plan_from_start(self, problem: str) -> list[str]:
        """The planner's commands for `problem`, a variant of the loaded game's initial state (same ids, fewer
        objects), named as in the loaded game. Runs in a second copy of fast-downward's library."""
        if self._planner_lib is None:
            self._planner_lib = fast_downward.load_lib()
        with _ArgvGuard():
            state = pddl_logic.PddlState(self._planner_lib, problem, self._pddl._logic)
            return state.replan(self._pddl._entity_infos)

    def _record(self, state: Any) -> None:
        self.admissible = list(state["admissible_commands"])
        self.won = bool(state["won"])

    def close(self) -> None:
        self._env.close()
