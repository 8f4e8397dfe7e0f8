"""fast_downward's unoptimised PDDL -> SAS translation with a faster relaxed exploration; the same SAS text.

A cold ALFWorld reset is mostly `fast_downward.pddl2sas` (pure Python), and 40-45 % of that is its relaxed
reachability analysis (`instantiate.explore`: a generic Datalog engine that splits every rule into binary joins and
fires each join through a generic unifier). This module keeps every other stage of the translator — parsing,
normalisation, the exploration *rules* (`normalize.build_exploration_rules`), instantiation, fact groups, the SAS
task and its text — and evaluates the same rules with a small semi-naive engine: atoms are plain tuples, each rule
is joined through hash indexes chosen once per (rule, triggering condition). The least model of a Datalog program
does not depend on the evaluation order, and everything downstream of the model sorts what it emits (operators,
axioms, variables), so the SAS text is byte-identical; `tests/test_alfworld_grounding.py` checks it against
`fast_downward.pddl2sas` on games of every task type. Anything the engine does not handle (a free effect variable)
falls back to fast_downward's own exploration. After the exploration, `strips_sas` makes the SAS text directly where
the unoptimised options allow (every ALFWorld game); otherwise fast_downward's stages run on this module's
grounding.
"""

from __future__ import annotations

import contextlib
import gc
import io
import sys
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import fast_downward  # noqa: F401  (puts its translate package in place)

from eppo_envs.alfworld import strips_sas
from eppo_envs.alfworld.strips_sas import conjunction_literals

__all__ = ["clear_compiled", "paused_gc", "pddl2sas"]

_ARGV = ["translate.py", "domain", "task"]


def _modules() -> Any:
    """fast_downward's translate modules (its `options` module parses sys.argv when first imported)."""
    saved = list(sys.argv)
    sys.argv[:] = _ARGV
    try:
        from fast_downward.translate import (
            axiom_rules,
            fact_groups,
            instantiate,
            normalize,
            options,
            pddl,
            sccs,
            simplify,
            translate,
            variable_order,
        )
        from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions
    finally:
        sys.argv[:] = saved
    return (fact_groups, instantiate, normalize, options, pddl, simplify, translate, variable_order, lisp_parser,
            parsing_functions, axiom_rules, sccs)


class _Unsupported(Exception):
    pass


def _is_var(arg: str) -> bool:
    return arg[:1] == "?"


Shape = tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]  # a rule's argument patterns: (conditions, head)
_COMPILED: dict[tuple[Shape, int], tuple[Any, list[tuple[int, tuple[int, ...]]]]] = {}


def _plan(conds: tuple[tuple[str, ...], ...], first: int) -> list[tuple[int, tuple[int, ...]]]:
    """Greedy join order after condition `first`: next the condition with most bound arguments (fully bound ones
    first: a set lookup). Each step: (condition index, its bound positions)."""
    bound = {a for a in conds[first] if _is_var(a)}
    rest = [i for i in range(len(conds)) if i != first]
    plan = []
    while rest:
        def score(i: int, bound: set[str] = bound) -> tuple[bool, int]:
            nb = sum(1 for a in conds[i] if not _is_var(a) or a in bound)
            return (nb == len(conds[i]), nb)
        best = max(rest, key=score)
        rest.remove(best)
        plan.append((best, tuple(p for p, a in enumerate(conds[best]) if not _is_var(a) or a in bound)))
        bound |= {a for a in conds[best] if _is_var(a)}
    return plan


