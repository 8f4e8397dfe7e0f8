"""Generated training problems: small function-writing tasks from templates, with reference solutions and hidden
tests, at four difficulty levels. Deterministic: problem `i` of a family is a pure function of (family, i).

Each `Family` turns random parameters into a signature, a docstring, a reference body and test inputs; expected
outputs are computed by running the (trusted) reference here, so tests and reference cannot disagree.

Levels 1-3 fill one fixed body shape per family with parameters, so a model that has seen a few solutions of a
family solves the rest (SmolLM2-135M after the pipeline's SFT: 0.97 on levels 2-3). Level 4 composes two or three
steps drawn per problem (a filter, a map and a reduction; a chain of string edits; a piecewise function; an
element-wise pairing under a condition): the body's shape changes from problem to problem and has to be read
from the docstring.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from eppo_envs.code.problems import CodeProblem

PER_FAMILY = 50
TESTS_PER_PROBLEM = 6


@dataclass(frozen=True)
class Family:
    name: str
    level: int
    params: Callable[[random.Random], dict]  # the template's parameters
    signature: str  # "def {fn}(xs: list[int]) -> int:" with format fields from params and fn
    doc: str  # docstring, formatted with params
    body: str  # reference body (indented 4 spaces), formatted with params
    inputs: Callable[[random.Random, dict], tuple]  # one test's positional arguments
    tests: int = TESTS_PER_PROBLEM  # hidden tests per problem


def _ints(rng: random.Random, n: int, lo: int = -50, hi: int = 50) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase[:8]) for _ in range(n))


FAMILIES: tuple[Family, ...] = (
    Family("add_const", 1, lambda r: {"k": r.randint(2, 99)}, "def {fn}(x: int) -> int:",
           "Return x plus {k}.", "    return x + {k}", lambda r, p: (r.randint(-1000, 1000),)),
    Family("count_char", 1, lambda r: {"c": r.choice("abcdefgh")}, "def {fn}(s: str) -> int:",
           "Return how many times the letter {c!r} occurs in s.", "    return s.count({c!r})",
           lambda r, p: (_word(r, r.randint(0, 15)),)),
    Family("is_multiple", 1, lambda r: {"k": r.randint(2, 13)}, "def {fn}(n: int) -> bool:",
           "Return True if n is divisible by {k}, else False.", "    return n % {k} == 0",
           lambda r, p: (r.randint(-200, 200),)),
    Family("max_plus", 1, lambda r: {"k": r.randint(1, 20)}, "def {fn}(xs: list[int]) -> int:",
           "Return the largest element of the non-empty list xs, plus {k}.", "    return max(xs) + {k}",
           lambda r, p: (_ints(r, r.randint(1, 8)),)),
    Family("filter_above", 2, lambda r: {"t": r.randint(-10, 10)}, "def {fn}(xs: list[int]) -> list[int]:",
           "Return the elements of xs greater than {t}, in their original order.",
           "    return [x for x in xs if x > {t}]", lambda r, p: (_ints(r, r.randint(0, 10), -20, 20),)),
    Family("sum_multiples", 2, lambda r: {"a": r.randint(2, 5), "b": r.randint(6, 11)},
           "def {fn}(n: int) -> int:", "Return the sum of the non-negative integers below n divisible by {a} or {b}.",
           "    return sum(i for i in range(max(n, 0)) if i % {a} == 0 or i % {b} == 0)",
           lambda r, p: (r.randint(0, 300),)),
    Family("every_kth", 2, lambda r: {"k": r.randint(2, 4), "o": r.randint(0, 1)}, "def {fn}(s: str) -> str:",
           "Return every {k}th character of s, starting at index {o}.", "    return s[{o}::{k}]",
           lambda r, p: (_word(r, r.randint(0, 20)),)),
    Family("clamp_all", 2, lambda r: {"lo": r.randint(-20, 0), "hi": r.randint(1, 20)},
           "def {fn}(xs: list[int]) -> list[int]:", "Return xs with each value clamped to the range [{lo}, {hi}].",
           "    return [min(max(x, {lo}), {hi}) for x in xs]", lambda r, p: (_ints(r, r.randint(0, 8), -40, 40),)),
    Family("caesar", 3, lambda r: {"k": r.randint(1, 25)}, "def {fn}(s: str) -> str:",
           "Shift each lowercase letter of s forward by {k} places in the alphabet, wrapping from z to a; "
           "leave other characters unchanged.",
           "    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in s)",
           lambda r, p: ("".join(r.choice(string.ascii_lowercase + " .!") for _ in range(r.randint(0, 20))),)),
    Family("run_length", 3, lambda r: {"sep": r.choice(":-/")}, "def {fn}(s: str) -> str:",
           "Run-length encode s: each maximal run of a character c of length n becomes c followed by "
           "{sep!r} and n; runs are joined by commas. The empty string encodes to ''.",
           "    out = []\n    i = 0\n    while i < len(s):\n        j = i\n        while j < len(s) and s[j] == s[i]:\n"
           "            j += 1\n        out.append(s[i] + {sep!r} + str(j - i))\n        i = j\n    return ','.join(out)",
           lambda r, p: ("".join(r.choice("aab") * r.randint(1, 3) for _ in range(r.randint(0, 6))),)),
    Family("kth_largest_distinct", 3, lambda r: {"k": r.randint(1, 3)}, "def {fn}(xs: list[int]) -> int | None:",
           "Return the {k}-th largest distinct value in xs, or None if xs has fewer than {k} distinct values.",
           "    values = sorted(set(xs), reverse=True)\n    return values[{k} - 1] if len(values) >= {k} else None",
           lambda r, p: (_ints(r, r.randint(0, 8), -5, 5),)),
    Family("digit_root_base", 3, lambda r: {"b": r.randint(3, 10)}, "def {fn}(n: int) -> int:",
           "Given n >= 0, repeatedly replace n by the sum of its digits written in base {b} until n < {b}; "
           "return the result.",
           "    while n >= {b}:\n        total = 0\n        while n:\n            total += n % {b}\n            n //= {b}\n"
           "        n = total\n    return n",
           lambda r, p: (r.randint(0, 10**6),)),
)


def _fill(pair: tuple[str, str], **values) -> tuple[str, str]:
    text, code = pair
    return text.format(**values), code.format(**values)


# Level 4's steps: (the docstring's words, the reference's code), with format fields drawn per problem
_KEEP = (("greater than {t}", "x > {t}"), ("less than {t}", "x < {t}"), ("even", "x % 2 == 0"),
         ("odd", "x % 2 == 1"), ("divisible by {k}", "x % {k} == 0"), ("not equal to {t}", "x != {t}"))
_MAP = (("add {m} to each", "x + {m}"), ("multiply each by {m}", "x * {m}"), ("square each", "x * x"),
        ("subtract {m} from each", "x - {m}"), ("replace each by its absolute value", "abs(x)"),
        ("negate each", "-x"))
_REDUCE = (("return their sum", "sum({gen})"), ("return the largest, or 0 if none is left", "max(({gen}), default=0)"),
           ("return the smallest, or 0 if none is left", "min(({gen}), default=0)"), ("return them as a list", "[{gen}]"))


def _filter_map_reduce(r: random.Random) -> dict:
    values = {"t": r.randint(-10, 10), "k": r.randint(3, 7), "m": r.randint(2, 9)}
    keep_text, keep = _fill(*r.sample(_KEEP, 1), **values)
    map_text, mapped = _fill(*r.sample(_MAP, 1), **values)
    reduce_text, reduce = r.choice(_REDUCE)
    return {"doc_text": f"Keep the elements of xs that are {keep_text}, {map_text}, and {reduce_text}.",
            "expr": reduce.format(gen=f"{mapped} for x in xs if {keep}"), **values}


def _filter_input(r: random.Random, p: dict) -> tuple:
    # values near the threshold and multiples of k as well, so that several elements are kept and sum, largest and
    # smallest differ
    pick = (lambda: r.randint(-20, 20), lambda: p["k"] * r.choice((-3, -2, -1, 1, 2, 3)), lambda: p["t"] + r.randint(-2, 2))
    return ([r.choice(pick)() for _ in range(r.randint(0, 10))],)


_STRING_STEPS = (("reverse it", "s[::-1]"), ("replace every {a!r} with {b!r}", "s.replace({a!r}, {b!r})"),
                 ("remove every {c!r}", "s.replace({c!r}, '')"), ("keep its first {n} characters", "s[:{n}]"),
                 ("convert it to upper case", "s.upper()"), ("double every character", "''.join(ch * 2 for ch in s)"),
                 ("drop its first {d} characters", "s[{d}:]"))


def _string_steps(r: random.Random) -> dict:
    letters = r.sample("abcdefgh", 3)
    values = {"a": letters[0], "b": letters[1], "c": letters[2], "n": r.randint(3, 8), "d": r.randint(1, 3)}
    steps = [_fill(p, **values) for p in r.sample(_STRING_STEPS, r.randint(2, 3))]
    steps.sort(key=lambda step: step[1] == "s.upper()")  # upper case last: a replace after it would do nothing
    return {"doc_text": "Transform s in this order: " + ", then ".join(text for text, _ in steps) + "; return the result.",
            "body": "\n".join(f"    s = {code}" for _, code in steps) + "\n    return s"}


_CASES = (("negative", "n < 0"), ("divisible by {k}", "n % {k} == 0"), ("greater than {t}", "n > {t}"),
          ("even", "n % 2 == 0"))
_RESULTS = (("n plus {m}", "n + {m}"), ("n times {m}", "n * {m}"), ("minus n", "-n"), ("the square of n", "n * n"),
            ("n divided by {m}, rounded down", "n // {m}"), ("the remainder of n divided by {m}", "n % {m}"),
            ("{c}", "{c}"))


def _piecewise(r: random.Random) -> dict:
    values = {"k": r.randint(3, 7), "t": r.randint(10, 60), "m": r.randint(2, 9), "c": r.randint(-9, 9)}
    cases = [_fill(p, **values) for p in r.sample(_CASES, 2)]
    results = [_fill(p, **values) for p in r.sample(_RESULTS, 3)]
    doc = (f"If n is {cases[0][0]}, return {results[0][0]}. Otherwise, if n is {cases[1][0]}, return "
           f"{results[1][0]}. Otherwise return {results[2][0]}.")
    body = (f"    if {cases[0][1]}:\n        return {results[0][1]}\n    if {cases[1][1]}:\n        return {results[1][1]}\n"
            f"    return {results[2][1]}")
    return {"doc_text": doc, "body": body, **values}


def _piecewise_input(r: random.Random, p: dict) -> tuple:
    # aim at each branch in turn, so that a solution with one branch wrong fails a test
    return (r.choice([r.randint(-60, -1), p["k"] * r.randint(-8, 15), r.randint(p["t"] + 1, p["t"] + 40),
                      2 * r.randint(-30, 40), r.randint(-100, 100)]),)


_PAIR_OPS = (("sum", "x + y"), ("difference xs[i] - ys[i]", "x - y"), ("product", "x * y"), ("larger", "max(x, y)"),
             ("smaller", "min(x, y)"))
_PAIR_WHEN = (("for every index i", ""), ("for each index i where xs[i] > ys[i]", " if x > y"),
              ("for each index i where both values are positive", " if x > 0 and y > 0"),
              ("for each index i where xs[i] + ys[i] is even", " if (x + y) % 2 == 0"))


def _pairwise(r: random.Random) -> dict:
    op_text, op = r.choice(_PAIR_OPS)
    when_text, when = r.choice(_PAIR_WHEN)
    return {"doc_text": f"Return the list of the {op_text} of xs[i] and ys[i], {when_text}, in index order; "
                        "stop at the end of the shorter list.",
            "expr": f"[{op} for x, y in zip(xs, ys){when}]"}


def _two_lists(r: random.Random, p: dict) -> tuple:
    # mostly positive values, so that "where both values are positive" keeps some pairs
    return _ints(r, r.randint(1, 7), -4, 9), _ints(r, r.randint(1, 7), -4, 9)


# more tests than levels 1-3. Measured over every ordered pair of a level-4 family's problems with different bodies
# (9,668 pairs), how many accept the other problem's body: 8 with 6 tests, 1 with 10, 0 with 12 (e.g. `max(-x)` for
# `max(abs(x))` on a list whose largest magnitude is negative); tests/test_code.py keeps it at 0
LEVEL_4_TESTS = 12
LEVEL_4: tuple[Family, ...] = (
    Family("filter_map_reduce", 4, _filter_map_reduce, "def {fn}(xs: list[int]) -> int | list[int]:", "{doc_text}",
           "    return {expr}", _filter_input, tests=LEVEL_4_TESTS),
    Family("string_steps", 4, _string_steps, "def {fn}(s: str) -> str:", "{doc_text}", "{body}",
           lambda r, p: (_word(r, r.randint(0, 14)),), tests=LEVEL_4_TESTS),
    Family("piecewise", 4, _piecewise, "def {fn}(n: int) -> int:", "{doc_text}", "{body}",
           _piecewise_input, tests=LEVEL_4_TESTS),
    Family("pairwise", 4, _pairwise, "def {fn}(xs: list[int], ys: list[int]) -> list[int]:", "{doc_text}",
           "    return {expr}", _two_lists, tests=LEVEL_4_TESTS),
)
FAMILIES = FAMILIES + LEVEL_4


def _make(family: Family, i: int) -> CodeProblem:
    rng = random.Random(f"eppo-code/{family.name}/{i}")
    params = family.params(rng)
    fn = f"{family.name}_{i:03d}"
    signature = family.signature.format(fn=fn, **params)
    doc = family.doc.format(**params)
    prompt = f'{signature}\n    """{doc}"""\n'
    body = family.body.format(**params)
    reference = prompt + body + "\n"
    namespace: dict = {}
    exec(compile(reference, f"<reference {fn}>", "exec"), namespace)  # our own template code, not model output
    asserts, seen = [], set()
    for _ in range(family.tests * 4):
        args = family.inputs(rng, params)
        if repr(args) in seen:
            continue
        seen.add(repr(args))
        expected = namespace[fn](*args)
        asserts.append(f"    assert candidate({', '.join(map(repr, args))}) == {expected!r}")
        if len(asserts) == family.tests:
            break
    tests = "def check(candidate):\n" + "\n".join(asserts) + "\n"
    return CodeProblem(f"gen_l{family.level}_{fn}", prompt, reference, tests, fn, family.level, "generated")


@lru_cache(maxsize=1)
def generated_problems() -> tuple[CodeProblem, ...]:
    """All generated problems (16 families x 50 = 800), interleaved: problem i of every family, then i+1, so that
    consecutive seeds (an evaluation list) cover every family and level."""
    return tuple(_make(family, i) for i in range(PER_FAMILY) for family in FAMILIES)
