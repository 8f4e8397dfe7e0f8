"""A study's plan: which runs (a loss or an EPPO ablation, at a seed) it holds, and where its files live."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eppo_train.core.registry import ConfigError

DEFAULT_ALGOS = ("grpo", "dapo", "eppo", "clip_cov")

# EPPO's ablation: each changes one thing from the main `eppo` runs (variant both, lambda 0.5, alpha 2).
ABLATIONS: dict[str, tuple[str, ...]] = {
    "eppo-high": ("pacing.variant=high",),  # pace only eps_high
    "eppo-low": ("pacing.variant=low",),  # pace only eps_low
    "eppo-target": ("pacing.variant=target",),  # pace towards pacing.default_target nats, not the task mean
    "eppo-lam0.25": ("pacing.lam=0.25",),  # smaller largest change of a bound
    "eppo-lam0.9": ("pacing.lam=0.9",),
    "eppo-alpha1": ("pacing.alpha=1.0",),  # a flatter response to the entropy log-ratio
    "eppo-alpha4": ("pacing.alpha=4.0",),
}


@dataclass(frozen=True)
class StudyRun:
    group: str  # the row in the report: a loss (grpo) or an ablation (eppo-high)
    algo: str
    seed: int
    overrides: tuple[str, ...] = ()  # KEY=VALUE on top of the study config

    @property
    def name(self) -> str:
        return f"{self.group}-seed{self.seed}"


@dataclass(frozen=True)
class StudyPaths:
    work: Path  # scratch: SFT pointer, trainer runs
    results: Path  # one JSON file per finished run
    report: Path  # study.md; figures in report.parent / "figures"


def make_plan(algos: list[str], seeds: int, ablations: list[str], ablation_seeds: int) -> list[StudyRun]:
    """Every loss at seed 0, then at seed 1, ... up to seeds-1, then every named ablation (an EPPO variant) at 0..ablation_seeds-1."""
    unknown = [a for a in ablations if a not in ABLATIONS]
    if unknown:
        raise ConfigError(f"--ablations: unknown ablation {unknown[0]!r} (known: {', '.join(ABLATIONS)})")
    # seed-major: a study stopped part-way has every loss at the first seeds rather than one loss at all seeds
    runs = [StudyRun(a, a, s) for s in range(seeds) for a in algos]
    runs += [StudyRun(a, "eppo", s, ABLATIONS[a]) for a in ablations for s in range(ablation_seeds)]
    return runs
