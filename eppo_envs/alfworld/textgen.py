"""TextWorld's context-sensitive grammar, compiled once, and its conjunctive queries over an indexed fact store.

`textworld.envs.pddl.textgen.ContextSensitiveGrammar.derive` re-parses its start string with tatsu on every call,
deep-copies the derivation context for every symbol and re-parses every rule condition and `{... | query}` with
tatsu each time it is met; that is >95 % of a stock ALFWorld step (docs/alfworld.md). Here the same symbols (parsed
by TextWorld's own parser, once per template) are turned into small closures, and queries run on `FactIndex`, which
keeps each signature's facts as a set plus a lazily sorted list.

Exactness: the semantics are TextWorld's, step for step. A nonterminal takes its first rule whose condition has
at least one match under the current mapping (the rule's own variables are not kept); `{expr | query}` yields
`expr` once per match, in the order of `State.all_assignments` (preconditions in order, for each the signature's
subtype combinations in `TypeHierarchy.multi_subtypes` order, facts sorted, new placeholders never bound to a
variable already used); `[...]` joins with the `list_separator` / `list_last_separator` / `list_empty` rules;
`{python}` is evaluated with the variables as locals and the textgen module's globals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import textworld.envs.pddl.textgen as tw_textgen
from textworld.envs.pddl.textgen import (
    ConditionalSymbol,
    EvalSymbol,
    ListSymbol,
    NonterminalSymbol,
    TerminalSymbol,
)
from textworld.envs.pddl.textgen import _parse_and_convert as parse_symbols
from textworld.logic import Rule, TypeHierarchy

Var = tuple[str, str]  # (name, type), ordered and compared like textworld.logic.Variable
Ph = tuple[str, str]  # (name, type), like textworld.logic.Placeholder
Sig = tuple[str, tuple[str, ...]]  # (predicate, argument types), like textworld.logic.Signature


class FactIndex:
    """The state's facts by signature; `sorted_facts` is what `State.facts_with_signature` gives, sorted."""

    def __init__(self) -> None:
        self._sets: dict[Sig, set[tuple[Var, ...]]] = {}
        self._sorted: dict[Sig, list[tuple[Var, ...]]] = {}

    def copy(self) -> FactIndex:
        other = FactIndex()
        other._sets = {k: set(v) for k, v in self._sets.items()}
        other._sorted = dict(self._sorted)  # lists are never mutated in place, only replaced
        return other

    def add(self, name: str, args: tuple[Var, ...]) -> None:
        sig = (name, tuple(a[1] for a in args))
        facts = self._sets.setdefault(sig, set())
        if args not in facts:
            facts.add(args)
            self._sorted.pop(sig, None)

    def discard(self, name: str, args: tuple[Var, ...]) -> None:
        sig = (name, tuple(a[1] for a in args))
        facts = self._sets.get(sig)
        if facts is not None and args in facts:
            facts.remove(args)
            self._sorted.pop(sig, None)

    def has(self, sig: Sig, args: tuple[Var, ...]) -> bool:
        facts = self._sets.get(sig)
        return facts is not None and args in facts

    def sorted_facts(self, sig: Sig) -> list[tuple[Var, ...]]:
        cached = self._sorted.get(sig)
        if cached is None:
            cached = self._sorted[sig] = sorted(self._sets.get(sig, ()))
        return cached


class Query:
    """A conjunctive query (`p(a:t, b:u) & q(...)`) compiled for `FactIndex`; `matches` is `all_assignments`."""

    def __init__(self, text: str, types: TypeHierarchy) -> None:
        rule = Rule.parse_conjunctive_query(text)
        self.preds: list[tuple[tuple[Ph, ...], list[Sig]]] = []
        for pred in rule.preconditions:
            params = tuple((p.name, p.type) for p in pred.parameters)
            combos = types.multi_subtypes([types.get(t) for t in pred.signature.types])
            self.preds.append((params, [(pred.signature.name, tuple(t.name for t in c)) for c in combos]))

    def matches(self, facts: FactIndex, mapping: dict[Ph, Var]) -> Iterator[dict[Ph, Var]]:
        """Every extension of `mapping` satisfying the query, in TextWorld's order."""
        return self._walk(facts, dict(mapping), set(mapping.values()), 0)

    def any(self, facts: FactIndex, mapping: dict[Ph, Var]) -> bool:
        return next(self.matches(facts, mapping), None) is not None

    def _walk(self, facts: FactIndex, mapping: dict[Ph, Var], used: set[Var], depth: int) -> Iterator[dict[Ph, Var]]:
        if depth == len(self.preds):
            yield dict(mapping)
            return
        params, sigs = self.preds[depth]
        unbound = [ph for ph in params if ph not in mapping]
        if not unbound:  # fully bound: at most the one fact, which a sorted scan would also find once
            args = tuple(mapping[ph] for ph in params)
            for sig in sigs:
                if facts.has(sig, args):
                    yield from self._walk(facts, mapping, used, depth + 1)
            return
        for sig in sigs:
            for args in facts.sorted_facts(sig):
                added: list[Ph] = []
                ok = True
                for ph, var in zip(params, args, strict=True):
                    existing = mapping.get(ph)
                    if existing is None:
                        if var in used:
                            ok = False
                            break
                        mapping[ph] = var
                        used.add(var)
                        added.append(ph)
                    elif existing != var:
                        ok = False
                        break
                if ok:
                    yield from self._walk(facts, mapping, used, depth + 1)
                for ph in added:
                    used.discard(mapping.pop(ph))


