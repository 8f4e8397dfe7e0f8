"""A study's plan: which runs (a loss or an EPPO ablation, at a seed) it holds, and where its files live."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eppo_train.core.registry import ConfigError

DEFAULT_ALGOS = ("grpo", "dapo", "eppo", "clip_cov")

# EPPO's ablation: each changes one thing from the main `eppo` runs (the shipped pacing: variant both, reference
# geomean, lambda 0.5, alpha 1, beta 0.5; algos/pacing.py).
ABLATIONS: dict[str, tuple[str, ...]] = {
    "eppo-high": ("pacing.variant=high",),  # pace only eps_high
    "eppo-low": ("pacing.variant=low",),  # pace only eps_low
    "eppo-target": ("pacing.variant=target",),  # pace towards pacing.default_target nats, not the other tasks
    "eppo-mean": ("pacing.reference=mean",),  # the arithmetic mean as the reference
    "eppo-self": ("pacing.reference=self",),  # each task against its own slow baseline
    "eppo-pace": ("pacing.reference=pace",),  # each task's own change against the other tasks' changes
    "eppo-lam0.25": ("pacing.lam=0.25",),  # smaller largest change of a bound
    "eppo-lam0.9": ("pacing.lam=0.9",),
    "eppo-alpha0.5": ("pacing.alpha=0.5",),  # a flatter response to the entropy log-ratio
    "eppo-alpha2": ("pacing.alpha=2.0",),  # a steeper one
}


@dataclass(frozen=True)
class OfficialStudy:
    """A study whose result files are committed and whose section `docs/results/study.md` holds (`make
    experiment` runs every one in order, each skipping its finished runs)."""

    name: str  # the section and the results folder under docs/results/study/
    config: str  # the shipped config it runs
    title: str
    seeds: int  # seeds 0..seeds-1 of every loss in DEFAULT_ALGOS
    ablation_seeds: int  # seeds of every ablation in `ablations`
    ablations: tuple[str, ...] = ()

    @property
    def results(self) -> Path:
        return STUDY_RESULTS / self.name

    def plan(self, algos: list[str] | None = None) -> list[StudyRun]:
        return make_plan(list(algos or DEFAULT_ALGOS), self.seeds, list(self.ablations), self.ablation_seeds)


STUDY_RESULTS = Path("docs/results/study")  # result files, committed as they land
STUDY_REPORT = Path("docs/results/study.md")
OFFICIAL = (
    OfficialStudy("testbed", "study-testbed", "The pace testbed (four tasks of graded difficulty, minutes a run)",
                  seeds=10, ablation_seeds=3, ablations=tuple(ABLATIONS)),
    OfficialStudy("suite", "study", "The suite (SearchQA, Math, Code after the pipeline's SFT)", seeds=3,
                  ablation_seeds=0),
)


def official(config: str) -> OfficialStudy | None:
    return next((s for s in OFFICIAL if s.config == config), None)


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
    # ablations seed-major too: every setting at seed 0 before any at seed 1
    runs += [StudyRun(a, "eppo", s, ABLATIONS[a]) for s in range(ablation_seeds) for a in ablations]
    return runs
