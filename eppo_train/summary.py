"""`summary.md` of a pipeline run: per-task success on the fixed evaluation set at each stage, with 95% Wilson
intervals (eval.wilson); the mean over tasks gets the Wilson interval of the pooled episodes (every task has the
same number of episodes, so the pooled rate is the mean)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eppo_train.config import Config
from eppo_train.eval import wilson

COLUMNS = (("eval_base", "before SFT"), ("eval_sft", "after SFT"), ("eval_rl", "after RL"))


def _cell(wins: int, n: int) -> str:
    lo, hi = wilson(wins, n)
    return f"{wins / n:.2f} [{lo:.2f}, {hi:.2f}]" if n else "—"


def success_table(done: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, tuple[int, int]]]]:
    """Markdown rows and the raw (wins, episodes) per stage and task."""
    cols = [(key, title) for key, title in COLUMNS if key in done]
    tasks = list(next((done[k]["tasks"] for k, _ in cols), {}))
    counts: dict[str, dict[str, tuple[int, int]]] = {}
    for key, _ in cols:
        counts[key] = {}
        for t in tasks:
            s = done[key]["tasks"].get(t, {})
            n = int(s.get("episodes", 0))
            counts[key][t] = (round(s.get("success", 0.0) * n), n)
    lines = ["| task | " + " | ".join(title for _, title in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for t in tasks:
        lines.append(f"| {t} | " + " | ".join(_cell(*counts[k][t]) for k, _ in cols) + " |")
    pooled = [(sum(w for w, _ in counts[k].values()), sum(n for _, n in counts[k].values())) for k, _ in cols]
    lines.append("| **mean** | " + " | ".join(f"**{_cell(w, n)}**" for w, n in pooled) + " |")
    return lines, counts


def write_summary(run_dir: Path, cfg: Config, done: dict[str, Any]) -> Path:
    lines, counts = success_table(done)
    first = next(iter(counts.values()), {})
    n = next(iter(first.values()), (0, 0))[1]
    tasks = ", ".join(f"{t.name or t.id} ({t.id}{', ' + str(t.kwargs) if t.kwargs else ''})" for t in cfg.env.tasks)
    text = [
        f"# Pipeline run `{Path(run_dir).name}`",
        "",
        f"Model `{cfg.model.name}`; tasks: {tasks}.",
        f"Success on the fixed evaluation set: seeds 0..{n - 1} of each task's evaluation split, greedy decoding, "
        f"{n} episodes per task; 95% Wilson intervals in brackets (the mean pools every task's episodes).",
        "",
        *lines,
        "",
    ]
    sft, rl = done.get("sft", {}), done.get("rl", {})
    if sft.get("steps"):
        text.append(f"SFT: {sft['steps']} steps on {sft.get('samples', '?')} expert samples "
                    f"({sft.get('model_tokens', '?')} model tokens); loss {sft.get('loss_first_step', float('nan')):.3f} "
                    f"(first step) -> {sft.get('loss_last_steps', float('nan')):.3f} nats/token (last fifth of "
                    "the steps).")
    if rl.get("iterations"):
        text.append(f"RL: {rl['iterations']} iterations of `{cfg.algo.name}` "
                    f"({len(cfg.env.tasks)} tasks x problems x group {cfg.rollout.group_size}); "
                    "metrics in `rl/metrics.jsonl`, plots in `rl/plots/`.")
    if "eval_sft" in counts and "eval_base" in counts:
        better = [t for t in counts["eval_sft"] if counts["eval_sft"][t][0] > counts["eval_base"][t][0]]
        text.append(f"Tasks where SFT beats the base model: {len(better)} of {len(counts['eval_sft'])} "
                    f"({', '.join(better) or 'none'}).")
    path = Path(run_dir) / "summary.md"
    path.write_text("\n".join(text) + "\n")
    return path
