"""`summary.md` of a pipeline run: per-task success and mean reward on the fixed evaluation set at each stage, and
the paired change between stages.

Every stage plays the same instances (seeds 0..N-1 of each task's evaluation split), so `SFT − base` and
`RL − SFT` are paired: the interval is a paired bootstrap over instances (stats.paired_bootstrap_mean_diff; for
the mean row stratified by task). Success cells carry 95 % Wilson intervals, reward cells percentile-bootstrap
intervals; the mean row's stage cells are the mean over tasks with a stratified bootstrap interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eppo_train.config import Config
from eppo_train.core.stats import Interval, paired_bootstrap_mean_diff, stratified_bootstrap_mean, wilson
from eppo_train.report.memory import summary_lines
from eppo_train.report.metrics import read_metrics, task_means

COLUMNS = (("eval_base", "before SFT"), ("eval_sft", "after SFT"), ("eval_rl", "after RL"))
DIFFS = (("eval_base", "eval_sft", "SFT − base"), ("eval_sft", "eval_rl", "RL − SFT"))


def _outcomes(task: dict[str, Any], metric: str) -> dict[int, float] | None:
    """seed -> value, from a report made by evaluation.summarise (None for reports from before outcomes)."""
    o = task.get("outcomes")
    if not o:
        return None
    values = o["won"] if metric == "success" else o["reward"]
    return {int(s): float(v) for s, v in zip(o["seeds"], values, strict=True)}


def _pairs(done: dict[str, Any], a: str, b: str, task: str, metric: str) -> tuple[list[float], list[float]] | None:
    oa, ob = _outcomes(done[a]["tasks"].get(task, {}), metric), _outcomes(done[b]["tasks"].get(task, {}), metric)
    if oa is None or ob is None:
        return None
    seeds = sorted(set(oa) & set(ob))  # the shared instances (every seed, when both stages used one spec)
    return [oa[s] for s in seeds], [ob[s] for s in seeds]


def _reward_changed(done: dict[str, Any], a: str, b: str, task: str) -> bool:
    """The two stages scored `task` by different reward revisions (a run resumed after a change to the reward):
    their difference would be the reward's, not the policy's. Reports from before revisions were recorded are
    not judged."""
    ra, rb = (done[k]["tasks"].get(task, {}).get("reward_revision") for k in (a, b))
    return ra is not None and rb is not None and ra != rb


REWARD_CHANGED = "reward changed"


def _revisions(done: dict[str, Any]) -> str:
    """' Rewards (revision, ...): alfworld r2, ...': the reward revision each task was scored by (the newest
    stage's), so a summary read later says which rewards its numbers measure; empty for reports from before
    revisions were recorded."""
    stage = next((done[k] for k, _ in reversed(COLUMNS) if k in done), {"tasks": {}})
    marks = [f"{t} r{v['reward_revision']}" for t, v in stage["tasks"].items() if v.get("reward_revision")]
    return f" Rewards (revision, `eppo-envs list`): {', '.join(marks)}." if marks else ""


def _stage_cell(task: dict[str, Any], metric: str) -> str:
    n = int(task.get("episodes", 0))
    if not n:
        return "—"
    if metric == "success":
        wins = round(task.get("success", 0.0) * n)
        lo, hi = wilson(wins, n)
        return f"{wins / n:.2f} [{lo:.2f}, {hi:.2f}]"
    lo, hi = task.get("mean_reward_ci95", [float("nan")] * 2)
    return f"{task.get('mean_reward', 0.0):.2f} [{lo:.2f}, {hi:.2f}]"


def _mean_cell(done: dict[str, Any], stage: str, tasks: list[str], metric: str) -> str:
    per_task = [_outcomes(done[stage]["tasks"].get(t, {}), metric) for t in tasks]
    if any(o is None for o in per_task):  # an old report: the plain mean, no interval
        key = "success" if metric == "success" else "mean_reward"
        return f"{sum(done[stage]['tasks'][t].get(key, 0.0) for t in tasks) / max(len(tasks), 1):.2f}"
    return stratified_bootstrap_mean([list(o.values()) for o in per_task]).fmt()


def _diff_cell(iv: Interval | None) -> str:
    if iv is None:
        return "—"
    mark = " *" if iv.excludes_zero() else ""
    return iv.fmt(signed=True) + mark


def table(done: dict[str, Any], metric: str) -> list[str]:
    """Markdown rows: one per task and the mean over tasks; stage columns then paired-difference columns."""
    cols = [(key, title) for key, title in COLUMNS if key in done]
    diffs = [(a, b, title) for a, b, title in DIFFS if a in done and b in done]
    tasks = list(next((done[k]["tasks"] for k, _ in cols), {}))
    lines = ["| task | " + " | ".join([t for _, t in cols] + [t for _, _, t in diffs]) + " |",
             "|---|" + "---:|" * (len(cols) + len(diffs))]
    for t in tasks:
        cells = [_stage_cell(done[k]["tasks"].get(t, {}), metric) for k, _ in cols]
        for a, b, _ in diffs:
            if _reward_changed(done, a, b, t):
                cells.append(REWARD_CHANGED)
                continue
            pairs = _pairs(done, a, b, t, metric)
            cells.append(_diff_cell(paired_bootstrap_mean_diff([pairs]) if pairs else None))
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    cells = [_mean_cell(done, k, tasks, metric) for k, _ in cols]
    for a, b, _ in diffs:
        if any(_reward_changed(done, a, b, t) for t in tasks):
            cells.append(REWARD_CHANGED)
            continue
        pairs = [_pairs(done, a, b, t, metric) for t in tasks]
        cells.append(_diff_cell(None if any(p is None for p in pairs) else paired_bootstrap_mean_diff(pairs)))
    lines.append("| **mean over tasks** | " + " | ".join(f"**{c}**" for c in cells) + " |")
    return lines


CLIP_KEYS = ("clip_low_frac", "clip_high_frac", "ratio_dev", "approx_kl", "eps_low", "eps_high", "entropy")


def clip_table(records: list[dict]) -> list[str]:
    """How far the RL stage's updates moved the policy per batch and how often the clip acted: per task, the mean
    over iterations of the share of tokens clipped at each bound, mean |ratio - 1|, approx KL, the (paced) bounds
    and the token entropy."""
    means = task_means(records, CLIP_KEYS)
    if not means:
        return []
    steps = [r.get("optimizer_steps") for r in records if r.get("optimizer_steps")]
    lines = [f"## The clip during RL ({(sum(steps) / len(steps)) if steps else float('nan'):.0f} optimizer steps a "
             "batch; per task, mean over iterations)", "",
             "| task | clipped at 1 − ε_low (%) | clipped at 1 + ε_high (%) | mean \\|r − 1\\| | approx KL | ε_low | "
             "ε_high | entropy (nats) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    cells = (("clip_low_frac", ".2f", 100.0), ("clip_high_frac", ".2f", 100.0), ("ratio_dev", ".4f", 1.0),
             ("approx_kl", ".5f", 1.0), ("eps_low", ".3f", 1.0), ("eps_high", ".3f", 1.0), ("entropy", ".3f", 1.0))
    for task, m in means.items():
        row = [format(m[k] * scale, fmt) if k in m else "–" for k, fmt, scale in cells]
        lines.append(f"| {task} | " + " | ".join(row) + " |")
    return [*lines, ""]


def write_summary(run_dir: Path, cfg: Config, done: dict[str, Any]) -> Path:
    first = next((done[k] for k, _ in COLUMNS if k in done), {"tasks": {}})
    n = next(iter(first["tasks"].values()), {}).get("episodes", 0)
    tasks = ", ".join(f"{t.name or t.id} ({t.id}{', ' + str(t.kwargs) if t.kwargs else ''})" for t in cfg.env.tasks)
    text = [
        f"# Pipeline run `{Path(run_dir).name}`",
        "",
        f"Model `{cfg.model.name}`; tasks: {tasks}.",
        f"The fixed evaluation set: seeds 0..{n - 1} of each task's evaluation split, greedy decoding, {n} episodes "
        "per task, the same instances at every stage. Brackets: 95 % intervals — Wilson for a task's success, "
        "percentile bootstrap (10,000 resamples, seeded) for mean rewards and for the mean over tasks (stratified "
        "by task). `SFT − base` and `RL − SFT` are paired bootstrap intervals of the change on the same instances; "
        "`*` marks an interval that excludes 0." + _revisions(done),
        "",
        "## Success",
        "",
        *table(done, "success"),
        "",
        "## Mean reward",
        "",
        *table(done, "reward"),
        "",
    ]
    changed = sorted({t for a, b, _ in DIFFS if a in done and b in done for t in done[a]["tasks"]
                      if _reward_changed(done, a, b, t)})
    if changed:
        text += [f"`{REWARD_CHANGED}`: the stages scored {', '.join(changed)} by different revisions of its reward "
                 "(the run was resumed after the reward changed), so their difference is not the policy's. Delete "
                 "the older evaluation's entry from `pipeline.json` and `--resume` to score it again.", ""]
    sft, rl = done.get("sft", {}), done.get("rl", {})
    if sft.get("steps"):
        text.append(f"SFT: {sft['steps']} steps on {sft.get('samples', '?')} expert samples "
                    f"({sft.get('model_tokens', '?')} model tokens); loss {sft.get('loss_first_step', float('nan')):.3f} "
                    f"(first step) -> {sft.get('loss_last_steps', float('nan')):.3f} nats/token (last fifth of "
                    "the steps).")
        demos = sft.get("per_task", {})
        if demos:
            text.append("Expert demos per task (wins / episodes; replies longer than the task's reply budget): " +
                        ", ".join(f"{t} {d.get('expert_wins', '?')}/{d.get('episodes', '?')}"
                                  f" ({d.get('replies_over_budget', '?')} of {d.get('replies', '?')} over "
                                  f"{d.get('reply_budget', '?')} tokens)" for t, d in demos.items()) + ".")
    if rl.get("iterations"):
        text.append(f"RL: {rl['iterations']} iterations of `{cfg.algo.name}` "
                    f"({len(cfg.env.tasks)} tasks x problems x group {cfg.rollout.group_size}); "
                    "metrics in `rl/metrics.jsonl`, plots in `rl/plots/`.")
        text += ["", *clip_table(read_metrics(Path(run_dir) / "rl"))]
    if "eval_sft" in done and "eval_base" in done:
        better = [t for t, s in done["eval_sft"]["tasks"].items()
                  if s.get("success", 0.0) > done["eval_base"]["tasks"].get(t, {}).get("success", 0.0)]
        text.append(f"Tasks where SFT beats the base model: {len(better)} of {len(done['eval_sft']['tasks'])} "
                    f"({', '.join(better) or 'none'}).")
    memory_lines = summary_lines({k: v.get("memory", {}) for k, v in done.items() if isinstance(v, dict)},
                                 read_metrics(Path(run_dir) / "rl"))
    if memory_lines:
        text += ["", *memory_lines]
    path = Path(run_dir) / "summary.md"
    path.write_text("\n".join(text) + "\n")
    return path

