"""`eppo-train plot RUN_DIR`: PNG curves from a run's metrics.jsonl.

clipping.png  per task, the share of tokens the clip acted on at the lower bound (ratio < 1 - eps_low, negative
              advantage) and at the upper bound (ratio > 1 + eps_high, positive advantage), and mean |ratio - 1|:
              whether the clip range, paced or not, binds at all
entropy.png   per-task token entropy H_k (thin) and its EMA H^_k (thick); crossovers as dashed vertical lines,
              spikes as crosses on H_k
success.png   per-task success rate and mean reward
clip_bounds.png  per-task eps_low / eps_high over time (the EPPO schedule), crossovers marked
throughput.png   rollout and learner tokens/s, env time share
eval.png      with `run.eval_every`: per-task greedy success on the fixed evaluation set with 95% Wilson intervals, and
              its mean over tasks, from step 0 (before the first update)
"""

from __future__ import annotations

import json
from pathlib import Path

from eppo_train.report.metrics import read_metrics


def _series(records: list[dict], task: str, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        v = r.get("tasks", {}).get(task, {}).get(key)
        if v is not None:
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def _percent(series: tuple[list[int], list[float]]) -> tuple[list[int], list[float]]:
    return series[0], [100.0 * y for y in series[1]]


def _mark_crossovers(ax, records: list[dict]) -> None:
    steps = [r["step"] for r in records if r.get("events", {}).get("crossovers")]
    for i, s in enumerate(steps):
        ax.axvline(s, color="grey", linestyle="--", linewidth=0.8, label="entropy crossover" if i == 0 else None)


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write the PNGs into RUN_DIR/plots; returns their paths. Raises FileNotFoundError without metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    if not records:
        raise FileNotFoundError(f"no metrics in {run_dir} (expected {run_dir}/metrics.jsonl)")
    tasks = sorted({t for r in records for t in r.get("tasks", {})})
    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    colors = {t: f"C{i % 10}" for i, t in enumerate(tasks)}
    written = []

    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(14, 4))
    for t in tasks:
        a1.plot(*_percent(_series(records, t, "clip_low_frac")), color=colors[t], marker="o", markersize=3, label=t)
        a2.plot(*_percent(_series(records, t, "clip_high_frac")), color=colors[t], marker="o", markersize=3, label=t)
        a3.plot(*_series(records, t, "ratio_dev"), color=colors[t], marker="o", markersize=3, label=t)
    a1.set(xlabel="step", ylabel="% of tokens", title="Clipped at 1 - eps_low (A < 0)")
    a2.set(xlabel="step", ylabel="% of tokens", title="Clipped at 1 + eps_high (A > 0)")
    a3.set(xlabel="step", ylabel="mean |r - 1|", title="How far the ratio moved")
    a1.legend(fontsize=8)
    written.append(_save(fig, out / "clipping.png"))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for t in tasks:
        ax.plot(*_series(records, t, "entropy"), color=colors[t], linewidth=0.8, alpha=0.6)
        ax.plot(*_series(records, t, "entropy_ema"), color=colors[t], linewidth=2.2, label=f"{t} (EMA)")
        spikes = [r["step"] for r in records if t in r.get("events", {}).get("spikes", [])]
        ys = {s: y for s, y in zip(*_series(records, t, "entropy"), strict=True)}
        pts = [(s, ys[s]) for s in spikes if s in ys]
        if pts:
            ax.scatter(*zip(*pts, strict=True), marker="x", s=60, color=colors[t], label=f"{t} spike")
    _mark_crossovers(ax, records)
    ax.set(xlabel="step", ylabel="token entropy (nats)", title="Per-task entropy H_k and EMA")
    ax.legend(fontsize=8)
    written.append(_save(fig, out / "entropy.png"))

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for t in tasks:
        a1.plot(*_series(records, t, "success"), color=colors[t], marker="o", markersize=3, label=t)
        a2.plot(*_series(records, t, "reward"), color=colors[t], marker="o", markersize=3, label=t)
    a1.set(xlabel="step", ylabel="success rate", title="Success", ylim=(-0.05, 1.05))
    a2.set(xlabel="step", ylabel="mean reward", title="Reward")
    a1.legend(fontsize=8)
    written.append(_save(fig, out / "success.png"))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for t in tasks:
        ax.plot(*_series(records, t, "eps_high"), color=colors[t], linewidth=2, label=f"{t} eps_high")
        ax.plot(*_series(records, t, "eps_low"), color=colors[t], linewidth=1.2, linestyle=":", label=f"{t} eps_low")
    _mark_crossovers(ax, records)
    ax.set(xlabel="step", ylabel="clip bound", title="Clip bounds per task")
    ax.legend(fontsize=8)
    written.append(_save(fig, out / "clip_bounds.png"))

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [r["step"] for r in records]
    for key in ("rollout_tokens_per_s", "learner_tokens_per_s"):
        a1.plot(steps, [r.get(key) or 0.0 for r in records], marker="o", markersize=3, label=key)
    a2.plot(steps, [r.get("env_time_share") or 0.0 for r in records], marker="o", markersize=3)
    a1.set(xlabel="step", ylabel="tokens/s", title="Throughput")
    a1.legend(fontsize=8)
    a2.set(xlabel="step", ylabel="share", title="Env time share of the rollout", ylim=(0, 1))
    written.append(_save(fig, out / "throughput.png"))

    evals = [json.loads(p.read_text()) for p in sorted((run_dir / "evals").glob("step_*.json"))]
    if evals:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        steps = [e["step"] for e in evals]
        for t in sorted(evals[-1]["tasks"]):
            rows = [e["tasks"][t] for e in evals]
            ys = [r["success"] for r in rows]
            err = [[y - r["success_ci95"][0] for y, r in zip(ys, rows, strict=True)],
                   [r["success_ci95"][1] - y for y, r in zip(ys, rows, strict=True)]]
            ax.errorbar(steps, ys, yerr=err, color=colors.get(t), marker="o", markersize=3, capsize=3, label=t)
        mean = [sum(r["success"] for r in e["tasks"].values()) / len(e["tasks"]) for e in evals]
        ax.plot(steps, mean, color="black", linewidth=2.2, marker="s", label="mean over tasks")
        ax.set(xlabel="step", ylabel="greedy success", ylim=(-0.05, 1.05),
               title=f"Fixed evaluation set ({evals[-1]['episodes_per_task']} episodes a task, 95% Wilson intervals)")
        ax.legend(fontsize=8)
        written.append(_save(fig, out / "eval.png"))
    return written


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:  # every x axis here counts iterations: no tick at step 0.5
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
