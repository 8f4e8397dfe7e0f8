"""fast_downward's stages after the relaxed exploration, for the unoptimised translation: the same SAS text.

With the options of an unoptimised `pddl2sas` (no invariant synthesis, no partial encoding, no implied
preconditions, no pruning), every fluent atom is its own binary variable (`Atom p(..)` / `NegatedAtom p(..)`),
numbered in sorted atom order, and there are no mutex groups. fast_downward still builds that through its generic
machinery: the invariant finder's balance checker (for zero candidates), `pddl.Atom` objects, one
`PropositionalAction` per reachable action, `translate_strips_operator` with its dictionaries of sets per operator,
`SASOperator` objects, the causal graph over them, then a pass renumbering every operator. Here the same result is
computed from the exploration's tuples: each grounded operator goes straight to its `(name, prevail, pre_post,
cost)`, exactly as `translate_strips_operator` makes it for an operator whose effects are all unconditional once
grounded (what remains is a binary-variable case analysis, written out below); an operator with a fluent effect
condition (ALFRED's `ToggleObject`) is handed to fast_downward's own `translate_strips_operator`, and the axioms
(the goal's derived predicate) to its own `handle_axioms` and `translate_strips_axioms`, on the same variables.
The causal graph's weights are counted directly and ordered by fast_downward's own `sccs` and `MaxDAG`, and the text
is written once, renumbered. `translate` returns None for anything outside that case (other options, an unusual
goal, a task that is not relaxed reachable), and the caller then runs fast_downward's stages.
`tests/test_alfworld_grounding.py` checks the text byte for byte against `fast_downward.pddl2sas`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import product
from operator import itemgetter
from typing import Any

Key = tuple[str, tuple[str, ...]]  # a ground atom: (predicate, arguments)
Op = tuple[str, list[tuple[int, int]], list[tuple[int, int, int, tuple[tuple[int, int], ...]]], int]

__all__ = ["conjunction_literals", "translate"]


def _applies(options: Any, task: Any) -> bool:
    """The options of fast_downward.interface.pddl2sas(optimize=False)."""
    return (options.invariant_generation_max_candidates == 0 and not options.use_partial_encoding
            and not options.add_implied_preconditions and not options.filter_unreachable_facts
            and options.reorder_variables and not options.filter_unimportant_vars)


def conjunction_literals(condition: Any, pddl: Any) -> list[tuple[bool, str, tuple[str, ...]]] | None:
    """A normalised condition as (negated, predicate, argument pattern) literals; None if it is not a conjunction
    of literals."""
    if isinstance(condition, pddl.Truth):
        return []
    parts = condition.parts if isinstance(condition, pddl.Conjunction) else (condition,)
    if not all(isinstance(p, pddl.Literal) for p in parts):
        return None
    return [(p.negated, p.predicate, tuple(p.args)) for p in parts]


class _Impossible(Exception):
    pass


class _Generic(Exception):
    """This operator is fast_downward's to translate (a fluent effect condition, or what its code raises on)."""


def _fluent_literals(literals: list, ext: tuple[str, ...], var_of: dict[Key, int], init: set[Key]) -> list:
    """Literal.instantiate over a conjunction: the fluent literals as (negated, variable), `_Impossible` when a
    static one is false. Each literal's arguments are read from `ext` (the action's arguments, then its constants)."""
    out = []
    for negated, pred, getter in literals:
        key = (pred, getter(ext))
        var = var_of.get(key)
        if var is not None:
            out.append((negated, var))
        elif (key in init) == negated:
            raise _Impossible
    return out


def _getter(pattern: tuple[str, ...], index: dict[str, int]) -> Any:
    """A function of `ext` giving the pattern's ground arguments (what `mapping.get(a, a)` per argument gives)."""
    positions = tuple(index[a] for a in pattern)
    if len(positions) > 1:
        return itemgetter(*positions)
    if positions:
        i = positions[0]
        return lambda ext: (ext[i],)
    return lambda ext: ()