def _compile(shape: Shape, first: int) -> tuple[Any, list[tuple[int, tuple[int, ...]]]]:
    """The code of `trigger(t)`: given a new atom `t` matching condition `first`, nested loops over the indexes
    (`i<step>`) of the other conditions, calling `add(H, head)` for each match. Depends only on the argument
    patterns, so it is compiled once per process for every game (constants are literals in the code)."""
    key = (shape, first)
    if key in _COMPILED:
        return _COMPILED[key]
    conds, head = shape
    plan = _plan(conds, first)
    names: dict[str, str] = {}
    lines = ["def trigger(t):"]
    depth = 1

    def emit(text: str) -> None:
        lines.append("    " * depth + text)

    def term(t: str) -> str:
        return names[t] if _is_var(t) else repr(t)

    def bind(pattern: tuple[str, ...], source: str, skip: tuple[int, ...], exit_: str) -> None:
        for pos, t in enumerate(pattern):
            if pos in skip:
                continue
            if not _is_var(t) or t in names:
                emit(f"if {source}[{pos}] != {term(t)}: {exit_}")
            else:
                names[t] = f"v{len(names)}"
                emit(f"{names[t]} = {source}[{pos}]")

    emit(f"if len(t) != {len(conds[first])}: return")
    bind(conds[first], "t", (), "return")
    for step, (ci, positions) in enumerate(plan):
        keys = [term(conds[ci][p]) for p in positions]
        emit(f"s{step} = i{step}.get(({', '.join(keys)}{',' if keys else ''}))")
        emit(f"if not s{step}: " + ("return" if depth == 1 else "continue"))
        if len(positions) < len(conds[ci]):
            emit(f"for a{step} in s{step}:")
            depth += 1
            bind(conds[ci], f"a{step}", positions, "continue")
    values = [term(t) for t in head]
    emit(f"add(H, ({', '.join(values)}{',' if values else ''}))")
    code = compile("\n".join(lines), f"<exploration rule {first}>", "exec")
    _COMPILED[key] = (code, plan)
    return code, plan


def clear_compiled() -> None:
    """Forget the compiled rules (what a new process starts with)."""
    _COMPILED.clear()


class _Rule:
    """One exploration rule `head :- conds` (predicates are strings or fast_downward's Action/Axiom objects)."""

    def __init__(self, conds: list[tuple[Any, tuple[str, ...]]], head: tuple[Any, tuple[str, ...]]) -> None:
        self.conds = conds
        self.head = head
        body_vars = {a for _, args in conds for a in args if _is_var(a)}
        if any(_is_var(a) and a not in body_vars for a in head[1]):
            raise _Unsupported("free effect variable")
        self.shape: Shape = (tuple(args for _, args in conds), head[1])


class _Model:
    """The least model of the exploration rules, computed atom by atom: each new atom triggers the rules whose
    conditions it matches, joined with the atoms known so far, so every derivation is found when the last of its
    conditions arrives. Each (rule, triggering condition) is a compiled function of nested loops over hash indexes
    (fast_downward's generic unifier and binary joins are what make its exploration slow)."""

    def __init__(self, rules: list[_Rule]) -> None:
        self.known: set[tuple[Any, tuple[str, ...]]] = set()
        self.order: list[tuple[Any, tuple[str, ...]]] = []
        self.index_keys: dict[Any, list[tuple[int, ...]]] = defaultdict(list)
        self.indexes: dict[tuple[Any, tuple[int, ...]], dict[tuple[str, ...], list[tuple[str, ...]]]] = {}
        self.triggers: dict[Any, list[Any]] = defaultdict(list)
        self.facts = [rule.head for rule in rules if not rule.conds]
        for rule in rules:
            for i, (pred, _) in enumerate(rule.conds):
                code, plan = _compile(rule.shape, i)
                namespace: dict[str, Any] = {"add": self.add, "H": rule.head[0]}
                for step, (ci, positions) in enumerate(plan):
                    namespace[f"i{step}"] = self._index(rule.conds[ci][0], positions)
                exec(code, namespace)  # noqa: S102  (defines `trigger`, code generated by _compile)
                self.triggers[pred].append(namespace["trigger"])

    def _index(self, pred: Any, positions: tuple[int, ...]) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
        key = (pred, positions)
        if key not in self.indexes:
            self.indexes[key] = defaultdict(list)
            self.index_keys[pred].append(positions)
        return self.indexes[key]

    def add(self, pred: Any, args: tuple[str, ...]) -> None:
        atom = (pred, args)
        if atom in self.known:
            return
        self.known.add(atom)
        self.order.append(atom)
        for positions in self.index_keys.get(pred, ()):
            self.indexes[(pred, positions)][tuple([args[i] for i in positions])].append(args)

    def run(self) -> None:
        for pred, args in self.facts:
            self.add(pred, args)
        done = 0
        order, triggers = self.order, self.triggers
        while done < len(order):
            pred, args = order[done]
            done += 1
            for trigger in triggers.get(pred, ()):
                trigger(args)


