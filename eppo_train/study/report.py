"""`eppo-train study-report` (`make study-report`): `study.md` and its figures from the study's result files alone.

Success is each run's final greedy evaluation (seeds 0..N-1 of every task's evaluation split), mean +- std over
seeds. A loss is compared with `grpo` run by run on the same training seed and, inside it, the same evaluation
instance: the per-instance differences of every (seed, instance) pair of a task go through the stratified paired
bootstrap of `eppo_train.core.stats` (tasks weigh equally), so the interval is that of the mean success difference over
tasks. That interval treats the seeds as given (evaluation noise on pooled seeds); beside it stand the per-seed
differences and a Student-t interval over them, which treats each training seed as one draw and so carries the
spread between training runs. A claim counts as shown only where both intervals exclude 0. A pair whose two runs
began from different start weights (another machine's SFT) is marked. The EPPO ablation is compared the same way
with the main `eppo` runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eppo_train.core.stats import Interval, paired_bootstrap_diff, paired_bootstrap_mean_diff, t_interval
from eppo_train.study.dynamics import SMOOTHING, SPIKE, count, entropies
from eppo_train.study.plots import entropy_figure, eps_figure, success_figure
from eppo_train.study.record import (
    START_FILE,
    ResultError,
    RewardDrift,
    load_plan,
    load_results,
    load_starts,
    reward_drift,
    start_key,
)

MAIN_LOSSES = ("grpo", "dapo", "eppo", "clip_cov", "kl_cov")
REQUIRED = ("grpo", "dapo", "eppo", "clip_cov")  # the acceptance bar: >= 3 seeds each
MIN_SEEDS = 3


@dataclass
class Paired:
    seeds: list[int]
    overall: Interval  # mean over tasks of the success difference (other - base)
    per_task: dict[str, Interval]
    per_seed: dict[int, float]
    over_seeds: Interval | None  # Student-t over per_seed: the spread between training runs (None under 2 seeds)
    tasks_skipped: list[str]  # instances did not line up (another evaluation set)
    other_start: list[int]  # seeds whose two runs began from different start weights

    def shown(self) -> bool:
        """Both intervals exclude 0 (the seed-level one wherever there are seeds enough to have it)."""
        return self.overall.excludes_zero() and (self.over_seeds is None or self.over_seeds.excludes_zero())


def _ms(values: list[float]) -> str:
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {sd:.2f}"


def _success(run: dict, task: str) -> float:
    return float(run["evaluation"]["tasks"][task]["success"])


def _mean_success(run: dict, tasks: list[str]) -> float:
    return statistics.fmean(_success(run, t) for t in tasks)


def by_group(results: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for r in sorted(results, key=lambda r: (r["group"], r["seed"])):
        groups.setdefault(r["group"], []).append(r)
    return groups


def eval_tasks(results: list[dict]) -> list[str]:
    """Tasks every run was evaluated on, in the first run's order."""
    if not results:
        return []
    common = set.intersection(*(set(r["evaluation"]["tasks"]) for r in results))
    return [t for t in results[0]["evaluation"]["tasks"] if t in common]


def paired(base: list[dict], other: list[dict], tasks: list[str]) -> Paired | None:
    """other - base on the seeds both have; None when they share no seed."""
    a_by, b_by = {r["seed"]: r for r in base}, {r["seed"]: r for r in other}
    seeds = sorted(set(a_by) & set(b_by))
    if not seeds:
        return None
    groups, per_task, skipped = [], {}, []
    for t in tasks:
        a, b, ok = [], [], True
        for s in seeds:
            oa, ob = a_by[s]["evaluation"]["tasks"][t]["outcomes"], b_by[s]["evaluation"]["tasks"][t]["outcomes"]
            ok = ok and oa["seeds"] == ob["seeds"]
            a += [float(w) for w in oa["won"]]
            b += [float(w) for w in ob["won"]]
        if not ok:
            skipped.append(t)
            continue
        groups.append((a, b))
        per_task[t] = paired_bootstrap_diff(a, b)
    used = [t for t in tasks if t not in skipped]
    per_seed = {s: _mean_success(b_by[s], used) - _mean_success(a_by[s], used) for s in seeds} if used else {}
    other_start = [s for s in seeds if start_key(a_by[s]["start_model"]) != start_key(b_by[s]["start_model"])]
    return Paired(seeds, paired_bootstrap_mean_diff(groups), per_task, per_seed, t_interval(list(per_seed.values())),
                  skipped, other_start)


