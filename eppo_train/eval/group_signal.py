"""`eppo-train signal`: how much GRPO signal a model's rollouts would carry, at one or more sampling temperatures.

GRPO learns only from groups whose members scored differently: a group whose G samples all won (or all lost)
has zero advantage everywhere. After SFT a small model is nearly deterministic, so most groups are such groups and
RL has little to learn from (docs/pipeline.md). This command plays the config's RL batches (its tasks, problems per
task, group size, turn and token caps) from a model without training, and prints per task and temperature:

- `signal`: the share of groups with reward variance (the groups GRPO trains on), scored as RL scores them
  (`env.tasks[].train_reward`);
- `rescue`: the share of groups where a member won a problem the model's greedy reply loses. The evaluation
  decodes greedily, and GRPO moves the greedy reply towards a win only through such groups; a group with variance
  on a problem the greedy reply already wins sharpens what the greedy reply does (it raises sampled success, not
  greedy success);
- `success`: sampled success over every episode, `greedy`: the greedy reply's success on the same problems, and
  `reply`: mean tokens per reply.

    eppo-train signal --model runs/<run>/sft --temperatures 1.0,1.3 --batches 3
    eppo-train signal --model runs/<run>/sft --eval        # on the pipeline's fixed evaluation set instead

The problems are drawn from their own seed stream (`signal/<batch>`), never the training run's, and the same
problems are played at every temperature, so the temperatures are compared on one set.

With `--eval` (`measure_eval`) the problems are the pipeline's evaluation instances instead (seeds 0..N-1 of each
task's evaluation split, its turn and reply caps), each sampled G times (`rollout.group_size`) and played once
greedily, and scored on success. Then `greedy + rescue` is the share of evaluation instances that the greedy reply
or one of G samples wins: RL that sharpens what the model already samples can raise the greedy evaluation at most
to about that (pass@G with the greedy reply); beyond it RL must find wins the model does not yet sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from eppo_train.algos.advantages import compute_advantages
from eppo_train.config import Config
from eppo_train.core.stats import episode_stats, rescue_at_k, rollout_metrics
from eppo_train.eval.evaluation import by_instance, evaluate
from eppo_train.eval.fixed_set import eval_specs
from eppo_train.policy.engine import make_engine
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout
from eppo_train.rollout.task_slots import prepare_tasks, rollout_config, train_problems, training_rewards


@dataclass(frozen=True)
class Setting:
    """One sampling setting the command compares (`--sampling T[,top_p=P][,min_p=M]`)."""

    temperature: float
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def label(self) -> str:
        cuts = (f", top_p={self.top_p:g}" if self.top_p < 1 else "") + (f", min_p={self.min_p:g}" if self.min_p else "")
        return f"T={self.temperature:g}{cuts}"


def as_setting(value: float | Setting) -> Setting:
    return value if isinstance(value, Setting) else Setting(float(value))


@dataclass
class SignalRow:
    task: str
    temperature: float
    groups: int
    signal: float  # share of groups whose members scored differently
    rescue: float  # share of groups with a winning member on a problem the greedy reply loses
    success: float  # sampled success over every episode
    greedy: float  # the greedy reply's success on the same problems
    reply_tokens: float  # mean tokens a reply
    top_p: float = 1.0
    min_p: float = 0.0
    rescue_at: dict[int, float] = field(default_factory=dict)  # k -> rescue@k (core/stats.rescue_at_k), `--k`

    @property
    def setting(self) -> Setting:
        return Setting(self.temperature, self.top_p, self.min_p)


def _first(items: list, n: int) -> list:
    return items[:n]


def _group_sizes(cfg: Config, slots: list) -> dict[str, int]:
    """task label -> G (its own `group_size`, else the rollout's): signal and rescue are judged on G members."""
    return {s.label: getattr(s.cfg, "group_size", None) or cfg.rollout.group_size for s in slots}


def _uniform(rc: RolloutConfig, n: int) -> RolloutConfig:
    """Every task sampled alike (the setting under test) with `n` members a group."""
    return replace(rc, task_sampling={}, group_sizes={}, group_size=n)


def measure(cfg: Config, settings: list[float | Setting], batches: int,
            progress: Callable[[str], None] = print, ks: tuple[int, ...] = ()) -> list[SignalRow]:
    """Play `batches` RL batches of `cfg` at each sampling setting on one engine; one row per (task, setting).

    With `ks`, each problem gets max(G, max k) samples: signal, rescue and the group counts use each group's first
    G members (a group as training plays it), `rescue_at[k]` all of them (core/stats.rescue_at_k)."""
    from eppo_train.learner.workers import engine_spec

    slots = prepare_tasks(cfg)
    g_of = _group_sizes(cfg, slots)
    n = max([cfg.rollout.group_size, *g_of.values(), *ks])
    policy = make_engine(engine_spec(cfg))
    pool = LocalEnvPool()
    rows: list[SignalRow] = []
    problems = [train_problems(cfg, slots, b, stream=f"signal/{b}") for b in range(batches)]
    try:
        # the greedy reply to every problem once: what the evaluation would score on it
        greedy_cfg = replace(cfg, rollout=replace(cfg.rollout, temperature=0.0, group_size=1))
        greedy_won: dict[str, bool] = {}  # group id -> the greedy reply won
        for b in range(batches):
            rc = _uniform(rollout_config(greedy_cfg, slots, 10_000 + b), 1)
            result = run_rollout(policy, pool, problems[b], rc)
            greedy_won.update((Problem(e.env_id, e.split, e.seed).group_id, e.won) for e in result.episodes)
            progress(f"greedy: batch {b + 1}/{batches} done")
        for setting in map(as_setting, settings):
            at_t = replace(cfg, rollout=replace(cfg.rollout, temperature=setting.temperature, top_p=setting.top_p,
                                                min_p=setting.min_p))
            episodes, samples = [], []
            for b in range(batches):
                result = run_rollout(policy, pool, problems[b], _uniform(rollout_config(at_t, slots, 10_000 + b), n))
                episodes += result.episodes
                samples += result.samples
                name = "temperature " + (f"{setting.temperature}" if setting == Setting(setting.temperature)
                                         else setting.label)
                progress(f"{name}: batch {b + 1}/{batches} done "
                         f"({result.stats.get('tokens_per_second', 0.0):.0f} new tok/s)")
            stats = rollout_metrics(episodes, samples)
            # a group as training plays it: its first G members (the rest are there for rescue@k)
            members: dict[str, list[str]] = {}
            for s in samples:
                ids = members.setdefault(s.group_id, [])
                if s.episode_id not in ids:
                    ids.append(s.episode_id)
            task_of = {s.group_id: s.task for s in samples}
            kept = {e for g, ids in members.items() for e in _first(ids, g_of.get(task_of[g], n))}
            group = [s for s in samples if s.episode_id in kept]
            # a group is one problem's G samples (group id: env, split, seed), so every batch's groups count
            per_task = compute_advantages(training_rewards(group, slots)).per_task
            wins: dict[str, list[bool]] = {}
            for e in episodes:
                wins.setdefault(Problem(e.env_id, e.split, e.seed).group_id, []).append(bool(e.won))
            env_of = {s.label: s.env_id for s in slots}
            for task in sorted(per_task):
                keys = {p.group_id for batch in problems for p in batch if p.env_id == env_of[task]}
                g = g_of.get(task, n)
                rescued = sum(any(_first(wins.get(k, []), g)) and not greedy_won[k] for k in keys)
                rescue_at = {k: sum(rescue_at_k(greedy_won[key], sum(wins.get(key, [])), len(wins.get(key, [])) or k,
                                                k) for key in keys) / max(len(keys), 1) for k in ks}
                rows.append(SignalRow(task, setting.temperature, len(keys), 1.0 - per_task[task]["zero_var_frac"],
                                      rescued / max(len(keys), 1), stats[task]["success"],
                                      sum(greedy_won[k] for k in keys) / max(len(keys), 1),
                                      stats[task]["response_length"], setting.top_p, setting.min_p, rescue_at))
    finally:
        pool.close()
        policy.close()
    return rows


def measure_eval(cfg: Config, settings: list[float | Setting],
                 progress: Callable[[str], None] = print, ks: tuple[int, ...] = ()) -> list[SignalRow]:
    """The pipeline's fixed evaluation set, greedy once and max(G, max k) samples an instance at each setting; one
    row per (task, setting), `groups` counting instances, `signal` the share whose first G samples both won and
    lost, `rescue_at[k]` the rescue@k estimate from all of them."""
    from eppo_train.learner.workers import engine_spec

    slots = prepare_tasks(cfg)
    specs = eval_specs(cfg, slots)
    g_of = _group_sizes(cfg, slots)
    n = max([cfg.rollout.group_size, *ks])
    policy = make_engine(engine_spec(cfg))
    rows: list[SignalRow] = []
    try:
        greedy: dict[str, dict[int, bool]] = {}  # env id -> seed -> the greedy reply won
        for spec, _ in specs:
            for e in evaluate(spec, policy).episodes:
                greedy.setdefault(e.env_id, {})[e.seed] = bool(e.won)
        progress(f"greedy: {sum(map(len, greedy.values()))} instances done")
        for setting in map(as_setting, settings):
            for spec, group in specs:
                sampled = replace(spec, temperature=setting.temperature, samples=n, seed=cfg.run.seed)
                if (setting.top_p, setting.min_p) != (1.0, 0.0):
                    sampled = replace(sampled, top_p=setting.top_p, min_p=setting.min_p)
                report = evaluate(sampled, policy)
                for slot in group:
                    g = min(g_of.get(slot.label, n), n)
                    episodes = [e for e in report.episodes if e.env_id == slot.env_id]
                    wins = {seed: [e.won for e in replies] for seed, replies in by_instance(episodes).items()}
                    greedy_won = greedy[slot.env_id]
                    m = max(len(wins), 1)
                    stats = episode_stats(episodes)
                    rescue_at = {k: sum(rescue_at_k(greedy_won[seed], sum(w), len(w), k) for seed, w in wins.items())
                                 / m for k in ks}
                    rows.append(SignalRow(slot.label, setting.temperature, len(wins),
                                          sum(any(w[:g]) and not all(w[:g]) for w in wins.values()) / m,
                                          sum(any(w[:g]) and not greedy_won[seed] for seed, w in wins.items()) / m,
                                          stats["success"], sum(greedy_won[seed] for seed in wins) / m,
                                          stats["response_length"], setting.top_p, setting.min_p, rescue_at))
                rate = report.tokens_generated / max(report.timing["wall_seconds"], 1e-9)
                tasks = f"{len(spec.tasks)} task" + ("s" if len(spec.tasks) > 1 else "")
                name = "temperature " + (f"{setting.temperature}" if setting == Setting(setting.temperature)
                                         else setting.label)
                progress(f"{name}: {tasks} x {spec.episodes} instances x {sampled.samples} samples done "
                         f"({rate:.0f} new tok/s)")
    finally:
        policy.close()
    return rows


def table(rows: list[SignalRow]) -> str:
    """A markdown table: one row per task, its greedy success, a `signal / rescue / success / reply` cell per
    sampling setting (and `rescue@k` cells when measured)."""
    settings = sorted({r.setting for r in rows}, key=lambda s: (s.temperature, -s.top_p, s.min_p))
    tasks = sorted({r.task for r in rows})
    cell = {(r.task, r.setting): r for r in rows}
    ks = sorted({k for r in rows for k in r.rescue_at})
    at_k = "".join(f" / rescue@{k}" for k in ks)
    lines = ["| task | groups | greedy | "
             + " | ".join(f"{s.label}: signal / rescue / success / reply{at_k}" for s in settings) + " |",
             "|---|---:|---:|" + "---:|" * len(settings)]
    for task in tasks:
        cells = [cell[task, s] for s in settings]
        lines.append(f"| {task} | {cells[0].groups} | {cells[0].greedy:.2f} | "
                     + " | ".join(f"{c.signal:.2f} / {c.rescue:.2f} / {c.success:.2f} / {c.reply_tokens:.0f}"
                                  + "".join(f" / {c.rescue_at.get(k, float('nan')):.2f}" for k in ks)
                                  for c in cells) + " |")
    for s in settings:
        at_t = [cell[task, s] for task in tasks]
        total = sum(c.groups for c in at_t)
        share = {k: sum(getattr(c, k) * c.groups for c in at_t) / max(total, 1) for k in ("signal", "rescue")}
        greedy = sum(c.greedy for c in at_t) / len(at_t)
        reach = sum(c.greedy + c.rescue for c in at_t) / len(at_t)
        lines.append(f"\n{s.label}: {share['signal']:.2f} of {total} groups carry signal, {share['rescue']:.2f} can "
                     "move the greedy reply (a member wins where it loses); mean over tasks: greedy "
                     f"{greedy:.2f}, the greedy reply or a member wins {reach:.2f}"
                     + "".join(f"; rescue@{k} {sum(c.rescue_at.get(k, 0.0) for c in at_t) / len(at_t):.2f}"
                               for k in ks))
    return "\n".join(lines)