def exploration_order(task: Any, mods: Any) -> list[tuple[Any, tuple[str, ...]]]:
    """The least model of the exploration rules, atoms as (predicate, args) in the order they were found."""
    _, instantiate, normalize, _, pddl, *_ = mods
    rules: list[_Rule] = []
    for conditions, effect in normalize.build_exploration_rules(task):
        rules.append(_Rule([(c.predicate, tuple(c.args)) for c in conditions], (effect.predicate, tuple(effect.args))))
    model = _Model(rules)
    type_dict = {t.name: t for t in task.types}
    for obj in task.objects:  # pddl_to_prolog.translate_facts
        for type_name in [obj.type_name, *type_dict[obj.type_name].supertype_names]:
            atom = pddl.TypedObject(obj.name, type_name).get_atom()
            model.add(atom.predicate, tuple(atom.args))
    for fact in task.init:
        if isinstance(fact, pddl.Atom):
            model.add(fact.predicate, tuple(fact.args))
    model.run()
    return model.order


def explore(task: Any, mods: Any, order: list | None = None) -> tuple:
    """What `instantiate.explore(task)` returns, with the model computed by `_Model`."""
    return _instantiate(task, exploration_order(task, mods) if order is None else order, mods)


class _Impossible(Exception):
    pass


def _ground(literals: list, mapping: dict[str, str], fluent: set, init: set, pddl: Any) -> list:
    """Literal.instantiate over a conjunction: the fluent literals, `_Impossible` if a static one is false."""
    out = []
    for negated, pred, pattern in literals:
        args = tuple([mapping.get(a, a) for a in pattern])
        key = (pred, args)
        if key in fluent:
            out.append(pddl.NegatedAtom(pred, args) if negated else pddl.Atom(pred, args))
        elif (key in init) == negated:
            raise _Impossible
    return out


def _instantiate(task: Any, order: list[tuple[Any, tuple[str, ...]]], mods: Any) -> tuple:
    """instantiate.instantiate(task, model) from the model's atoms as tuples: actions are grounded here (the same
    PropositionalActions as Action.instantiate makes), anything unusual by fast_downward's own code."""
    instantiate, pddl = mods[1], mods[4]
    fluent_predicates = {eff.literal.predicate for action in task.actions for eff in action.effects}
    fluent_predicates |= {axiom.name for axiom in task.axioms}
    fluent_keys = {atom for atom in order if isinstance(atom[0], str) and atom[0] in fluent_predicates}
    fluent_facts = {pddl.Atom(pred, args) for pred, args in fluent_keys}
    init_facts, init_assignments = set(), {}
    for element in task.init:
        if isinstance(element, pddl.Assign):
            init_assignments[element.fluent] = element.expression
        else:
            init_facts.add(element)
    init_keys = {(f.predicate, f.args) for f in init_facts if isinstance(f, pddl.Atom)}
    type_to_objects = instantiate.get_objects_by_type(task.objects, task.types)
    plans: dict[Any, Any] = {}
    for action in task.actions:
        pre = conjunction_literals(action.precondition, pddl)
        effects = []
        for eff in action.effects:
            cond = conjunction_literals(eff.condition, pddl)
            if eff.parameters or cond is None or not isinstance(eff.literal, pddl.Literal):
                effects = None
                break
            effects.append((cond, (eff.literal.negated, eff.literal.predicate, tuple(eff.literal.args))))
        plans[action] = None if pre is None or effects is None else (pre, effects)
    relaxed_reachable = False
    actions, axioms = [], []
    reachable_action_parameters: dict[Any, list] = defaultdict(list)
    for pred, args in order:
        if isinstance(pred, pddl.Action):
            parameters = pred.parameters
            reachable_action_parameters[pred].append(args[:len(parameters)])
            mapping = {par.name: arg for par, arg in zip(parameters, args, strict=False)}
            inst = _ground_action(pred, plans[pred], mapping, fluent_keys, init_keys, pddl, task.use_min_cost_metric,
                                  init_assignments)
            if inst is _FALLBACK:
                inst = pred.instantiate(mapping, init_facts, init_assignments, fluent_facts, type_to_objects,
                                        task.use_min_cost_metric)
            if inst:
                actions.append(inst)
        elif isinstance(pred, pddl.Axiom):
            mapping = {par.name: arg for par, arg in zip(pred.parameters, args, strict=False)}
            inst = pred.instantiate(mapping, init_facts, fluent_facts)
            if inst:
                axioms.append(inst)
        elif pred == "@goal-reachable":
            relaxed_reachable = True
    return relaxed_reachable, fluent_facts, actions, sorted(axioms), reachable_action_parameters


