"""`eppo-train study` (`make experiment`): the same suite trained with several losses and seeds, compared.

    runs/study-<name>/sft/                    one SFT warm start shared by every run (all start from the same model)
    runs/study-<name>/runs/<algo>-s<seed>/    a trainer run each (metrics.jsonl, tb/, checkpoints/, plots/)
    runs/study-<name>/evals/<algo>-s<seed>.json   the final model on the fixed evaluation set (eval.py)
    runs/study-<name>/comparison.md           mean ± std over seeds: per-task and mean success, crossovers, spikes
    runs/study-<name>/plots/{success,entropy}.png  overlays: one line per loss (mean over seeds, band = ±1 std)

Every run has the same iterations, problems and group size, so the losses are compared at equal samples. Finished
runs are skipped on a re-run and an interrupted one resumes from its checkpoint.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from eppo_train.config import Config, save_config

DEFAULT_ALGOS = ("grpo", "dapo", "eppo", "clip_cov")


def _ms(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def run_study(cfg: Config, algos: list[str], seeds: list[int], out: Path) -> Path:
    from eppo_train.metrics import read_metrics
    from eppo_train.pipeline import evaluate_model
    from eppo_train.progress import Progress, RLWatcher
    from eppo_train.sft import run_sft
    from eppo_train.tasks import prepare_tasks
    from eppo_train.trainer import Trainer

    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "config.yaml")
    slots = prepare_tasks(cfg)
    names = [f"{a}-s{s}" for a in algos for s in seeds]
    progress = Progress(["sft", *names], [s.label for s in slots])
    model = cfg.model.name
    if cfg.sft.steps > 0:
        sft_dir = out / "sft"
        if (sft_dir / "sft.json").exists():
            progress.skip("sft")
        else:
            progress.start("sft")
            run_sft(cfg, slots, sft_dir, on_step=lambda i, loss: None)
            progress.finish("sft", None)
        model = str(sft_dir)
    (out / "evals").mkdir(exist_ok=True)
    for algo in algos:
        for seed in seeds:
            name = f"{algo}-s{seed}"
            ev_path = out / "evals" / f"{name}.json"
            if ev_path.exists():
                progress.skip(name)
                continue
            progress.start(name)
            rc = replace(cfg, run=replace(cfg.run, out_dir=str(out / "runs"), name=name, seed=seed, overwrite=True),
                         model=replace(cfg.model, name=model), sft=replace(cfg.sft, steps=0),
                         algo=replace(cfg.algo, name=algo))
            run_dir = rc.run_dir
            resume = (run_dir / "latest").exists()
            with RLWatcher(run_dir, rc.run.iterations, progress):
                Trainer(rc, resume=resume).run()
            latest = (run_dir / "latest").read_text().strip()
            report = evaluate_model(rc, slots, str(run_dir / "checkpoints" / latest / "model"), progress)
            ev_path.write_text(json.dumps(report, indent=1))
            progress.finish(name, report["tasks"])
    records = {n: read_metrics(out / "runs" / n) for n in names}
    evals = {n: json.loads((out / "evals" / f"{n}.json").read_text()) for n in names}
    path = write_comparison(out, cfg, algos, seeds, [s.label for s in slots], records, evals)
    plot_study(out, algos, seeds, [s.label for s in slots], records)
    progress.done(path)
    return path


def write_comparison(out: Path, cfg: Config, algos: list[str], seeds: list[int], tasks: list[str],
                     records: dict[str, list[dict]], evals: dict[str, dict]) -> Path:
    episodes = cfg.run.iterations * sum(t.problems for t in cfg.env.tasks) * cfg.rollout.group_size
    n_eval = cfg.evaluation.episodes
    head = ["loss", *tasks, "mean", "crossovers", "spikes"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    data: dict[str, Any] = {}
    for algo in algos:
        runs = [f"{algo}-s{s}" for s in seeds]
        per_task = {t: _ms([evals[r]["tasks"][t]["success"] for r in runs]) for t in tasks}
        mean = _ms([statistics.fmean(evals[r]["tasks"][t]["success"] for t in tasks) for r in runs])
        cross = _ms([float(sum(len(rec.get("events", {}).get("crossovers", [])) for rec in records[r]))
                     for r in runs])
        spikes = _ms([float(sum(len(rec.get("events", {}).get("spikes", [])) for rec in records[r])) for r in runs])
        data[algo] = {"tasks": per_task, "mean": mean, "crossovers": cross, "spikes": spikes}
        cells = [f"{m:.2f} ± {s:.2f}" for m, s in (*per_task.values(), mean)]
        cells += [f"{cross[0]:.1f} ± {cross[1]:.1f}", f"{spikes[0]:.1f} ± {spikes[1]:.1f}"]
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    text = [
        f"# Study `{out.name}`: {', '.join(algos)} x seeds {', '.join(map(str, seeds))}",
        "",
        f"Model `{cfg.model.name}` after {cfg.sft.steps} SFT steps (shared); each run {cfg.run.iterations} RL "
        f"iterations = {episodes} training episodes (equal samples for every loss).",
        f"Success: the final model on the fixed evaluation set ({n_eval} episodes per task, greedy), mean ± std "
        f"over {len(seeds)} seeds. Crossovers (the order of two tasks' entropy EMAs flips) and spikes (a task's "
        f"entropy jumps > (1 + tau) x its EMA) are counted over each run, mean ± std over seeds.",
        "",
        *lines,
        "",
        "Plots: `plots/success.png` (training success vs episodes), `plots/entropy.png` (mean token entropy).",
    ]
    path = out / "comparison.md"
    path.write_text("\n".join(text) + "\n")
    (out / "comparison.json").write_text(json.dumps(data, indent=1))
    return path


def _curve(records: list[dict], tasks: list[str], key: str) -> list[float]:
    return [statistics.fmean(r.get("tasks", {}).get(t, {}).get(key, 0.0) for t in tasks) for r in records]


def plot_study(out: Path, algos: list[str], seeds: list[int], tasks: list[str],
               records: dict[str, list[dict]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "plots").mkdir(exist_ok=True)
    written = []
    for key, title in (("success", "training success (mean over tasks)"), ("entropy", "token entropy (mean)")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for algo in algos:
            curves = [_curve(records[f"{algo}-s{s}"], tasks, key) for s in seeds]
            n = min(len(c) for c in curves)
            if n == 0:
                continue
            x = [int(r.get("step", i + 1)) for i, r in enumerate(records[f"{algo}-s{seeds[0]}"][:n])]
            mean = [statistics.fmean(c[i] for c in curves) for i in range(n)]
            sd = [statistics.stdev(c[i] for c in curves) if len(curves) > 1 else 0.0 for i in range(n)]
            ax.plot(x, mean, label=algo)
            ax.fill_between(x, [m - s for m, s in zip(mean, sd, strict=True)], [m + s for m, s in zip(mean, sd, strict=True)], alpha=0.2)
        ax.set_xlabel("iteration (equal episodes per iteration for every loss)")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        path = out / "plots" / f"{key}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