def _binary_condition(literals: list[tuple[bool, int]]) -> dict[int, int] | None:
    """translate_strips_conditions for binary variables: {variable: value}, positive literals first, then the
    negative ones, in order; None when a variable is asked to be both true and false."""
    cond: dict[int, int] = {}
    for negated, var in literals:
        if not negated:
            cond[var] = 0
    for negated, var in literals:
        if negated:
            value = cond.get(var)
            if value == 0:
                return None
            if value is None:
                cond[var] = 1
    return cond


class _AtomVars:
    """fast_downward's STRIPS-to-SAS dictionary ({Atom: [(variable, 0)]}) and fluent-fact set, read through the
    (predicate, args) keys, so no pddl.Atom is made for the ~10^3-10^4 fluent atoms of a game."""

    def __init__(self, var_of: dict[Key, int]) -> None:
        self.var_of = var_of

    def __contains__(self, atom: Any) -> bool:
        return (atom.predicate, atom.args) in self.var_of

    def __getitem__(self, atom: Any) -> list[tuple[int, int]]:
        return [(self.var_of[(atom.predicate, atom.args)], 0)]

    def get(self, atom: Any, default: Any = None) -> Any:
        var = self.var_of.get((atom.predicate, atom.args))
        return default if var is None else [(var, 0)]