_FALLBACK = object()


def _ground_action(action: Any, plan: Any, mapping: dict[str, str], fluent: set, init: set, pddl: Any, metric: bool,
                   init_assignments: dict) -> Any:
    """Action.instantiate: None when a static precondition is false or no effect is left."""
    if plan is None:
        return _FALLBACK
    pre, effs = plan
    try:
        precondition = _ground(pre, mapping, fluent, init, pddl)
    except _Impossible:
        return None
    effects = []
    for cond, (negated, pred, pattern) in effs:
        try:
            condition = _ground(cond, mapping, fluent, init, pddl)
        except _Impossible:
            continue
        args = tuple([mapping.get(a, a) for a in pattern])
        key = (pred, args)
        if key in fluent:
            effects.append((condition, pddl.NegatedAtom(pred, args) if negated else pddl.Atom(pred, args)))
        elif (key in init) == negated:
            return _FALLBACK  # fast_downward raises here: let it
    if not effects:
        return None
    if metric:
        cost = 0 if action.cost is None else int(action.cost.instantiate(mapping, init_assignments).expression.value)
    else:
        cost = 1
    arg_list = [mapping[par.name] for par in action.parameters[:action.num_external_parameters]]
    return pddl.PropositionalAction(f"({action.name} {' '.join(arg_list)})", precondition, effects, cost)


def pddl_to_sas(task: Any, mods: Any, order: list | None = None) -> Any:
    """translate.pddl_to_sas with `explore` above (the stages after it are fast_downward's, in its order)."""
    fact_groups, _, _, options, pddl, simplify, translate, variable_order, *_ = mods
    try:
        relaxed_reachable, atoms, actions, axioms, reachable_action_params = explore(task, mods, order)
    except _Unsupported:
        from fast_downward.translate import instantiate
        relaxed_reachable, atoms, actions, axioms, reachable_action_params = instantiate.explore(task)
    if not relaxed_reachable:
        return translate.unsolvable_sas_task("No relaxed solution")
    goal_list = task.goal.parts if isinstance(task.goal, pddl.Conjunction) else [task.goal]
    for item in goal_list:
        assert isinstance(item, pddl.Literal)
    groups, mutex_groups, translation_key = fact_groups.compute_groups(task, atoms, reachable_action_params)
    ranges, strips_to_sas = translate.strips_to_sas_dictionary(groups, assert_partial=options.use_partial_encoding)
    mutex_ranges, mutex_dict = translate.strips_to_sas_dictionary(mutex_groups, assert_partial=False)
    if options.add_implied_preconditions:
        implied_facts = translate.build_implied_facts(strips_to_sas, groups, mutex_groups)
    else:
        implied_facts = {}
    mutex_key = translate.build_mutex_key(strips_to_sas, mutex_groups) if options.use_partial_encoding else []
    sas_task = translate.translate_task(strips_to_sas, ranges, translation_key, mutex_dict, mutex_ranges, mutex_key,
                                        task.init, goal_list, actions, axioms, task.use_min_cost_metric,
                                        implied_facts)
    if options.filter_unreachable_facts:
        try:
            simplify.filter_unreachable_propositions(sas_task)
        except simplify.Impossible:
            return translate.unsolvable_sas_task("Simplified to trivially false goal")
        except simplify.TriviallySolvable:
            return translate.solvable_sas_task("Simplified to empty goal")
    if options.reorder_variables or options.filter_unimportant_vars:
        variable_order.find_and_apply_variable_order(sas_task, options.reorder_variables,
                                                     options.filter_unimportant_vars)
    return sas_task