class Context:
    """What a symbol is derived in: the grammar, the facts, the bound variables (name -> EntityInfo), the mapping."""

    __slots__ = ("grammar", "facts", "variables", "mapping", "infos")

    def __init__(self, grammar: CompiledGrammar, facts: FactIndex, variables: dict[str, Any],
                 mapping: dict[Ph, Var], infos: dict[str, Any]) -> None:
        self.grammar, self.facts, self.variables, self.mapping = grammar, facts, variables, mapping
        self.infos = infos


Derive = Callable[[Context], str]


class CompiledGrammar:
    """A `ContextSensitiveGrammar`'s rules as closures; `derive(text, ctx)` equals the stock `derive`.

    Closures find rules through `ctx.grammar`, so `with_rule` can give a game its own "task" sentence while
    sharing everything compiled so far with every other game of the same grammar.
    """

    def __init__(self, rules: dict[str, list[Any]], types: TypeHierarchy) -> None:
        self._types = types
        self._queries: dict[str, Query] = {}
        self._starts: dict[str, Derive] = {}
        self._rules: dict[str, list[tuple[Query | None, list[Derive]]]] = {}
        self._source = dict(rules)
        self._env = vars(tw_textgen)  # EvalSymbol evaluates in the textgen module's globals

    def with_rule(self, name: str, rules: list[Any]) -> CompiledGrammar:
        """The same grammar with `name`'s production rules replaced (caches shared, that one rule recompiled)."""
        other = CompiledGrammar.__new__(CompiledGrammar)
        other._types, other._queries, other._starts, other._env = self._types, self._queries, self._starts, self._env
        other._source = {**self._source, name: rules}
        other._rules = {k: v for k, v in self._rules.items() if k != name}
        return other

    def query(self, text: str) -> Query:
        if text not in self._queries:
            self._queries[text] = Query(text, self._types)
        return self._queries[text]

    def derive(self, start: str, ctx: Context) -> str:
        fn = self._starts.get(start)
        if fn is None:
            fn = self._starts[start] = self._seq([self._compile(s) for s in parse_symbols(start, rule_name="symbols")])
        return fn(ctx)

    def nonterminal(self, name: str, ctx: Context) -> str:
        rules = self._rules.get(name)
        if rules is None:
            rules = self._rules[name] = [
                (self.query(r.condition) if r.condition else None, [self._compile(s) for s in r.rhs])
                for r in self._source.get(name, ())
            ]
        for condition, parts in rules:
            if condition is None or condition.any(ctx.facts, ctx.mapping):
                return "".join(part(ctx) for part in parts)
        raise KeyError(f"no applicable rule for #{name}#")  # stock raises here too (unknown symbol / no rule)

    @staticmethod
    def _seq(parts: list[Derive]) -> Derive:
        return lambda ctx: "".join(part(ctx) for part in parts)

    def _compile(self, symbol: Any) -> Derive:
        if isinstance(symbol, TerminalSymbol):
            text = str(symbol.symbol)
            return lambda ctx: text
        if isinstance(symbol, NonterminalSymbol):
            name = str(symbol.symbol)
            return lambda ctx: ctx.grammar.nonterminal(name, ctx)
        if isinstance(symbol, EvalSymbol):
            code = compile(symbol.expression, "<grammar>", "eval")
            env = self._env
            return lambda ctx: str(eval(code, env, dict(ctx.variables)))  # noqa: S307 (the game's own grammar)
        if isinstance(symbol, ConditionalSymbol):
            items = self._items(symbol)
            return lambda ctx: "".join(items(ctx))
        if isinstance(symbol, ListSymbol):
            items = self._items(symbol.symbol)
            return lambda ctx: _display_list(items(ctx), ctx)
        raise NotImplementedError(f"unknown grammar symbol {symbol!r}")

    def _items(self, symbol: Any) -> Callable[[Context], list[str]]:
        """A symbol inside `[...]`: a conditional gives one item per match; anything else is one item."""
        if not isinstance(symbol, ConditionalSymbol):
            single = self._compile(symbol)
            return lambda ctx: [single(ctx)]
        expression = self._compile(symbol.expression)
        if not symbol.given:
            return lambda ctx: [expression(ctx)]
        query = self.query(symbol.given)

        def items(ctx: Context) -> list[str]:
            out = []
            for mapping in query.matches(ctx.facts, ctx.mapping):
                variables = dict(ctx.variables)
                variables.update({ph[0]: ctx.infos[var[0]] for ph, var in mapping.items()})
                out.append(expression(Context(ctx.grammar, ctx.facts, variables, mapping, ctx.infos)))
            return out

        return items


def _display_list(items: list[str], ctx: Context) -> str:
    grammar = ctx.grammar
    if not items:
        return grammar.nonterminal("list_empty", ctx)
    if len(items) == 1:
        return items[0]
    sep = grammar.nonterminal("list_separator", ctx)
    return sep.join(items[:-1]) + grammar.nonterminal("list_last_separator", ctx) + items[-1]
