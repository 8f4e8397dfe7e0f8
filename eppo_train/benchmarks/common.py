"""What every bench section shares: the `Figure` record, repetition with a median, and the section registry.

A section is a function `(ctx) -> list[Figure]`. It measures one component and says how (the `how` text is the
command or parameters that made the figure, printed next to it and written to `bench/results.json`). A section that
cannot run (its module is not built yet, an optional package is missing) raises `Unavailable`; the driver turns
that, or any other exception, into a row that says why, and goes on with the next section.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Unavailable(RuntimeError):
    """The section (or one of its figures) cannot be measured on this machine or checkout; the message says why."""


@dataclass
class Figure:
    section: str
    name: str  # what was measured, e.g. "eppo/ALFWorld-v0 expert"
    value: float | None  # the median over `samples`; None when it could not be measured
    unit: str  # "steps/s", "runs/s", "ms", "tokens/s", "ratio", "share"
    how: str  # the command or parameters that made it
    samples: list[float] = field(default_factory=list)  # one value per repetition
    extra: dict[str, Any] = field(default_factory=dict)  # secondary numbers (success rate, tokens, ...)
    error: str | None = None  # why value is None

    @property
    def ok(self) -> bool:
        return self.error is None and self.value is not None


@dataclass(frozen=True)
class BenchContext:
    quick: bool = False  # fewer repetitions and smaller workloads: a smoke test, not a measurement
    model: str = "default"  # the model of the rollout, learner and TRL sections (`resolve_model` names)
    envs: str = ""  # comma-separated substrings: only env ids containing one of them (envs and rollout sections)
    repetitions: int | None = None  # overrides every section's repetition count (full-size workloads)

    def wants_env(self, env_id: str) -> bool:
        patterns = [p.strip() for p in self.envs.split(",") if p.strip()]
        return not patterns or any(p.lower() in env_id.lower() for p in patterns)

    def reps(self, full: int = 3) -> int:
        if self.repetitions is not None:
            return self.repetitions
        return 1 if self.quick else full

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def note(section: str, text: str) -> None:
    """A progress line from inside a long section (the rollout's HF repetitions take minutes each): the driver
    prints a section's figures only once it has returned."""
    print(f"  {section}: {text}", flush=True)


def median_of(samples: list[float]) -> float:
    return float(statistics.median(samples))


def repeat(fn: Callable[[], float], reps: int) -> list[float]:
    """Call `fn` (which returns one measurement) `reps` times."""
    return [float(fn()) for _ in range(reps)]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def figure(section: str, name: str, samples: list[float], unit: str, how: str, **extra: Any) -> Figure:
    return Figure(section, name, median_of(samples), unit, how, [round(s, 4) for s in samples], extra)


def failed(section: str, name: str, unit: str, how: str, exc: BaseException) -> Figure:
    """A figure that could not be measured, with the reason in one line."""
    reason = str(exc) if isinstance(exc, Unavailable) else f"{type(exc).__name__}: {exc}"
    return Figure(section, name, None, unit, how, error=reason.splitlines()[0][:300] if reason else type(exc).__name__)


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    run: Callable[[BenchContext], list[Figure]]
    cost: str  # rough wall time of the full (not --quick) section on 2 cores, for --help


SECTIONS: dict[str, Section] = {}


def section(name: str, title: str, cost: str) -> Callable[[Callable[[BenchContext], list[Figure]]], Callable]:
    """Register a bench section under `name` (what `--only` takes)."""

    def wrap(fn: Callable[[BenchContext], list[Figure]]) -> Callable[[BenchContext], list[Figure]]:
        SECTIONS[name] = Section(name, title, fn, cost)
        return fn

    return wrap


def need_module(module: str, what: str) -> Any:
    """Import `module` or raise `Unavailable` naming what it is for (sections built by others may not exist yet)."""
    from importlib import import_module

    try:
        return import_module(module)
    except ModuleNotFoundError as exc:
        raise Unavailable(f"{what}: module {exc.name!r} is not importable") from exc
