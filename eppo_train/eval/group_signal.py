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
from dataclasses import dataclass, replace

from eppo_train.algos.advantages import compute_advantages
from eppo_train.config import Config
from eppo_train.core.stats import episode_stats, rollout_metrics
from eppo_train.eval.evaluation import by_instance, evaluate
from eppo_train.eval.fixed_set import eval_specs
from eppo_train.policy.engine import make_engine
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.loop import Problem, run_rollout
from eppo_train.rollout.task_slots import prepare_tasks, rollout_config, train_problems, training_rewards


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


def measure(cfg: Config, temperatures: list[float], batches: int,
            progress: Callable[[str], None] = print) -> list[SignalRow]:
    """Play `batches` RL batches of `cfg` at each temperature on one engine; one row per (task, temperature)."""
    from eppo_train.learner.workers import engine_spec

    slots = prepare_tasks(cfg)
    policy = make_engine(engine_spec(cfg))
    pool = LocalEnvPool()
    rows: list[SignalRow] = []
    problems = [train_problems(cfg, slots, b, stream=f"signal/{b}") for b in range(batches)]
    try:
        # the greedy reply to every problem once: what the evaluation would score on it
        greedy_cfg = replace(cfg, rollout=replace(cfg.rollout, temperature=0.0, group_size=1))
        greedy_won: dict[str, bool] = {}  # group id -> the greedy reply won
        for b in range(batches):
            result = run_rollout(policy, pool, problems[b], rollout_config(greedy_cfg, slots, 10_000 + b))
            greedy_won.update((Problem(e.env_id, e.split, e.seed).group_id, e.won) for e in result.episodes)
            progress(f"greedy: batch {b + 1}/{batches} done")
        for temperature in temperatures:
            at_t = replace(cfg, rollout=replace(cfg.rollout, temperature=temperature))
            episodes, samples = [], []
            for b in range(batches):
                result = run_rollout(policy, pool, problems[b], rollout_config(at_t, slots, 10_000 + b))
                episodes += result.episodes
                samples += result.samples
                progress(f"temperature {temperature}: batch {b + 1}/{batches} done "
                         f"({result.stats.get('tokens_per_second', 0.0):.0f} new tok/s)")
            stats = rollout_metrics(episodes, samples)
            # a group is one problem's G samples (group id: env, split, seed), so every batch's groups count
            per_task = compute_advantages(training_rewards(samples, slots)).per_task
            member_won: set[str] = {Problem(e.env_id, e.split, e.seed).group_id for e in episodes if e.won}
            env_of = {s.label: s.env_id for s in slots}
            for task in sorted(per_task):
                keys = {p.group_id for batch in problems for p in batch if p.env_id == env_of[task]}
                rescued = sum(k in member_won and not greedy_won[k] for k in keys)
                rows.append(SignalRow(task, temperature, len(keys), 1.0 - per_task[task]["zero_var_frac"],
                                      rescued / max(len(keys), 1), stats[task]["success"],
                                      sum(greedy_won[k] for k in keys) / max(len(keys), 1),
                                      stats[task]["response_length"]))
    finally:
        pool.close()
        policy.close()
    return rows


def measure_eval(cfg: Config, temperatures: list[float],
                 progress: Callable[[str], None] = print) -> list[SignalRow]:
    """The pipeline's fixed evaluation set, greedy once and G samples an instance at each temperature; one row per
    (task, temperature), `groups` counting instances, `signal` the share whose samples both won and lost."""
    from eppo_train.learner.workers import engine_spec

    slots = prepare_tasks(cfg)
    specs = eval_specs(cfg, slots)
    policy = make_engine(engine_spec(cfg))
    rows: list[SignalRow] = []
    try:
        greedy: dict[str, dict[int, bool]] = {}  # env id -> seed -> the greedy reply won
        for spec, _ in specs:
            for e in evaluate(spec, policy).episodes:
                greedy.setdefault(e.env_id, {})[e.seed] = bool(e.won)
        progress(f"greedy: {sum(map(len, greedy.values()))} instances done")
        for temperature in temperatures:
            for spec, group in specs:
                sampled = replace(spec, temperature=temperature, samples=cfg.rollout.group_size, seed=cfg.run.seed)
                report = evaluate(sampled, policy)
                for slot in group:
                    episodes = [e for e in report.episodes if e.env_id == slot.env_id]
                    wins = {seed: [e.won for e in replies] for seed, replies in by_instance(episodes).items()}
                    greedy_won = greedy[slot.env_id]
                    n = max(len(wins), 1)
                    stats = episode_stats(episodes)
                    rows.append(SignalRow(slot.label, temperature, len(wins),
                                          sum(any(w) and not all(w) for w in wins.values()) / n,
                                          sum(any(w) and not greedy_won[seed] for seed, w in wins.items()) / n,
                                          stats["success"], sum(greedy_won[seed] for seed in wins) / n,
                                          stats["response_length"]))
                rate = report.tokens_generated / max(report.timing["wall_seconds"], 1e-9)
                tasks = f"{len(spec.tasks)} task" + ("s" if len(spec.tasks) > 1 else "")
                progress(f"temperature {temperature}: {tasks} x {spec.episodes} instances x "
                         f"{sampled.samples} samples done ({rate:.0f} new tok/s)")
    finally:
        policy.close()
    return rows


def table(rows: list[SignalRow]) -> str:
    """A markdown table: one row per task, its greedy success, a `signal / rescue / success / reply` cell per
    temperature."""
    temps = sorted({r.temperature for r in rows})
    tasks = sorted({r.task for r in rows})
    cell = {(r.task, r.temperature): r for r in rows}
    lines = ["| task | groups | greedy | "
             + " | ".join(f"T={t:g}: signal / rescue / success / reply" for t in temps) + " |",
             "|---|---:|---:|" + "---:|" * len(temps)]
    for task in tasks:
        cells = [cell[task, t] for t in temps]
        lines.append(f"| {task} | {cells[0].groups} | {cells[0].greedy:.2f} | "
                     + " | ".join(f"{c.signal:.2f} / {c.rescue:.2f} / {c.success:.2f} / {c.reply_tokens:.0f}"
                                  for c in cells) + " |")
    for t in temps:
        at_t = [cell[task, t] for task in tasks]
        total = sum(c.groups for c in at_t)
        share = {k: sum(getattr(c, k) * c.groups for c in at_t) / max(total, 1) for k in ("signal", "rescue")}
        greedy = sum(c.greedy for c in at_t) / len(at_t)
        reach = sum(c.greedy + c.rescue for c in at_t) / len(at_t)
        lines.append(f"\nT={t:g}: {share['signal']:.2f} of {total} groups carry signal, {share['rescue']:.2f} can "
                     "move the greedy reply (a member wins where it loses); mean over tasks: greedy "
                     f"{greedy:.2f}, the greedy reply or a member wins {reach:.2f}")
    return "\n".join(lines)
