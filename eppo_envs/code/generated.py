"""Generated training problems: small function-writing tasks from templates, with reference solutions and hidden
tests, at three difficulty levels. Deterministic: problem `i` of a family is a pure function of (family, i).

Each `Family` turns random parameters into a signature, a docstring, a reference body and test inputs; expected
outputs are computed by running the (trusted) reference here, so tests and reference cannot disagree.
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
    for _ in range(TESTS_PER_PROBLEM * 4):
        args = family.inputs(rng, params)
        if repr(args) in seen:
            continue
        seen.add(repr(args))
        expected = namespace[fn](*args)
        asserts.append(f"    assert candidate({', '.join(map(repr, args))}) == {expected!r}")
        if len(asserts) == TESTS_PER_PROBLEM:
            break
    tests = "def check(candidate):\n" + "\n".join(asserts) + "\n"
    return CodeProblem(f"gen_l{family.level}_{fn}", prompt, reference, tests, fn, family.level, "generated")


@lru_cache(maxsize=1)
def generated_problems() -> tuple[CodeProblem, ...]:
    """All generated problems (12 families x 50 = 600), interleaved: problem i of every family, then i+1, so that
    consecutive seeds (an evaluation list) cover every family and level."""
    return tuple(_make(family, i) for i in range(PER_FAMILY) for family in FAMILIES)