class _Translator:
    """The per-task state: the fluent atoms as variables and the pieces fast_downward's code needs for the
    operators handed to it (built on first use)."""

    def __init__(self, task: Any, order: list, mods: Any) -> None:
        self.task, self.mods = task, mods
        pddl = mods[4]
        fluent_predicates = {eff.literal.predicate for action in task.actions for eff in action.effects}
        derived = {axiom.name for axiom in task.axioms}
        fluent_predicates |= derived
        self.keys: list[Key] = sorted({a for a in order if isinstance(a[0], str) and a[0] in fluent_predicates})
        self.var_of = {key: var for var, key in enumerate(self.keys)}
        self.derived = {var for var, (pred, _) in enumerate(self.keys) if pred in derived}
        self.atoms = _AtomVars(self.var_of)
        self.ranges = [2] * len(self.keys)
        self.propositional: list[Any] = []  # the PropositionalActions of the operators left to fast_downward
        self.init_assignments = {e.fluent: e.expression for e in task.init if isinstance(e, pddl.Assign)}
        self.init_facts = {e for e in task.init if not isinstance(e, pddl.Assign)}
        self.init = {(f.predicate, f.args) for f in self.init_facts if isinstance(f, pddl.Atom)}
        self.plans = {action: self._plan(action) for action in task.actions}
        self._generic: tuple | None = None

    def _plan(self, action: Any) -> tuple | None:
        """The action's literals with argument getters over ext = (its arguments, then the constants its literals
        name), and its cost when it does not depend on the arguments; None: fast_downward's code grounds it."""
        pddl = self.mods[4]
        pre = conjunction_literals(action.precondition, pddl)
        effects = []
        for eff in action.effects:
            cond = conjunction_literals(eff.condition, pddl)
            if eff.parameters or cond is None or not isinstance(eff.literal, pddl.Literal):
                return None
            effects.append((cond, (eff.literal.negated, eff.literal.predicate, tuple(eff.literal.args))))
        if pre is None:
            return None
        index = {par.name: i for i, par in enumerate(action.parameters)}
        constants: list[str] = []
        for _, _, pattern in pre + [lit for cond, eff in effects for lit in (*cond, eff)]:
            for a in pattern:
                if a not in index:  # a constant (or a name mapping.get leaves as it is)
                    index[a] = len(index)
                    constants.append(a)

        def compiled(literals: list) -> list:
            return [(negated, pred, _getter(pattern, index)) for negated, pred, pattern in literals]

        cost = None
        if not self.task.use_min_cost_metric:
            cost = 1
        elif action.cost is None:
            cost = 0
        elif isinstance(action.cost.expression, pddl.NumericConstant):
            cost = action.cost.expression.value  # FunctionAssignment.instantiate leaves a constant as it is
        return (compiled(pre), [(compiled(cond), compiled([eff])[0]) for cond, eff in effects], tuple(constants),
                len(action.parameters), cost)

    def operator(self, action: Any, args: tuple[str, ...]) -> list[Op]:
        """translate_strips_operator(action.instantiate(...)) for one reachable action atom: [] or [op] (or what
        fast_downward's code makes of it)."""
        plan = self.plans[action]
        try:
            if plan is None or len(args) != plan[3]:
                raise _Generic
            return self._unconditional(action, plan, args)
        except _Impossible:
            return []
        except _Generic:
            return self._fast_downwards(action, {p.name: a for p, a in zip(action.parameters, args, strict=False)})

    def _unconditional(self, action: Any, plan: tuple, args: tuple[str, ...]) -> list[Op]:
        pre, effs, constants, _, cost = plan
        ext = args + constants
        var_of, init = self.var_of, self.init
        precondition = _fluent_literals(pre, ext, var_of, init)  # Action.instantiate: None if impossible
        if self.derived and any(var in self.derived for _, var in precondition):
            raise _Generic  # axiom_rules.handle_axioms reads such a precondition from the PropositionalAction
        adds: dict[int, None] = {}
        dels: dict[int, None] = {}
        for cond, (negated, pred, getter) in effs:
            if cond:
                try:
                    if _fluent_literals(cond, ext, var_of, init):
                        raise _Generic  # a fluent effect condition
                except _Impossible:
                    continue  # a statically false effect condition: Effect.instantiate drops the effect
            key = (pred, getter(ext))
            var = var_of.get(key)
            if var is None:
                if (key in init) == negated:
                    raise _Generic  # fast_downward raises on a static effect that contradicts init: let it
                continue
            (dels if negated else adds)[var] = None
        if not adds and not dels:
            return []  # Action.instantiate: no effect left
        condition = _binary_condition(precondition)
        if condition is None:
            return []  # translate_strips_operator: contradictory precondition
        # PropositionalAction drops a delete effect that is also added; translate_strips_operator_aux then
        # makes "var := 0" of each add and "var := 1 (none of those)" of each delete, and build_sas_operator skips
        # an effect its precondition already ensures (pre == post); the delete's guard "var = 0" is pruned
        # (prune_stupid_effect_conditions), so every effect condition is empty.
        pre_post = []
        for var in adds:
            pre = condition.get(var, -1)
            if pre != 0:
                pre_post.append((var, pre, 0, ()))
        for var in dels:
            if var not in adds:
                pre = condition.get(var, -1)
                if pre != 1:
                    pre_post.append((var, pre, 1, ()))
        if not pre_post:
            return []  # a no-op
        for var, *_ in pre_post:
            condition.pop(var, None)
        if cost is None:
            mapping = {par.name: arg for par, arg in zip(action.parameters, args, strict=True)}
            cost = int(action.cost.instantiate(mapping, self.init_assignments).expression.value)
        return [(f"({action.name} {' '.join(args[:action.num_external_parameters])})", sorted(condition.items()),
                 sorted(pre_post), cost)]

    def _fast_downwards(self, action: Any, mapping: dict[str, str]) -> list[Op]:
        """fast_downward's own Action.instantiate and translate_strips_operator, on the same variables."""
        instantiate, translate = self.mods[1], self.mods[6]
        if not hasattr(self, "type_to_objects"):
            self.type_to_objects = instantiate.get_objects_by_type(self.task.objects, self.task.types)
        inst = action.instantiate(mapping, self.init_facts, self.init_assignments, self.atoms, self.type_to_objects,
                                  self.task.use_min_cost_metric)
        if not inst:
            return []
        self.propositional.append(inst)
        # every mutex group is a single atom: the mutex dictionary is the variables' own
        ops = translate.translate_strips_operator(inst, self.atoms, self.ranges, self.atoms, self.ranges, {})
        return [(op.name, list(op.prevail), [(v, pre, post, tuple(c)) for v, pre, post, c in op.pre_post], op.cost)
                for op in ops]

    def axioms(self, atoms: list, goal_list: list) -> tuple[list[tuple[list, tuple[int, int]]], list[int]]:
        """instantiate's grounded axioms, then translate_task's axiom stages by fast_downward's own code
        (handle_axioms reads only the derived literals of operators: none of the operators translated here has
        one), as (condition, effect) sorted as SASTask sorts them, and each variable's axiom layer."""
        options, translate, axiom_rules = self.mods[3], self.mods[6], self.mods[10]
        grounded = []
        for axiom, args in atoms:
            mapping = {par.name: arg for par, arg in zip(axiom.parameters, args, strict=False)}
            inst = axiom.instantiate(mapping, self.init_facts, self.atoms)
            if inst:
                grounded.append(inst)
        axioms, layer_of = axiom_rules.handle_axioms(self.propositional, sorted(grounded), goal_list,
                                                     options.layer_strategy)
        sas = translate.translate_strips_axioms(axioms, self.atoms, self.ranges, self.atoms, self.ranges)
        layers = [-1] * len(self.keys)
        for atom, layer in layer_of.items():
            layers[self.var_of[(atom.predicate, atom.args)]] = layer
        return sorted(((list(ax.condition), ax.effect) for ax in sas), key=lambda ax: (ax[0], ax[1])), layers

    def goal(self) -> list[tuple[int, int]] | None:
        """translate_strips_conditions of the goal (static literals skipped: the exploration found them true);
        None when it is not a satisfiable, non-empty conjunction of literals (fast_downward's code handles that)."""
        pddl = self.mods[4]
        goal = self.task.goal
        parts = goal.parts if isinstance(goal, pddl.Conjunction) else [goal]
        if not all(isinstance(p, pddl.Literal) for p in parts):
            return None
        literals = []
        for p in parts:
            var = self.var_of.get((p.predicate, tuple(p.args)))
            if var is not None:
                literals.append((p.negated, var))
        cond = _binary_condition(literals)
        return list(cond.items()) if cond else None


