"""The project's one home for statistics: evaluation reports, `summary.md`, studies, the rollout and the trainer's
metrics all call these.

- `episode_stats`: the per-task figures of a set of episodes (success, mean reward and turns, invalid actions,
  truncation, response length), under one set of names; each report keeps its own names for them (metrics.jsonl
  says `reward` and `turns`, evaluation reports `invalid_action_rate`) by renaming, never by counting again.

- `wilson`: a 95 % interval for a success rate. Unlike the normal approximation it stays inside [0, 1] and is
  not degenerate at 0/n or n/n.
- `bootstrap_mean`: a percentile-bootstrap interval for a mean (rewards, turns). It lies inside the range of the
  data, so a reward in [0, 1] gets an interval in [0, 1] (the normal interval goes negative at low success).
- `paired_bootstrap_diff`: the interval of mean(b) - mean(a) when a[i] and b[i] are the same instance (same task,
  same seed) scored at two stages. Resampling the instances, not each side separately, removes the
  between-instance variance that both stages share, so a real improvement is seen with far fewer episodes.
- `rollout_metrics`: `episode_stats` per task of a rollout batch, as the metrics log names them.
- `t_interval`: a Student-t interval for the mean of a few independent values, one per training seed. The
  bootstraps above resample evaluation instances and take the seeds as given; this one treats each seed as one
  draw, so it carries the spread between training runs (wide with 3 seeds, as it should be).

Bootstraps are seeded (default seed 0, 10,000 resamples), so a report is the same number every time it is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from eppo_envs.core import Episode
    from eppo_train.core.records import Sample

Z95 = 1.959964
RESAMPLES = 10_000


@dataclass(frozen=True)
class Interval:
    estimate: float
    lo: float
    hi: float

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def as_list(self) -> list[float]:
        return [self.lo, self.hi]

    def fmt(self, digits: int = 2, signed: bool = False) -> str:
        sign = "+" if signed else ""
        return f"{self.estimate:{sign}.{digits}f} [{self.lo:{sign}.{digits}f}, {self.hi:{sign}.{digits}f}]"


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when there is no data."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # exact in theory, not in floating point: 4 of 4 gives an upper bound of 0.9999999999999999, below its own rate
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))


def _percentile(means: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


def bootstrap_mean(values: Sequence[float], level: float = 0.95, resamples: int = RESAMPLES,
                   seed: int = 0) -> Interval:
    """Mean and its percentile-bootstrap interval; a single value (or none) gives a zero-width interval."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return Interval(0.0, 0.0, 0.0)
    m = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return Interval(m, m, m)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    lo, hi = _percentile(x[idx].mean(axis=1), level)
    return Interval(m, lo, hi)


def paired_bootstrap_diff(a: Sequence[float], b: Sequence[float], level: float = 0.95,
                          resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """mean(b) - mean(a) over paired instances (a[i], b[i]), with a percentile interval from resampling pairs."""
    return paired_bootstrap_mean_diff([(a, b)], level, resamples, seed)


def paired_bootstrap_mean_diff(groups: Sequence[tuple[Sequence[float], Sequence[float]]], level: float = 0.95,
                               resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """The mean over groups (tasks) of each group's paired difference mean(b) - mean(a): the per-instance
    differences b[i] - a[i] of every task, through `stratified_bootstrap_mean`."""
    diffs = []
    for a, b in groups:
        xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if xa.shape != xb.shape or xa.ndim != 1:
            raise ValueError(f"paired samples need the same length, got {xa.shape} and {xb.shape}")
        diffs.append(xb - xa)
    return stratified_bootstrap_mean(diffs, level, resamples, seed)


def stratified_bootstrap_mean(groups: Sequence[Sequence[float]], level: float = 0.95, resamples: int = RESAMPLES,
                              seed: int = 0) -> Interval:
    """The mean over groups (tasks) of each group's mean, with a percentile interval from a stratified bootstrap:
    every resample draws each task's instances from that task only, so a task with more episodes does not weigh
    more and the interval is that of the plain mean over tasks. Empty groups are left out."""
    xs = [np.asarray(g, dtype=np.float64) for g in groups]
    xs = [x for x in xs if x.size]
    if not xs:
        return Interval(0.0, 0.0, 0.0)
    m = float(np.mean([x.mean() for x in xs]))
    if all(np.all(x == x[0]) for x in xs):
        return Interval(m, m, m)
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for x in xs:
        means += x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    lo, hi = _percentile(means / len(xs), level)
    return Interval(m, lo, hi)


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval | None:
    """Mean of independent values (one per training seed) and its Student-t interval; None under two values, where
    a spread cannot be estimated."""
    from scipy.stats import t  # imported here: only the study's report needs it

    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return None
    m = float(x.mean())
    half = float(t.ppf(0.5 + level / 2, df=x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(m, m - half, m + half)


def episode_stats(episodes: Sequence) -> dict[str, float]:
    """The per-task numbers of a set of `eppo_envs` Episode records, the one definition the rollout stats, the
    trainer's metrics and evaluation reports share: success and truncation rates, mean reward and turns, invalid
    actions per step, tokens per response, steps on which the env raised (0 for each over no episodes)."""
    n = max(len(episodes), 1)
    steps = sum(e.num_steps for e in episodes)
    lengths = [t.info.get("response_tokens", 0) for e in episodes for t in e.turns]
    return {
        "episodes": len(episodes),
        "success": sum(e.won for e in episodes) / n,
        "mean_reward": sum(e.total_reward for e in episodes) / n,
        "mean_turns": steps / n,
        "invalid_rate": sum(e.invalid_actions for e in episodes) / max(1, steps),
        "truncated": sum(e.truncated for e in episodes) / n,
        "response_length": sum(lengths) / max(len(lengths), 1),
        "env_errors": sum(1 for e in episodes for t in e.turns if "env_error" in t.info),  # steps the env raised on
    }


# metrics.jsonl keeps its short names for two of rollout.episode_stats' numbers (plots and old runs read them)
_METRIC_NAMES = {"mean_reward": "reward", "mean_turns": "turns"}


def rollout_metrics(episodes: Sequence[Episode], samples: Sequence[Sample]) -> dict[str, dict[str, float]]:
    """Per task: episode_stats of its episodes (under the metrics log's names) and how many samples it gave."""
    per: dict[str, dict[str, float]] = {}
    for task in sorted({e.task for e in episodes}):
        stats = episode_stats([e for e in episodes if e.task == task])
        per[task] = {_METRIC_NAMES.get(k, k): float(v) for k, v in stats.items() if k != "truncated"}
        per[task]["samples"] = float(sum(1 for s in samples if s.task == task))
    return per
