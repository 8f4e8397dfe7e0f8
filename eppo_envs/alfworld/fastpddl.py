"""A fast exact ALFWorld engine: fast-downward's own successor function, TextWorld's text rules compiled once.

What the stock stack (`textworld.envs.PddlEnv` + alfworld's `AlfredDemangler`) computes, and what is kept:
- the state, the applicable operators, their effects and the goal test stay in fast-downward's C++ library, fed the
  same SAS translation (`fast_downward.pddl2sas`, unoptimised), so which commands exist is decided by the same code;
- the facts TextWorld keeps beside it (initial atoms, then every effect atom added and its negation removed, so
  "not_inreceptacle" facts appear exactly as they do there) live in a `FactIndex`;
- every text (intro, feedback, each admissible command) is derived by `CompiledGrammar` from the same parsed rules.
What is not redone: the translation and everything derived from it are kept per problem text (`_GAME_CACHE`), so a
second reset of a game only reloads the SAS into the library; the planner's optimised translation is made only
when the planner is asked. docs/alfworld.md has the profile this follows from.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import fast_downward
import textworld.logic
from alfworld.agents.utils.misc import Demangler
from textworld.envs.pddl import logic as pddl_logic
from textworld.envs.pddl.textgen import ProductionRule
from textworld.envs.pddl.textgen import _parse_and_convert as parse_symbols
from textworld.generator.game import EntityInfo

from eppo_envs.alfworld import grounding
from eppo_envs.alfworld.textgen import CompiledGrammar, Context, FactIndex, Ph, Var
from eppo_envs.alfworld.translation import ArgvGuard, Translation, cached_translation

TASK_RULE = re.compile(r'("task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*)("(?:[^"\\]|\\.)*")')
_LOGIC_CACHE: dict[tuple[str, str], pddl_logic.GameLogic] = {}
_GRAMMAR_CACHE: dict[tuple[str, str], CompiledGrammar] = {}
_GAME_CACHE: OrderedDict[tuple[str, str], _Game] = OrderedDict()
GAME_CACHE_SIZE = 64  # games kept in memory (~1 MB each, the SAS task compressed); the disk cache holds the rest

__all__ = ["ArgvGuard", "FastAlfredGame", "base_logic", "clear_caches", "split_task_rule", "task_rules"]


def split_task_rule(grammar: str) -> tuple[str, str | None]:
    """(the grammar with its task sentence blanked out, the sentence's JSON string or None)."""
    match = TASK_RULE.search(grammar)
    if not match:
        return grammar, None
    return TASK_RULE.sub(r'\1"Your task is to: UNKNOWN GOAL."', grammar), match.group(2)


def base_logic(domain: str, grammar: str) -> pddl_logic.GameLogic:
    """The parsed logic of `domain` and `grammar` (task sentence blanked), parsed once. Shared: do not mutate."""
    key = (domain, grammar)
    if key not in _LOGIC_CACHE:
        if len(_LOGIC_CACHE) > 32:  # official data has one grammar per game: keep memory bounded
            _LOGIC_CACHE.clear()
            _GRAMMAR_CACHE.clear()
        _LOGIC_CACHE[key] = pddl_logic.GameLogic(domain=domain, grammar=grammar)
    return _LOGIC_CACHE[key]


def task_rules(sentence: str) -> list[ProductionRule]:
    return [ProductionRule(lhs="task", rhs=parse_symbols(json.loads(sentence), rule_name="symbols"))]


def _type_hierarchy(t: Translation) -> textworld.logic.TypeHierarchy:
    types = textworld.logic.TypeHierarchy()
    for name, supertypes in t.types:  # as PddlState.__init__ imports them (duplicates like "object - object" skipped)
        try:
            types.add(textworld.logic.Type(name, supertypes))
        except ValueError:
            pass
    return types


def _var_name(value: str) -> str:
    return value.upper() if value.lower() in ("i", "p") else value  # as textworld's pddl Atom._get_var_name


def parse_atom(text: str, name2type: dict[str, str]) -> tuple[str, tuple[Var, ...]]:
    """fast-downward's "Atom p(a, b)" / "NegatedAtom p(a, b)" as (name, args), as `Atom.get_fact` reads it."""
    atom_type, rest = text.split(" ", 1)
    name, args = rest.split("(", 1)
    values = tuple((_var_name(a), name2type[a]) for a in args[:-1].split(", ") if a)
    return ("not_" + name if atom_type == "NegatedAtom" else name), values


def negation(name: str) -> str:
    return name.split("not_", 1)[1] if name.startswith("not_") else "not_" + name


def clear_caches() -> None:
    """Forget every parsed grammar, compiled exploration rule and translated problem (the next load of any game is a
    cold one)."""
    grounding.clear_compiled()
    _LOGIC_CACHE.clear()
    _GRAMMAR_CACHE.clear()
    _GAME_CACHE.clear()


@dataclass
class _Game:
    """Everything one problem text determines, computed at its first load."""

    domain: str
    problem: str
    sas_z: bytes  # the SAS task, zlib-compressed
    name2type: dict[str, str]
    params: dict[str, list[Ph]]  # action name -> its parameters as placeholders
    facts: FactIndex  # the initial state's facts, as PddlState holds them
    infos: dict[str, EntityInfo]  # demangled names ("cabinet 1")
    grammar: CompiledGrammar
    logic: pddl_logic.GameLogic
    sas_replan_z: bytes | None = None  # the planner's (optimised) SAS task, made when first asked for

    @property
    def sas(self) -> bytes:
        return zlib.decompress(self.sas_z)


def _build_game(lib: Any, domain: str, grammar_text: str, problem: str) -> _Game:
    key_grammar, sentence = split_task_rule(grammar_text)
    logic = base_logic(domain, key_grammar)
    t, _ = cached_translation(domain, problem)
    name2type = t.objects
    facts = FactIndex()
    for predicate, args in t.init:
        facts.add(predicate, tuple((a, name2type[a]) for a in args))
    sas = t.sas.encode("utf-8")
    lib.load_sas(sas)
    atoms = (pddl_logic.Atom * lib.get_state_size())()
    lib.get_state(atoms)
    for atom in atoms:
        name, args = parse_atom(atom.name, name2type)
        if not name.startswith("not_"):
            facts.add(name, args)
    infos = _entity_infos(facts)
    gkey = (domain, key_grammar)
    if gkey not in _GRAMMAR_CACHE:
        _GRAMMAR_CACHE[gkey] = CompiledGrammar(logic.grammar._rules, _type_hierarchy(t))
    grammar = _GRAMMAR_CACHE[gkey]
    if sentence is not None:
        grammar = grammar.with_rule("task", task_rules(sentence))
    return _Game(domain, problem, zlib.compress(sas, 1), name2type, t.params, facts, infos, grammar, logic)


def _entity_infos(facts: FactIndex) -> dict[str, EntityInfo]:
    """PddlEnv._get_entity_infos, then AlfredDemangler.load's renaming."""
    infos: dict[str, EntityInfo] = {}
    for sig in facts._sets:
        for args in facts.sorted_facts(sig):
            for name, type_ in args:
                infos[name] = EntityInfo(name, type_)
    for info in infos.values():
        info.name, info.definite, info.indefinite = info.id, "the", "a"
    demangler = Demangler(game_infos=infos, shuffle=False)
    for info in infos.values():
        info.name = demangler.demangle_alfred_name(info.id)
    return infos


def _game_for(lib: Any, data: dict[str, Any]) -> tuple[_Game, bool]:
    """The cached game of this (domain, grammar, problem), or a new one; True when the SAS is already loaded."""
    key = (data["grammar"], data["pddl_problem"])
    game = _GAME_CACHE.get(key)
    if game is not None and game.domain == data["pddl_domain"]:
        _GAME_CACHE.move_to_end(key)
        return game, False
    with grounding.paused_gc():  # a first load allocates a lot (translation, grammar): see paused_gc
        game = _build_game(lib, data["pddl_domain"], data["grammar"], data["pddl_problem"])
    _GAME_CACHE[key] = game
    while len(_GAME_CACHE) > GAME_CACHE_SIZE:
        _GAME_CACHE.popitem(last=False)
    return game, True


@dataclass
class _Action:
    op_id: int
    name: str
    mapping: dict[Ph, Var]
    nb_effects: int


class FastAlfredGame:
    """One ALFWorld game at a time: `load`, `reset`, `step`, with `feedback`, `admissible`, `won` after each."""

    def __init__(self) -> None:
        self.lib = fast_downward.load_lib()
        self.game: _Game | None = None
        self.feedback = ""
        self.admissible: list[str] = []
        self.won = False
        self._fresh = False
        self._replan_loaded = False

    def load(self, game: str | dict[str, Any]) -> None:
        if isinstance(game, str):
            with open(game) as f:
                game = json.load(f)
        self.game, self._fresh = _game_for(self.lib, game)

    def reset(self) -> str:
        game = self._need_game()
        if not self._fresh:
            self.lib.load_sas(game.sas)
        self._fresh = False
        self._replan_loaded = False
        self.facts = game.facts.copy()
        self.feedback = game.grammar.derive("#intro#", Context(game.grammar, self.facts, {}, {}, game.infos))
        self._gather()
        return self.feedback

    def step(self, command: str) -> str:
        game = self._need_game()
        command = command.strip()
        try:
            action = self._actions[self._commands.index(command)]
        except ValueError:
            self.feedback = "Nothing happens."  # nothing changes: the admissible list stays as it is
            return self.feedback
        effects = (pddl_logic.Atom * action.nb_effects)()
        self.lib.apply_operator(action.op_id, effects)
        for atom in effects:
            name, args = parse_atom(atom.name, game.name2type)
            self.facts.discard(negation(name), args)
            self.facts.add(name, args)
        rule = game.logic.actions[action.name].feedback_rule
        self.feedback = game.grammar.derive(rule, self._context(action))
        self._gather()
        return self.feedback

    def plan(self) -> list[str]:
        """The planner's commands from the current state (PddlState.replan); [] when it finds none."""
        game = self._need_game()
        if not self._replan_loaded:
            if game.sas_replan_z is None:
                sas = cached_translation(game.domain, game.problem, optimize=True)[0].sas
                game.sas_replan_z = zlib.compress(sas.encode("utf-8"), 1)
            self.lib.load_sas_replan(zlib.decompress(game.sas_replan_z))
            self._replan_loaded = True
        if not self.lib.replan(False):
            return []
        operators = (fast_downward.Operator * self.lib.get_last_plan_length())()
        self.lib.get_last_plan(operators)
        return plan_commands([op.name for op in operators], game)

    def _context(self, action: _Action) -> Context:
        game = self._need_game()
        variables = {ph[0]: game.infos[var[0]] for ph, var in action.mapping.items()}
        return Context(game.grammar, self.facts, variables, action.mapping, game.infos)

    def _gather(self) -> None:
        """PddlEnv._gather_infos: the goal test, then each applicable operator's command (first of each name)."""
        game = self._need_game()
        lib = self.lib
        self.won = bool(lib.check_goal())
        operators = (fast_downward.Operator * lib.get_applicable_operators_count())()
        lib.get_applicable_operators(operators)
        names = {k: info.name for k, info in game.infos.items()}
        self._actions, self._commands = [], []
        seen: set[str] = set()
        for op in operators:
            op_name = op.name
            if op_name in seen:
                continue
            seen.add(op_name)
            name, *arguments = op_name.split()
            mapping = {ph: (arg, ph[1]) for ph, arg in zip(game.params[name], arguments, strict=False)}
            action = _Action(op.id, name, mapping, op.nb_effect_atoms)
            template = game.grammar.derive(game.logic.actions[name].template, self._context(action))
            self._actions.append(action)
            self._commands.append(template.format(**names))
        self.admissible = sorted(set(self._commands))

    def _need_game(self) -> _Game:
        if self.game is None:
            raise RuntimeError("no game loaded: call load() first")
        return self.game


def plan_commands(plan: list[str], game: _Game) -> list[str]:
    """PddlState.plan_to_templated_actions: operator names to commands with the demangled names."""
    out = []
    for step in plan:
        parts = step.split()
        action = parts[0]
        values = {p[0]: game.infos[parts[i + 1]].name for i, p in enumerate(game.params[action])}
        template = game.logic.actions[action].template if action != "gotolocation" else "go to {r}"
        out.append(template.format(**values))
    return out