def _variable_order(n: int, operators: list[Op], axioms: list, goal: list[tuple[int, int]], mods: Any) -> list[int]:
    """variable_order.CausalGraph(task).get_ordering(): the same weighted causal graph (pre -> eff edges, counted
    as weight_graph_from_ops and weight_graph_from_axioms count them; the order they are counted in does not
    matter), ordered by fast_downward's own Tarjan (`sccs`) and `MaxDAG`."""
    variable_order = mods[7]
    counts: Counter[tuple[int, int]] = Counter()
    for _, prevail, pre_post, _ in operators:
        sources = [var for var, _ in prevail] + [var for var, pre, _, _ in pre_post if pre != -1]
        counts.update(product(sources, [target for target, _, _, _ in pre_post]))  # counted in C
        for target, _, _, cond in pre_post:
            if cond:
                counts.update([(s, target) for s, _ in cond])
    for cond, (target, _) in axioms:  # weight_graph_from_axioms
        counts.update([(s, target) for s, _ in cond])
    goal_map = dict(goal)
    weighted: defaultdict[int, dict[int, int]] = defaultdict(dict)
    for (source, target), weight in counts.items():
        if source != target:
            weighted[source][target] = weight
    # CausalGraph.get_strongly_connected_components, then calculate_topological_pseudo_sort with a set for its
    # "target in scc" test (a list scan there: quadratic in a large component); the same subgraphs, in the same order
    sccs = mods[11].get_sccs_adjacency_list([sorted(weighted[var]) if var in weighted else [] for var in range(n)])
    ordering: list[int] = []
    for scc in sccs:
        if len(scc) == 1:
            ordering.append(scc[0])
            continue
        members = set(scc)
        subgraph: defaultdict[int, list[tuple[int, int]]] = defaultdict(list)
        for var in scc:
            edges = subgraph[var]
            for target, cost in sorted(weighted[var].items()):
                if target in members:
                    if target in goal_map:
                        edges.append((target, 100000 + cost))
                    edges.append((target, cost))
        ordering.extend(variable_order.MaxDAG(subgraph, scc).get_result())
    return ordering