def _word(iv: Interval) -> str:
    if not iv.excludes_zero():
        return "no detectable difference (the interval contains 0)"
    return "higher" if iv.estimate > 0 else "lower"


def _fmt(iv: Interval | None) -> str:
    return "–" if iv is None else iv.fmt(2, signed=True)


def _judged(p: Paired) -> str:
    """One clause on both intervals of a comparison."""
    pooled = f"{p.overall.fmt(2, signed=True)} on the pooled instances: {_word(p.overall)}"
    if p.over_seeds is None:
        return (f"{pooled} (only {len(p.seeds)} training seed: the interval covers evaluation noise, not the spread "
                f"between training runs)")
    return f"{pooled}; over the {len(p.seeds)} seeds {p.over_seeds.fmt(2, signed=True)}: {_word(p.over_seeds)}"


# ---------------------------------------------------------------------------- the sections
def _setup(results: list[dict], tasks: list[str]) -> list[str]:
    r0 = results[0]
    cfg = r0["config"]
    episodes = sorted({r["training_episodes"] for r in results})
    starts = sorted({start_key(r["start_model"]) for r in results})
    it_s = [it["iteration_time_s"] for r in results for it in r["iterations"] if it.get("iteration_time_s")]
    lines = [
        "## Setup",
        "",
        f"- Start model: `{r0['start_model'].get('base_model')}`, {r0['start_model'].get('how')}; start weights "
        f"{', '.join(starts)}" + (" (**the runs did not all start from the same weights**)"
                                                  if len(starts) > 1 else " (every run)") + ".",
        f"- Tasks: {', '.join(tasks)}; {cfg['run']['iterations']} RL iterations per run, "
        f"{cfg['rollout']['group_size']} samples per problem, "
        f"training episodes per run: {', '.join(map(str, episodes))}"
        + (" (**unequal**)" if len(episodes) > 1 else " (equal for every run)") + ".",
        f"- Evaluation: {r0['evaluation']['episodes_per_task']} episodes per task, greedy, splits "
        + ", ".join(f"{t} `{r0['evaluation']['tasks'][t].get('split', '?')}`" for t in tasks) + ".",
        f"- Cost: {statistics.fmean(r['wall_seconds'] for r in results) / 60:.1f} min per run on average "
        f"(training + evaluation), {statistics.fmean(it_s) if it_s else float('nan'):.0f} s per RL iteration; "
        f"machines: {', '.join(sorted({str(r['machine'].get('cpus')) + ' CPUs' for r in results}))}; "
        f"1-min load at the start of a run {min(r['load']['start'][0] for r in results):.1f}–"
        f"{max(r['load']['start'][0] for r in results):.1f}; dates "
        f"{min(r['date'] for r in results)[:10]} – {max(r['date'] for r in results)[:10]}.",
        "",
    ]
    return lines


def _worst_success(run: dict, tasks: list[str]) -> float:
    return min(_success(run, t) for t in tasks)


