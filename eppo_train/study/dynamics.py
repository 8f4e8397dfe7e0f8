"""The entropy dynamics a study counts, by one fixed definition for every loss and every pacer setting.

From a run's per-iteration, per-task token entropies H_k(t) (the sampling policy's, as the learner measures them):
- the smoothed entropy H~_k(t) = 0.5 * H~_k(t-1) + 0.5 * H_k(t) (H~_k at a task's first iteration: H_k);
- a **crossover**: a pair of tasks whose order by H~ flips from one iteration to the next (a tie keeps the last
  strict order);
- a **spike**: H_k(t) > 1.5 * H~_k(t-1), the entropy jumping half again over its recent level.
These are the pacer's own counts (algos/pacing.py) at beta = 0.5 and tau = 0.5, fixed here so that a pacer
ablation with another beta or tau is counted like every other run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from eppo_train.algos.pacing import EntropyPacer, PacingConfig

SMOOTHING = 0.5  # beta of H~
SPIKE = 0.5  # tau: a spike is H_k(t) > (1 + tau) H~_k(t-1)


@dataclass
class Dynamics:
    crossovers: int = 0
    spikes: int = 0
    crossover_steps: list[int] = field(default_factory=list)  # 1-based iteration of each crossover
    spikes_by_task: dict[str, int] = field(default_factory=dict)


def count(series: Sequence[dict[str, float]]) -> Dynamics:
    """Crossovers and spikes of a run's per-iteration entropies (one dict task -> H_k per iteration)."""
    pacer = EntropyPacer(PacingConfig(beta=SMOOTHING, tau=SPIKE, warmup=0), 0.2, 0.2)
    out = Dynamics()
    for step, entropies in enumerate(series, start=1):
        result = pacer.update(entropies)
        out.crossover_steps += [step] * len(result.crossovers)
        for task in result.spikes:
            out.spikes_by_task[task] = out.spikes_by_task.get(task, 0) + 1
    out.crossovers, out.spikes = pacer.crossovers, pacer.spikes
    return out


def entropies(record: dict) -> list[dict[str, float]]:
    """A study result file's per-iteration entropies."""
    return [{t: float(v["entropy"]) for t, v in it.get("tasks", {}).items() if v.get("entropy") is not None}
            for it in record.get("iterations", [])]