def translate(task: Any, order: list, mods: Any) -> str | None:
    """The SAS text of fast_downward's unoptimised translation, from the exploration's atoms in `order`
    ((predicate, args); predicates are strings or Action/Axiom objects); None when this task or these options are
    outside what this module reproduces."""
    options, pddl = mods[3], mods[4]
    if not _applies(options, task) or not any(pred == "@goal-reachable" for pred, _ in order):
        return None  # not relaxed reachable: fast_downward writes its trivial unsolvable task
    t = _Translator(task, order, mods)
    goal = t.goal()
    if goal is None:
        return None
    operators: list[Op] = []
    for pred, args in order:
        if isinstance(pred, pddl.Action):
            operators += t.operator(pred, args)
    operators.sort(key=lambda op: (op[0], op[1], op[2]))  # SASTask's order
    goal_list = task.goal.parts if isinstance(task.goal, pddl.Conjunction) else [task.goal]
    axioms, layers = t.axioms([a for a in order if isinstance(a[0], pddl.Axiom)], goal_list)
    n = len(t.keys)
    init = [1] * n
    for fact in task.init:
        if isinstance(fact, pddl.Atom):
            var = t.var_of.get((fact.predicate, fact.args))
            if var is not None:
                init[var] = 0
    ordering = _variable_order(n, operators, axioms, goal, mods)
    if sorted(ordering) != list(range(n)):
        return None  # every variable is kept (filter_unimportant_vars is off); anything else is not ours
    return _text(t.keys, layers, ordering, init, goal, operators, axioms, task.use_min_cost_metric)


def _text(keys: list[Key], layers: list[int], ordering: list[int], init: list[int], goal: list[tuple[int, int]],
          operators: list[Op], axioms: list, metric: bool) -> str:
    """SASTask.output after VariableOrder.apply_to_task: variables, init and goal renumbered (the goal re-sorted);
    each operator's prevail and pre_post and each axiom's condition renumbered in their old order, as
    _apply_to_operators and _apply_to_axioms leave them."""
    from fast_downward.translate.sas_tasks import SAS_FILE_VERSION

    new = [0] * len(ordering)
    for i, var in enumerate(ordering):
        new[var] = i
    out = ["begin_version", str(SAS_FILE_VERSION), "end_version", "begin_metric", str(int(metric)), "end_metric",
           str(len(ordering))]
    for i, var in enumerate(ordering):
        pred, args = keys[var]
        atom = f"{pred}({', '.join(args)})"
        out += ["begin_variable", f"var{i}", str(layers[var]), "2", f"Atom {atom}", f"NegatedAtom {atom}",
                "end_variable"]
    out += ["0", "begin_state", *(str(init[var]) for var in ordering), "end_state"]
    pairs = sorted((new[var], val) for var, val in goal)
    out += ["begin_goal", str(len(pairs)), *(f"{a} {b}" for a, b in pairs), "end_goal", str(len(operators))]
    for name, prevail, pre_post, cost in operators:
        out += ["begin_operator", name[1:-1], str(len(prevail)), *(f"{new[a]} {b}" for a, b in prevail),
                str(len(pre_post))]
        for var, pre, post, cond in pre_post:
            out.append(f"{len(cond)} " + "".join(f"{new[a]} {b} " for a, b in cond) + f"{new[var]} {pre} {post}")
        out += [str(cost), "end_operator"]
    out.append(str(len(axioms)))
    for cond, (var, val) in axioms:
        out += ["begin_rule", str(len(cond)), *(f"{new[a]} {b}" for a, b in cond), f"{new[var]} {1 - val} {val}",
                "end_rule"]
    out.append("")
    return "\n".join(out)
