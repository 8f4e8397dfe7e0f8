"""The study report's figures, drawn from result files alone (study_record.py), with matplotlib (Agg).

entropy.png  per-task token entropy H_k (thin) and its smoothed value (thick) over iterations, one GRPO run beside
             one EPPO run (the lowest seed of each); crossovers as dashed vertical lines (study/dynamics.py)
success.png  training success per iteration (mean over tasks), one line per loss: mean over seeds, band +-1 std
eps.png      EPPO's paced clip bounds per task over iterations (eps_high solid, eps_low dotted), one EPPO run
"""

from __future__ import annotations

import statistics
from pathlib import Path

from eppo_train.study.dynamics import SMOOTHING, count, entropies


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(run: dict, task: str, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for it in run["iterations"]:
        v = it["tasks"].get(task, {}).get(key)
        if v is not None:
            xs.append(it["step"])
            ys.append(v)
    return xs, ys


def _tasks(runs: list[dict]) -> list[str]:
    return sorted({t for r in runs for it in r["iterations"] for t in it["tasks"]})


def _entropy_panel(ax, run: dict, tasks: list[str]) -> None:
    """The run's entropies, with the crossovers and spikes the report counts (study/dynamics.py)."""
    d = run.get("dynamics") or count(entropies(run))
    for i, t in enumerate(tasks):
        c = f"C{i % 10}"
        xs, ys = _series(run, t, "entropy")
        ax.plot(xs, ys, color=c, linewidth=0.8, alpha=0.6)
        smooth, h = [], None
        for y in ys:
            h = y if h is None else SMOOTHING * h + (1 - SMOOTHING) * y
            smooth.append(h)
        ax.plot(xs, smooth, color=c, linewidth=2.2, label=t)
    for j, s in enumerate(sorted(set(d.crossover_steps))):
        ax.axvline(s, color="grey", linestyle="--", linewidth=0.8, label="crossover" if j == 0 else None)
    ax.set(xlabel="iteration", ylabel="token entropy (nats)",
           title=f"{run['name']}: {d.crossovers} crossovers, {d.spikes} spikes")
    ax.legend(fontsize=7)


def entropy_figure(grpo: dict | None, eppo: dict | None, path: Path) -> Path | None:
    runs = [r for r in (grpo, eppo) if r is not None]
    if not runs:
        return None
    plt = _plt()
    tasks = _tasks(runs)
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.2), sharey=True, squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        _entropy_panel(ax, run, tasks)
    return _save(fig, path)


def _mean_curve(run: dict) -> list[float]:
    out = []
    for it in run["iterations"]:
        vals = [v["success"] for v in it["tasks"].values() if v.get("success") is not None]
        out.append(statistics.fmean(vals) if vals else float("nan"))
    return out


def success_figure(groups: dict[str, list[dict]], path: Path) -> Path | None:
    if not groups:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for i, (group, runs) in enumerate(groups.items()):
        curves = [_mean_curve(r) for r in runs]
        n = min(len(c) for c in curves)
        if n == 0:
            continue
        x = [it["step"] for it in runs[0]["iterations"][:n]]
        mean = [statistics.fmean(c[k] for c in curves) for k in range(n)]
        sd = [statistics.stdev(c[k] for c in curves) if len(curves) > 1 else 0.0 for k in range(n)]
        c = f"C{i % 10}"
        ax.plot(x, mean, color=c, label=f"{group} ({len(runs)} seeds)")
        ax.fill_between(x, [m - s for m, s in zip(mean, sd, strict=True)],
                        [m + s for m, s in zip(mean, sd, strict=True)], color=c, alpha=0.15)
    ax.set(xlabel="iteration (equal episodes per iteration for every loss)", ylabel="training success",
           title="Training success, mean over tasks (band: ±1 std over seeds)", ylim=(-0.05, 1.05))
    ax.legend(fontsize=8)
    return _save(fig, path)


def eps_figure(eppo: dict | None, path: Path) -> Path | None:
    if eppo is None:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for i, t in enumerate(_tasks([eppo])):
        c = f"C{i % 10}"
        ax.plot(*_series(eppo, t, "eps_high"), color=c, linewidth=2, label=f"{t} eps_high")
        ax.plot(*_series(eppo, t, "eps_low"), color=c, linewidth=1.2, linestyle=":", label=f"{t} eps_low")
    ax.set(xlabel="iteration", ylabel="clip bound", title=f"{eppo['name']}: EPPO's paced clip bounds per task")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