def _success_table(groups: dict[str, list[dict]], tasks: list[str], title: str) -> list[str]:
    head = ["run group", "seeds", *tasks, "**mean**", "worst task", "crossovers", "spikes"]
    lines = [title, "", "| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    for g, runs in groups.items():
        cells = [_ms([_success(r, t) for r in runs]) for t in tasks]
        cells.append(f"**{_ms([_mean_success(r, tasks) for r in runs])}**")
        cells.append(_ms([_worst_success(r, tasks) for r in runs]))
        cells += [_ms([float(r["dynamics"].crossovers) for r in runs]),
                  _ms([float(r["dynamics"].spikes) for r in runs])]
        lines.append(f"| {g} | {', '.join(str(r['seed']) for r in runs)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _paired_table(base_name: str, base: list[dict] | Callable[[list[dict]], list[dict]],
                  others: dict[str, list[dict]], tasks: list[str], title: str) -> tuple[list[str], dict[str, Paired]]:
    """Each group of `others` against `base` (runs, or a function of the group's runs giving their base runs)."""
    found: dict[str, Paired] = {}
    head = ["run group", "paired seeds", f"mean − {base_name} [95%]", "over seeds [95%, t]", *tasks, "per seed"]
    lines = [title, "", "| " + " | ".join(head) + " |", "|---|---:|---:|---:|" + "---:|" * (len(tasks) + 1)]
    marked = False
    for g, runs in others.items():
        p = paired(base(runs) if callable(base) else base, runs, tasks)
        if p is None:
            lines.append(f"| {g} | – | no seed in common with {base_name} |" + " |" * (len(tasks) + 1) + " |")
            continue
        found[g] = p
        cells = [p.per_task[t].fmt(2, signed=True) if t in p.per_task else "instances differ" for t in tasks]
        seeds = " ".join(f"{s}: {d:+.2f}" + ("†" if s in p.other_start else "") for s, d in p.per_seed.items())
        marked = marked or bool(p.other_start)
        lines.append(f"| {g} | {len(p.seeds)} | **{p.overall.fmt(2, signed=True)}** | {_fmt(p.over_seeds)} | "
                     + " | ".join(cells) + f" | {seeds} |")
    if marked:
        lines += ["", "† the two runs of this seed began from different start weights (the start-model rows of the "
                  "first table show how far apart those are)."]
    return [*lines, ""], found


def _start_rows(starts: dict[str, dict], tasks: list[str]) -> list[str]:
    """The start models' rows for the success table (one evaluation each: no spread, no training events)."""
    rows = []
    for key, start in starts.items():
        cells = [f"{_success(start, t):.2f}" if t in start["evaluation"]["tasks"] else "–" for t in tasks]
        mean = _mean_success(start, tasks) if all(t in start["evaluation"]["tasks"] for t in tasks) else float("nan")
        label = "start model (before RL)" if len(starts) == 1 else f"start model `{key}` (before RL)"
        worst = min((_success(start, t) for t in tasks if t in start["evaluation"]["tasks"]), default=float("nan"))
        rows.append(f"| {label} | – | " + " | ".join(cells) + f" | **{mean:.2f}** | {worst:.2f} | – | – |")
    return rows


def _gain_table(starts: dict[str, dict], groups: dict[str, list[dict]], tasks: list[str]) -> list[str]:
    """What RL added: every run against the start model it began from, on the same instances (the start's outcomes
    paired with each seed's), through the same paired bootstrap as the comparison with grpo. A run whose start
    model has no evaluation is left out of this table."""
    def bases(runs: list[dict]) -> list[dict]:
        return [dict(starts[k], seed=r["seed"]) for r in runs if (k := start_key(r["start_model"])) in starts]

    title = "## What RL added: each loss against the start model (same instances)"
    if len(starts) > 1:
        title += "\n\nEach run is paired with the start model it began from (its weights' sha256)."
    return _paired_table("start", bases, groups, tasks, title)[0]


def _run_mean(run: dict, key: str) -> float | None:
    """Mean of a per-task, per-iteration number over a run (tasks and iterations where it was logged)."""
    values = [v[key] for it in run["iterations"] for v in it["tasks"].values() if v.get(key) is not None]
    return statistics.fmean(values) if values else None


CLIP_TARGET = 0.01  # the regime the study means to be in: the clip acts on >= 1 % of a task's tokens on average


def _clip_share(run: dict) -> float | None:
    """Mean over tasks and iterations of the share of tokens the clip acted on, at either bound."""
    low, high = _run_mean(run, "clip_low_frac"), _run_mean(run, "clip_high_frac")
    return None if low is None or high is None else low + high


def _learner_table(groups: dict[str, list[dict]]) -> list[str]:
    """How far each loss moved the policy per batch, and how often the clip acted: the clip can only separate
    losses where it binds."""
    lines = ["### How much the clip acted (per task and iteration, mean over the run; mean ± std over seeds)", "",
             "| run group | clipped at 1 − ε_low (%) | clipped at 1 + ε_high (%) | loss's own clip count (%) | "
             "mean \\|r − 1\\| | approx KL | token entropy (nats) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for g, runs in groups.items():
        cells = []
        for key, scale, fmt in (("clip_low_frac", 100.0, None), ("clip_high_frac", 100.0, None),
                                ("clip_frac", 100.0, None), ("ratio_dev", 1.0, ".4f"), ("approx_kl", 1.0, ".4f"),
                                ("entropy", 1.0, None)):
            vals = [m * scale for m in (_run_mean(r, key) for r in runs) if m is not None]
            cells.append("–" if not vals else f"{statistics.fmean(vals):{fmt}}" if fmt else _ms(vals))
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    shares = [s for rs in groups.values() for r in rs if (s := _clip_share(r)) is not None]
    if shares:
        mean = statistics.fmean(shares)
        verdict = "meets" if mean >= CLIP_TARGET else "falls short of"
        lines += ["", f"Over every run the clip acted on {100 * mean:.2f} % of a task's tokens per iteration on "
                  f"average (either bound; {100 * min(shares):.2f}–{100 * max(shares):.2f} % by run), which "
                  f"{verdict} the {100 * CLIP_TARGET:.0f} % the study's regime aims at. The clipped shares count, "
                  "for every loss alike, the tokens whose ratio left [1 − ε_low, 1 + ε_high] on the side where the "
                  "PPO clip removes their gradient (below with a negative advantage, above with a positive one); "
                  "the loss's own count is what its objective removed (Clip-Cov adds its detached tokens, KL-Cov "
                  "counts its penalised ones)."]
    return [*lines, ""]


def _events_table(results: list[dict]) -> list[str]:
    lines = [
        "### Entropy crossovers and spikes, per run",
        "",
        f"Counted on each run's per-iteration token entropies H_k(t), by one definition for every run "
        f"(`eppo_train/study/dynamics.py`): a **crossover** is a pair of tasks whose order by the smoothed entropy "
        f"H~_k(t) = {SMOOTHING:g}·H~_k(t−1) + {1 - SMOOTHING:g}·H_k(t) flips from one iteration to the next (ties "
        f"keep the last order); a **spike** is H_k(t) > {1 + SPIKE:g}·H~_k(t−1).",
        "",
        "| run | crossovers | first at iteration | spikes | spikes by task |",
        "|---|---:|---:|---:|---|",
    ]
    for r in sorted(results, key=lambda r: (r["group"], r["seed"])):
        d = r["dynamics"]
        first = d.crossover_steps[0] if d.crossover_steps else None
        lines.append(f"| {r['name']} | {d.crossovers} | {first or '–'} | {d.spikes} | "
                     + (", ".join(f"{t} {n}" for t, n in sorted(d.spikes_by_task.items())) or "–") + " |")
    return [*lines, ""]


def _verdict(groups: dict[str, list[dict]], vs_grpo: dict[str, Paired], missing: list[str],
             tasks: list[str]) -> list[str]:
    lines = ["### Verdict", ""]
    short = [g for g in REQUIRED if len(groups.get(g, [])) < MIN_SEEDS]
    if missing or short:
        why = ([f"{len(missing)} planned run(s) have no result file (listed above)"] if missing else []) + (
            [f"fewer than {MIN_SEEDS} seeds for {', '.join(short)}"] if short else [])
        lines.append(f"**The study is incomplete**: {'; '.join(why)}. What follows reads only the runs that are done.")
        lines.append("")
    runs = [r for rs in groups.values() for r in rs]
    flat = [t for t in tasks if len(runs) > 1 and len({_success(r, t) for r in runs}) == 1]
    if flat:
        lines.append(f"- Every run scored the same on {', '.join(flat)}: these tasks cannot separate the losses.")
    for g, p in vs_grpo.items():
        lines.append(f"- {g} vs grpo ({len(p.seeds)} paired seeds): mean success {_judged(p)}.")
    grpo, eppo = groups.get("grpo", []), groups.get("eppo", [])
    if grpo and eppo:
        gs, es = [r["dynamics"].spikes for r in grpo], [r["dynamics"].spikes for r in eppo]
        gc, ec = [r["dynamics"].crossovers for r in grpo], [r["dynamics"].crossovers for r in eppo]
        lines.append(f"- Entropy under grpo: {statistics.fmean(gc):.1f} crossovers and {statistics.fmean(gs):.1f} "
                     f"spikes per run; under eppo {statistics.fmean(ec):.1f} crossovers and "
                     f"{statistics.fmean(es):.1f} spikes per run.")
        if not any(r["dynamics"].crossovers for r in runs):
            lines.append("- No run of any loss had an entropy crossover: the back-and-forth between tasks that the "
                         "claim starts from did not arise here, so pacing had no crossover to prevent.")
        fewer = statistics.fmean(es) < statistics.fmean(gs)

        def above(p: Paired | None) -> bool:
            return p is not None and p.shown() and p.overall.estimate > 0

        beats = above(vs_grpo.get("eppo"))
        if "dapo" in groups:
            dp = paired(groups["dapo"], eppo, tasks)
            beats = beats and above(dp)
            if dp is not None:
                lines.append(f"- eppo vs dapo ({len(dp.seeds)} paired seeds): {_judged(dp)}.")
        claim = "supported" if (beats and fewer) else "not supported"
        rivals = "grpo and dapo" if "dapo" in groups else "grpo"
        lines += ["", f"**The claim** (EPPO has fewer entropy spikes than grpo and higher success than {rivals}, "
                  f"both intervals above 0) is **{claim}** by this data"
                  + (" (preliminary: runs are missing)." if missing or short else ".")]
        if claim == "not supported":
            lines.append("Seeing an effect would need tasks whose success after SFT is neither 0 nor 1 on every "
                         "run, more RL iterations (the learning rate and trained layers here move the greedy "
                         "policy slowly), more seeds or evaluation episodes for tighter intervals, or a larger "
                         "model whose tasks differ in pace.")
    return [*lines, ""]


def _scored_by(names: list[str], every: set[str]) -> str:
    if set(names) == every:
        return "every result file"
    return ", ".join(sorted(names))


def _drift_section(drift: list[RewardDrift], records: list[dict]) -> list[str]:
    """The tasks whose reward changed after (some of) these runs were scored: their figures measure the old one."""
    if not drift:
        return []
    every = {r["name"] for r in records}
    lines = ["## Scored by earlier rewards", "",
             "These tasks' rewards have changed since the result files below were made, so their runs trained on "
             "and were scored by the rewards of then: their figures are not today's measure and do not compare "
             "with runs made now. Delete a run's result file and run `make experiment` to measure it again.", ""]
    for d in drift:
        scored = "; ".join(f"revision {rev} in {_scored_by(names, every)}" for rev, names in sorted(d.scored.items()))
        lines.append(f"- **{d.task}** (`{d.env_id}`, revision {d.now} today): {scored}. Changed since:")
        lines.extend(f"  - {change}" for change in d.changes)
    return [*lines, ""]


# ---------------------------------------------------------------------------- the report
def _newest_run(results: list[dict]) -> str:
    """When the newest run began, not when the report was written: the same result files give the same bytes, so
    `make study-report` on the committed files leaves the committed report unchanged."""
    dates = sorted(str(r["date"]) for r in results if r.get("date"))
    if not dates:
        return ""
    return ", the newest run begun " + dates[-1].replace("T", " ")[:16] + " UTC"


def _section(title: str, results_dir: Path, report: Path) -> tuple[list[str], list[str]]:
    """One study's section of the report (its lines) and its verdict in brief (one line, for the top)."""
    results = load_results(results_dir) if results_dir.is_dir() else []
    plan = load_plan(results_dir) if results_dir.is_dir() else []
    if not results:
        line = f"{title}: no run done yet ({len(plan)} planned)." if plan else f"{title}: not run yet."
        return [f"## {title}", "", line + " `make experiment` runs it.", ""], [f"- {line}"]
    for r in results:
        r["dynamics"] = count(entropies(r))
    names = {r["name"] for r in results}
    missing = [n for n in plan if n not in names]
    try:
        rel = results_dir.resolve().relative_to(report.parent.resolve())
    except ValueError:
        rel = results_dir
    text = [
        f"## {title}",
        "",
        f"From {len(results)} result file(s) in `{rel}/`{_newest_run(results)}. Runs done: {len(results)} of "
        f"{len(plan) or len(results)} planned"
        + (f"; missing: {', '.join(missing)}. `make experiment` runs the missing ones (and skips the rest)."
           if missing else "."),
        "",
    ]
    starts = load_starts(results_dir)  # the start model's evaluations: scored like the runs, shown beside them
    records = [*results, *starts.values()]
    drift = reward_drift(records)
    text += _drift_section(drift, records)
    groups = by_group(results)
    tasks = eval_tasks(results)
    main = {g: groups[g] for g in MAIN_LOSSES if g in groups}  # in the losses' order, grpo first
    ablation = {g: rs for g, rs in groups.items() if g not in MAIN_LOSSES}
    text += _setup(results, tasks)
    table = _success_table(main, tasks, "### Success after RL (final evaluation, mean ± std over seeds)")
    if starts:
        table[4:4] = _start_rows(starts, tasks)  # first under the header: the rows every loss starts from
    text += table
    if starts:
        text += _gain_table(starts, main, tasks)
    else:
        text += [f"(No `{START_FILE}`: the start model has not been evaluated, so what RL added is not shown.)", ""]
    vs_grpo: dict[str, Paired] = {}
    rivals = {g: rs for g, rs in main.items() if g != "grpo"}
    if "grpo" in groups and rivals:
        lines, vs_grpo = _paired_table("grpo", groups["grpo"], rivals, tasks,
                                       "### Paired comparison with grpo (same seeds, same instances)")
        text += lines
    if ablation:
        text += _success_table({"eppo": groups.get("eppo", []), **ablation} if "eppo" in groups else ablation,
                               tasks, "### EPPO ablation (one pacing setting changed each from `eppo`)")
        if "eppo" in groups:
            text += _paired_table("eppo", groups["eppo"], ablation, tasks, "Paired with the main eppo runs:")[0]
    text += _learner_table({**main, **ablation})
    text += _events_table(results)
    fig_dir = report.parent / "figures"
    first = {g: rs[0] for g, rs in groups.items()}
    stem = results_dir.name
    figures = [f for f in (
        entropy_figure(first.get("grpo"), first.get("eppo"), fig_dir / f"{stem}-entropy.png"),
        success_figure(main, fig_dir / f"{stem}-success.png"),
        eps_figure(first.get("eppo"), fig_dir / f"{stem}-eps.png"),
    ) if f is not None]
    text += ["### Figures", ""] + [f"![{f.stem}](figures/{f.name})" for f in figures] + [
        "", "`entropy`: per-task entropy (thin) and its smoothed value (thick) for the lowest grpo and eppo seed, "
        "spikes as crosses, crossovers dashed; `success`: training success per iteration per loss, ±1 std over "
        "seeds; `eps`: EPPO's paced ε per task.", ""]
    verdict = _verdict({g: rs for g, rs in groups.items() if g in MAIN_LOSSES}, vs_grpo, missing, tasks)
    text += verdict
    if drift:
        text += [f"The rewards of {', '.join(d.task for d in drift)} have changed since these runs (\"Scored by "
                 f"earlier rewards\" above): this verdict reads the rewards they were made with.", ""]
    brief = [f"- **{title}**: " + "; ".join(
        [f"{g} − grpo {p.overall.fmt(2, signed=True)} (pooled), {_fmt(p.over_seeds)} over seeds"
         for g, p in vs_grpo.items()] or ["no paired comparison yet"])
        + f" ({len(results)} of {len(plan) or len(results)} runs)."]
    return text, brief


def write_report(sections: list[tuple[str, Path]], report: Path) -> Path:
    """study.md and figures/ beside it, from the result files of each (title, results folder); returns its path."""
    report = Path(report)
    if not any(Path(d).is_dir() for _, d in sections):
        raise ResultError(f"no study results folder {', '.join(str(d) for _, d in sections)}")
    if not any(load_results(Path(d)) for _, d in sections if Path(d).is_dir()):
        plans = sum(len(load_plan(Path(d))) for _, d in sections if Path(d).is_dir())
        planned = f" (0 of {plans} planned runs done)" if plans else ""
        where = ", ".join(str(d) for _, d in sections)
        raise ResultError(f"no study result files in {where}{planned}: `make experiment` writes them")
    bodies, briefs = [], []
    for title, results_dir in sections:
        body, brief = _section(title, Path(results_dir), report)
        bodies += body
        briefs += brief
    flags = " ".join(f"--results {d}" for _, d in sections) if len(sections) == 1 else ""
    text = [
        "# The EPPO study: does entropy pacing beat GRPO and DAPO when tasks train at once?",
        "",
        f"Generated by `eppo-train study-report{(' ' + flags) if flags else ''}` (`make study-report`; `make "
        f"experiment` rebuilds it too) from the result files alone. Do not edit by hand.",
        "",
        "## In brief (mean success over tasks, the loss minus grpo, paired 95 % intervals)",
        "",
        *briefs,
        "",
        *bodies,
    ]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(text))
    return report
