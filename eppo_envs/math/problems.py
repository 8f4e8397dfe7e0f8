"""Math problems, offline: reasoning-gym generators (GSM8K-derived templates, arithmetic, linear equations) and
the CHAMP competition problems with numeric answers.

Each source is registered by name with a builder `(split, level) -> list[MathProblem]` (or a lazy sequence);
splits are fixed: generated problems come from disjoint seed ranges per split, CHAMP problems are divided by a
seeded shuffle of their ids. Every problem carries `solver`: Python code printing the answer, which the expert
runs through the tool.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

LEVELS = (1, 2, 3)
GENERATED_PER_SHARD = {"train": 2000, "test": 100}  # problems per (generator, level) and split
_SPLIT_SEED = {"train": 10_000, "test": 20_000}


@dataclass(frozen=True)
class MathProblem:
    question: str
    answer: str
    source: str
    level: int
    key: str  # stable id inside its source
    solver: str  # Python that prints the answer (what the expert sends through the tool)


# reasoning-gym generator configs per difficulty level (1 = easiest).
_RG_CONFIGS: dict[str, dict[int, dict]] = {
    "basic_arithmetic": {
        1: {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
        2: {"min_terms": 3, "max_terms": 5, "min_digits": 1, "max_digits": 3},
        3: {"min_terms": 4, "max_terms": 6, "min_digits": 2, "max_digits": 4},
    },
    "simple_equations": {
        1: {"min_terms": 2, "max_terms": 2, "max_value": 20},
        2: {"min_terms": 2, "max_terms": 3, "max_value": 100},
        3: {"min_terms": 3, "max_terms": 4, "max_value": 1000},
    },
    "gsm_symbolic": {2: {"difficulty": 1.0}},  # one difficulty only: its templates are word problems
}


def _solver_for(source: str, entry: dict) -> str:
    meta = entry.get("metadata", {})
    if source == "basic_arithmetic" and meta.get("expression"):
        # reasoning-gym's "/" means exact division; print an integer when the value is one.
        return f"from fractions import Fraction as F\nv = {_exact(meta['expression'])}\nprint(v.numerator if v.denominator == 1 else v)"
    if source == "simple_equations" and meta.get("equation"):
        lhs, rhs = meta["equation"].split("=")
        var = meta["variable"]
        return (f"from sympy import Eq, solve, symbols, sympify\n{var} = symbols({var!r})\n"
                f"print(solve(Eq(sympify({lhs.strip()!r}), sympify({rhs.strip()!r})), {var})[0])")
    return f"print({entry['answer']!r})"  # the known answer, computed nowhere else (GSM templates)


_NUM_RE = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


def _exact(expression: str) -> str:
    return _NUM_RE.sub(r"F(\1)", expression)


def _reasoning_gym(source: str) -> Callable[[str, int], Sequence[MathProblem]]:
    def build(split: str, level: int) -> Sequence[MathProblem]:
        config = _RG_CONFIGS[source].get(level)
        if config is None:
            return ()
        return _RGShard(source, split, level, tuple(sorted(config.items())))

    return build


class _RGShard(Sequence[MathProblem]):
    """Problems of one generator/level/split, made on demand (reasoning-gym items are pure functions of seed+i)."""

    def __init__(self, source: str, split: str, level: int, config: tuple) -> None:
        self.source, self.split, self.level, self.config = source, split, level, config
        self.size = GENERATED_PER_SHARD[split]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < self.size:
            raise IndexError(i)
        entry = _rg_dataset(self.source, self.split, self.level, self.config)[i]
        return MathProblem(entry["question"], str(entry["answer"]), self.source, self.level,
                           f"{self.level}-{i}", _solver_for(self.source, entry))


@lru_cache(maxsize=32)
def _rg_dataset(source: str, split: str, level: int, config: tuple):
    import reasoning_gym

    seed = _SPLIT_SEED[split] + 100 * level + sum(map(ord, source))
    return reasoning_gym.create_dataset(source, size=GENERATED_PER_SHARD[split], seed=seed, **dict(config))


_CHAMP_NUMERIC = re.compile(r"^-?\d+(?:\.\d+)?(?:/\d+)?$")


@lru_cache(maxsize=1)
def _champ_numeric() -> dict[str, list[MathProblem]]:
    """CHAMP problems whose final answer is a number (formula and yes/no answers cannot be graded reliably)."""
    import champ_dataset

    problems = []
    for pid, prob in sorted(champ_dataset.load("v0").problems.items()):
        answer = prob.answer.split("or equivalently")[-1].split(", or approximately")[0].strip(" .,")
        if _CHAMP_NUMERIC.match(answer):
            problems.append(MathProblem(prob.text, answer, "champ", 3, pid, f"print({answer!r})"))
    random.Random(0).shuffle(problems)
    cut = len(problems) * 3 // 4
    return {"train": problems[:cut], "test": problems[cut:]}


def _champ(split: str, level: int) -> Sequence[MathProblem]:
    return _champ_numeric()[split] if level == 3 else ()


SOURCES: dict[str, Callable[[str, int], Sequence[MathProblem]]] = {
    "gsm_symbolic": _reasoning_gym("gsm_symbolic"),
    "basic_arithmetic": _reasoning_gym("basic_arithmetic"),
    "simple_equations": _reasoning_gym("simple_equations"),
    "champ": _champ,
}


class ProblemSet(Sequence[MathProblem]):
    """The problems of one split, filtered by source and level, in a fixed order.

    Shards are interleaved round-robin (problem 0 of every shard, then problem 1, ...), so any run of consecutive
    seeds — an evaluation list of seeds 0..N-1 — samples every source and level, not just the first shard.
    """

    def __init__(self, split: str, sources: Sequence[str], levels: Sequence[int]) -> None:
        unknown = [s for s in sources if s not in SOURCES]
        if unknown:
            raise ValueError(f"unknown math source(s) {unknown}; choose from {sorted(SOURCES)}")
        bad = [lv for lv in levels if lv not in LEVELS]
        if bad:
            raise ValueError(f"unknown difficulty level(s) {bad}; choose from {list(LEVELS)}")
        self.shards = [shard for s in sources for lv in levels if len(shard := SOURCES[s](split, lv))]
        if not self.shards:
            raise ValueError(f"no math problems for sources={list(sources)} levels={list(levels)}")
        longest = max(len(shard) for shard in self.shards)
        self.order = [(k, i) for i in range(longest) for k, shard in enumerate(self.shards) if i < len(shard)]

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, index):  # type: ignore[override]
        if not 0 <= index < len(self):
            raise IndexError(index)
        shard, local = self.order[index]
        return self.shards[shard][local]