def pddl2sas(domain: str, problem: str, fast_stages: bool = True) -> tuple[Any, str]:
    """(the parsed task, the SAS text), as `fast_downward.pddl2sas(domain, problem, optimize=False)` returns.
    `fast_stages`: the stages after the exploration by `strips_sas` where it applies (False: fast_downward's)."""
    mods = _modules()
    options = mods[3]
    # the option values fast_downward.interface.pddl2sas sets for an unoptimised translation
    options.filter_unimportant_vars = False
    options.filter_unreachable_facts = False
    options.use_partial_encoding = False
    options.skip_variable_reordering = True
    options.add_implied_preconditions = False
    options.invariant_generation_max_candidates = 0
    with paused_gc(), contextlib.redirect_stdout(io.StringIO()):  # the translator reports its stages on stdout
        return _translate(domain, problem, mods, fast_stages)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a bounded burst of allocation. A translation (or a game's first load)
    allocates ~10^5 small objects, and each collection it triggers walks the whole heap (parsed grammar, engines,
    the caller's data): ~20-30 % of a cold reset. Nothing made there needs it; it runs again afterwards."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _translate(domain: str, problem: str, mods: Any, fast_stages: bool) -> tuple[Any, str]:
    normalize, lisp_parser, parsing_functions = mods[2], mods[8], mods[9]
    task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                        lisp_parser.parse_nested_list(problem.split("\n")))
    normalize.normalize(task)
    try:
        order = exploration_order(task, mods)
    except _Unsupported:
        return task, sas_text(pddl_to_sas(task, mods))  # fast_downward's exploration
    if fast_stages:
        text = strips_sas.translate(task, order, mods)
        if text is not None:
            return task, text
    return task, sas_text(pddl_to_sas(task, mods, order))


def sas_text(sas: Any) -> str:
    """`SASTask.output`'s text, written with one join instead of ~20,000 `print` calls."""
    from fast_downward.translate.sas_tasks import SAS_FILE_VERSION

    out = ["begin_version", str(SAS_FILE_VERSION), "end_version", "begin_metric", str(int(sas.metric)), "end_metric"]
    v = sas.variables
    out.append(str(len(v.ranges)))
    for var, (rang, axiom_layer, values) in enumerate(zip(v.ranges, v.axiom_layers, v.value_names, strict=True)):
        assert rang == len(values), (rang, values)
        out += ["begin_variable", f"var{var}", str(axiom_layer), str(rang), *map(str, values), "end_variable"]
    out.append(str(len(sas.mutexes)))
    for mutex in sas.mutexes:
        out += ["begin_mutex_group", str(len(mutex.facts)), *(f"{a} {b}" for a, b in mutex.facts), "end_mutex_group"]
    out += ["begin_state", *map(str, sas.init.values), "end_state"]
    out += ["begin_goal", str(len(sas.goal.pairs)), *(f"{a} {b}" for a, b in sas.goal.pairs), "end_goal"]
    out.append(str(len(sas.operators)))
    for op in sas.operators:
        out += ["begin_operator", op.name[1:-1], str(len(op.prevail)), *(f"{a} {b}" for a, b in op.prevail),
                str(len(op.pre_post))]
        for var, pre, post, cond in op.pre_post:
            out.append(f"{len(cond)} " + "".join(f"{a} {b} " for a, b in cond) + f"{var} {pre} {post}")
        out += [str(op.cost), "end_operator"]
    out.append(str(len(sas.axioms)))
    for axiom in sas.axioms:
        var, val = axiom.effect
        out += ["begin_rule", str(len(axiom.condition)), *(f"{a} {b}" for a, b in axiom.condition),
                f"{var} {1 - val} {val}", "end_rule"]
    out.append("")
    return "\n".join(out)
