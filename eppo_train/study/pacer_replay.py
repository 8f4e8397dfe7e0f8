"""Does the pacer follow entropy, or only which task it is? Replays recorded per-task entropies through pacer
settings and measures how its scale c_k responds.

The pacer is a deterministic function of the per-task entropies it is fed, so a run's recorded entropies (a study
result file's `iterations[*].tasks[*].entropy`, or a run's metrics.jsonl) give, for any setting, the c_k that
setting would have produced on that trajectory. Per setting, over the steps after warm-up:

- `task_share` (eta^2): the share of the variance of c_k explained by which task it is. Near 1, c_k is a constant
  per task (it paces task identity); lower, it moves within a task.
- `within_sd`: the mean over (run, task) of the standard deviation of c_k during the run.
- `follow`: the correlation, pooled over runs and tasks, of a step's change of c_k with the change of the
  task's log entropy: how much the bound moves when the task's entropy moves, in the direction the contract asks
  (entropy down, range tighter: a positive correlation).
- `order`: the share of steps where c_k orders the tasks as their EMA entropies do (Kendall concordance of the
  pairs; the contract: a lower entropy than another task's gets a tighter range). 'self' does not compare tasks.

    python -m eppo_train.study.pacer_replay docs/results/study-archive-r1/study/*-seed*.json \
        --out docs/results/pacer-response.md
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path

from eppo_train.algos.pacing import EntropyPacer, PacingConfig

# (name, PacingConfig overrides): the shipped pacer's history and the candidates measured against it
SETTINGS: tuple[tuple[str, dict], ...] = (
    ("mean, alpha 2, beta 0.9", {"reference": "mean", "alpha": 2.0, "beta": 0.9}),
    ("mean, alpha 0.5, beta 0.9", {"reference": "mean", "alpha": 0.5, "beta": 0.9}),
    ("geomean, alpha 2, beta 0.9", {"reference": "geomean", "alpha": 2.0, "beta": 0.9}),
    ("geomean, alpha 0.5, beta 0.9", {"reference": "geomean", "alpha": 0.5, "beta": 0.9}),
    ("geomean, alpha 0.5, beta 0.5", {"reference": "geomean", "alpha": 0.5, "beta": 0.5}),
    ("geomean, alpha 1, beta 0.5", {"reference": "geomean", "alpha": 1.0, "beta": 0.5}),
    ("self, alpha 2, beta 0.5", {"reference": "self", "alpha": 2.0, "beta": 0.5, "self_beta": 0.9}),
    ("self, alpha 4, beta 0.5", {"reference": "self", "alpha": 4.0, "beta": 0.5, "self_beta": 0.9}),
    ("self, alpha 2, beta 0.5, anchored", {"reference": "self", "alpha": 2.0, "beta": 0.5, "self_beta": 1.0}),
    ("pace, alpha 2, beta 0.5", {"reference": "pace", "alpha": 2.0, "beta": 0.5, "self_beta": 0.9}),
    ("pace, alpha 4, beta 0.5", {"reference": "pace", "alpha": 4.0, "beta": 0.5, "self_beta": 0.9}),
    ("pace, alpha 2, beta 0.5, anchored", {"reference": "pace", "alpha": 2.0, "beta": 0.5, "self_beta": 1.0}),
    ("pace, alpha 1, beta 0.5, anchored", {"reference": "pace", "alpha": 1.0, "beta": 0.5, "self_beta": 1.0}),
)


@dataclass
class Response:
    task_share: float
    within_sd: float
    follow: float
    order: float
    points: int


def entropy_series(path: Path) -> list[dict[str, float]]:
    """Per step, task -> the batch's mean token entropy: from a study result file or a run's metrics.jsonl."""
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    else:
        rows = json.loads(path.read_text()).get("iterations", [])
    return [{t: float(v["entropy"]) for t, v in r.get("tasks", {}).items() if v.get("entropy") is not None}
            for r in rows]


def replay(series: Sequence[dict[str, float]], cfg: PacingConfig) -> list[tuple[dict[str, float], dict[str, float]]]:
    """(c_k, H^_k) per step after every task is warm, as the pacer with `cfg` computes them on `series`."""
    pacer = EntropyPacer(cfg, 0.2, 0.28)
    out = []
    for entropies in series:
        step = pacer.update(entropies)
        if entropies and all(pacer.warm(t) for t in entropies):
            out.append(({t: step.scale[t] for t in entropies}, {t: step.ema[t] for t in entropies}))
    return out


def _corr(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 3 or statistics.pstdev(xs) == 0 or statistics.pstdev(ys) == 0:
        return float("nan")
    return statistics.correlation(xs, ys)


def response(runs: Sequence[Sequence[dict[str, float]]], cfg: PacingConfig) -> Response:
    between_ss = total_ss = 0.0
    sds, dc, dlog = [], [], []
    concordant = pairs = 0
    points = 0
    for series in runs:
        steps = replay(series, cfg)
        if len(steps) < 2:
            continue
        by_task: dict[str, list[float]] = {}
        for scale, _ in steps:
            for t, c in scale.items():
                by_task.setdefault(t, []).append(c)
        every = [c for cs in by_task.values() for c in cs]
        grand = statistics.fmean(every)
        total_ss += sum((c - grand) ** 2 for c in every)
        between_ss += sum(len(cs) * (statistics.fmean(cs) - grand) ** 2 for cs in by_task.values())
        sds += [statistics.pstdev(cs) for cs in by_task.values() if len(cs) > 1]
        points += len(every)
        for (c0, h0), (c1, h1) in zip(steps, steps[1:], strict=False):
            for t in c1.keys() & c0.keys():
                if h0[t] > 0 and h1[t] > 0:
                    dc.append(c1[t] - c0[t])
                    dlog.append(math.log(h1[t] / h0[t]))
        for scale, ema in steps:
            for a, b in combinations(sorted(scale), 2):
                if ema[a] != ema[b] and scale[a] != scale[b]:
                    pairs += 1
                    concordant += (ema[a] < ema[b]) == (scale[a] < scale[b])
    return Response(between_ss / total_ss if total_ss > 0 else float("nan"),
                    statistics.fmean(sds) if sds else 0.0, _corr(dlog, dc),
                    concordant / pairs if pairs else float("nan"), points)


def table(paths: Sequence[Path], settings: Sequence[tuple[str, dict]] = SETTINGS, warmup: int = 2) -> str:
    runs = [entropy_series(p) for p in paths]
    lines = ["| setting | task share of c's variance | c's sd within a task | follows log H (corr) | "
             "orders tasks as H | points |", "|---|---:|---:|---:|---:|---:|"]
    for name, over in settings:
        r = response(runs, replace(PacingConfig(), warmup=warmup, **over))
        lines.append(f"| {name} | {r.task_share:.2f} | {r.within_sd:.3f} | {r.follow:+.2f} | {r.order:.2f} | "
                     f"{r.points} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eppo_train.study.pacer_replay", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="study result files (*.json) or runs' metrics.jsonl")
    parser.add_argument("--out", type=Path, help="append the table there (markdown) as well as printing it")
    parser.add_argument("--title", default="", help="the table's heading in --out")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.is_file()]
    if missing:
        print(f"pacer_replay: error: no such file: {missing[0]}", file=sys.stderr)
        return 2
    text = table(args.paths)
    print(text)
    if args.out:
        names = sorted({p.stem for p in args.paths})
        head = (f"## {args.title or 'Replayed runs'}\n\n{len(args.paths)} runs ({', '.join(names[:6])}"
                f"{', ...' if len(names) > 6 else ''}), after warm-up (2 batches per task).\n\n")
        with open(args.out, "a") as f:
            f.write(head + text + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
