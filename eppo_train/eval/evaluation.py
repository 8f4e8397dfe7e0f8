"""Evaluation as a library: `evaluate(EvalSpec(...), agent) -> EvalReport`, used by `eppo-eval`, the pipeline and
studies alike.

Instances are seeds 0..episodes-1 of each task's evaluation split: the same for every policy, worker count and
order, so two reports of one spec are paired instance by instance (`EvalReport.outcomes`), which is what the
pipeline's paired stage-to-stage intervals rest on. Model policies decode greedily unless `temperature` > 0; with
`samples` = k > 1 each instance is played k times (sampled), and a report adds pass@k: the share of instances won by
at least one of the k replies. Intervals come from `eppo_train.core.stats` (Wilson for rates, percentile bootstrap for
means; with k > 1 success is a mean over instances of each one's share of wins, bootstrapped over instances, since
the k replies to one instance are not independent draws of the task).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

import eppo_envs
from eppo_envs.core.registry import env_class, reward_revision
from eppo_train.config import ConfigError, parse_override
from eppo_train.core.stats import bootstrap_mean, episode_stats, wilson
from eppo_train.policy.agents import Agent
from eppo_train.report.ticks import RolloutTick, listen
from eppo_train.rollout.env_pool import make_pool
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout
from eppo_train.rollout.task_slots import task_label, task_variant


class UsageError(ValueError):
    """A user mistake (unknown task, policy, model): printed as one line, exit code 2."""


@dataclass
class EvalSpec:
    """What to evaluate on: tasks (env ids), instances and decoding. The policy is passed separately."""

    tasks: list[str]
    episodes: int = 64  # instances per task: seeds 0..episodes-1
    split: str | None = None  # None: each task's own eval_split
    max_turns: int | None = None  # None: the longest task time limit
    max_new_tokens: int = 256
    max_total_tokens: int = 4096
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int = 0  # sampling seed when temperature > 0
    samples: int = 1  # replies per instance (temperature > 0): success is then pass@1 and the report adds pass@k
    batch_size: int = 64  # episodes played in lockstep per chunk
    workers: int = 0  # Ray env workers (0: envs in this process)
    ray_address: str | None = None
    progress_bar: bool = False  # the rollout's own per-chunk tqdm bar
    reply_tokens: dict[str, int] = field(default_factory=dict)  # env id -> its own reply budget (else max_new_tokens)

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.batch_size < 1 or self.samples < 1:
            raise UsageError("episodes, samples and batch size must be at least 1")
        if self.samples > 1 and self.temperature <= 0:
            raise UsageError("more than one sample per instance needs a temperature > 0 (greedy replies are all "
                             "the same)")
        if not self.tasks:
            raise UsageError("no tasks to evaluate")


@dataclass
class TaskOutcomes:
    """Per-instance results, in seed order: what paired comparisons between two reports need."""

    seeds: list[int] = field(default_factory=list)
    won: list[bool] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)


@dataclass
class EvalReport:
    policy: str
    split: str
    episodes_per_task: int
    temperature: float
    tasks: dict[str, dict[str, Any]]  # env id -> summarise(...) (with "outcomes") and the task's "reward_revision"
    tokens_generated: int
    timing: dict[str, float]  # the only fields that differ between two runs of the same spec
    episodes: list = field(default_factory=list, repr=False)  # eppo_envs Episode records (not serialised)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("episodes")
        return out


# evaluation reports keep their name for one of stats.episode_stats' numbers (eval tables and studies read it)
_REPORT_NAMES = {"invalid_rate": "invalid_action_rate"}
_REPORT_KEYS = ("episodes", "success", "mean_reward", "mean_turns", "invalid_rate", "truncated", "env_errors")


def by_instance(episodes: list) -> dict[int, list]:
    """Episodes grouped by seed, in the order given: one instance's replies (k of them with `samples` = k)."""
    out: dict[int, list] = {}
    for e in episodes:
        out.setdefault(e.seed, []).append(e)
    return out


def summarise(episodes: list) -> dict[str, Any]:
    """`stats.episode_stats` with intervals: rates with Wilson intervals, means with bootstrap intervals, and the
    per-episode outcomes in seed order. Several episodes of one seed (sampled replies to one instance) make every
    interval a bootstrap over instances and add `pass_at_k` (k: episodes per instance), the share of instances with
    a win, with its Wilson interval."""
    episodes = sorted(episodes, key=lambda e: e.seed)
    point = episode_stats(episodes)
    steps = sum(e.num_steps for e in episodes)
    by_seed = by_instance(episodes)
    k = max((len(v) for v in by_seed.values()), default=1)

    def per_instance(value: Callable[[Any], float]) -> list[float]:
        """One value an instance (the mean over its k replies): what a bootstrap resamples when k > 1."""
        return [sum(map(value, v)) / len(v) for v in by_seed.values()]

    if k == 1:
        success_interval = list(wilson(sum(e.won for e in episodes), len(episodes)))
    else:
        success_interval = bootstrap_mean(per_instance(lambda e: float(e.won))).as_list()
    intervals = {
        "success": success_interval,
        "mean_reward": bootstrap_mean(per_instance(lambda e: e.total_reward)).as_list(),
        "mean_turns": bootstrap_mean(per_instance(lambda e: float(e.num_steps))).as_list(),
        "invalid_rate": list(wilson(sum(e.invalid_actions for e in episodes), steps)),
    }
    out: dict[str, Any] = {}
    for key in _REPORT_KEYS:
        name = _REPORT_NAMES.get(key, key)
        out[name] = point[key]
        if key in intervals:
            out[f"{name}_ci95"] = intervals[key]
    if k > 1:
        solved = sum(any(e.won for e in v) for v in by_seed.values())
        out.update(samples=k, pass_at_k=solved / len(by_seed), pass_at_k_ci95=list(wilson(solved, len(by_seed))))
    outcomes = TaskOutcomes([e.seed for e in episodes], [bool(e.won) for e in episodes],
                            [float(e.total_reward) for e in episodes])
    return {**out, "outcomes": asdict(outcomes)}


def resolve_tasks(spec: str) -> list[str]:
    """'all' or a comma list of task names or ids -> registered env ids."""
    registered = eppo_envs.tasks()
    if spec == "all":
        if not registered:
            raise UsageError("no tasks are registered")
        return registered
    out = []
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        try:
            out.append(eppo_envs.resolve(name))
        except KeyError:
            raise UsageError(f"unknown task {name!r}; known: {', '.join(registered) or 'none'}") from None
    return out


def with_env_kwargs(env_ids: list[str], items: list[str]) -> list[str]:
    """Apply `TASK.KEY=VALUE` constructor options (YAML values, as `--set`): each task given options is replaced by
    a variant that has them (`run/<task>-v0`, as a run config's `env.tasks[].kwargs` makes)."""

    options: dict[str, dict[str, Any]] = {}
    for item in items:
        try:
            dotted, value = parse_override(item)
        except ConfigError:
            dotted, value = "", None
        task, _, key = dotted.rpartition(".")
        if not task or not key:
            raise UsageError(f"--env-kwarg expects TASK.KEY=VALUE (e.g. alfworld.task_types=[1,2]), got {item!r}")
        try:
            env_id = eppo_envs.resolve(task)
        except KeyError:
            raise UsageError(f"--env-kwarg {item!r}: unknown task {task!r}") from None
        if env_id not in env_ids:
            raise UsageError(f"--env-kwarg {item!r}: {task!r} is not among the evaluated tasks")
        options.setdefault(env_id, {})[key] = value
    out = []
    for env_id in env_ids:
        if env_id not in options:
            out.append(env_id)
            continue
        label = task_label(env_id)
        accepted = constructor_options(env_id)
        unknown = [k for k in options[env_id] if accepted is not None and k not in accepted]
        if unknown:  # else gymnasium's "... was raised from the environment creator for run/<task>-v0 with kwargs"
            raise UsageError(f"--env-kwarg for {label}: no option {unknown[0]!r} (its options: "
                             f"{', '.join(accepted) or 'none'})")
        variant = task_variant(env_id, label, options[env_id])
        try:  # a bad option is the user's: build one env now for a one-line error, not a traceback mid-run
            gym.make(variant).close()
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--env-kwarg for {label}: {exc}") from None
        out.append(variant)
    return out


def in_format(env_ids: list[str], action_format: str) -> list[str]:
    """The tasks in `action_format`: unchanged for `tags`; for `tools` each becomes a variant whose envs are built with
    `action_format="tools"` (as a run config's `env.action_format: tools` makes them)."""
    if action_format == "tags":
        return env_ids
    if action_format != "tools":
        raise UsageError(f"--action-format: tags or tools, got {action_format!r}")
    out = []
    for env_id in env_ids:
        if not getattr(env_class(env_id), "tools", ()):
            raise UsageError(f"{env_id} declares no tools (AgentEnv.tools): it can only be evaluated with "
                             "--action-format tags")
        out.append(task_variant(env_id, task_label(env_id), {"action_format": "tools"}))
    return out


def constructor_options(env_id: str) -> list[str] | None:
    """The keyword options a task's class takes: its `__init__`'s named parameters and, where that passes
    `**kwargs` on, its bases'; None where they end in `**kwargs` that anything may fill."""
    import inspect


    names: list[str] = []
    for cls in env_class(env_id).__mro__:
        if "__init__" not in vars(cls):
            continue
        if cls is object:
            return sorted(set(names))
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # not self
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return sorted(set(names))
    return None


def eval_split(env_id: str) -> str:

    return getattr(env_class(env_id), "eval_split", "test")


def eval_problems(env_ids: list[str], split: str | None, episodes: int) -> list:

    return [Problem(env_id, split or eval_split(env_id), seed) for env_id in env_ids for seed in range(episodes)]


@dataclass(frozen=True)
class EvalProgress:
    done: int  # episodes finished, over every chunk
    total: int
    tokens: int
    seconds: float  # wall time since the evaluation began


def evaluate(spec: EvalSpec, agent: Agent, policy_name: str = "",
             on_progress: Callable[[EvalProgress], None] | None = None) -> EvalReport:
    """Play every instance of `spec` with `agent`; `on_progress` hears after every turn of every chunk."""
    import time


    problems = eval_problems(spec.tasks, spec.split, spec.episodes)
    max_turns = spec.max_turns or max((gym.spec(e).max_episode_steps or 30) for e in spec.tasks)
    cfg = RolloutConfig(group_size=spec.samples, max_turns=max_turns, max_new_tokens=spec.max_new_tokens,
                        reply_tokens=dict(spec.reply_tokens), max_total_tokens=spec.max_total_tokens,
                        temperature=spec.temperature, top_p=spec.top_p, seed=spec.seed, progress=spec.progress_bar)
    episodes, stats = [], []
    t0 = time.perf_counter()
    done_before = tokens_before = 0

    def tick(t: RolloutTick) -> None:
        if on_progress is not None:
            on_progress(EvalProgress(done_before + t.done, len(problems) * spec.samples, tokens_before + t.tokens,
                                     time.perf_counter() - t0))

    with make_pool(spec.workers, spec.ray_address) as pool, listen(tick):
        # Fixed-size chunks in a fixed order: the same instances meet the same batch for every run.
        per_chunk = max(1, spec.batch_size // spec.samples)  # k replies to each of a chunk's instances
        for start in range(0, len(problems), per_chunk):
            result = run_rollout(agent, pool, problems[start : start + per_chunk], cfg)
            episodes += result.episodes
            stats.append(result.stats)
            done_before += len(result.episodes)
            tokens_before += int(result.stats["tokens_generated"])
    by_task: dict[str, list] = {}
    for episode in episodes:
        by_task.setdefault(episode.env_id, []).append(episode)
    return EvalReport(
        policy=policy_name or getattr(agent, "name", "agent"),
        split=spec.split or "eval_split",
        episodes_per_task=spec.episodes,
        temperature=spec.temperature,
        tasks={env_id: {**summarise(by_task.get(env_id, [])), "reward_revision": reward_revision(env_id)}
               for env_id in spec.tasks},
        tokens_generated=sum(int(s["tokens_generated"]) for s in stats),
        timing={"generation_seconds": sum(s["generation_seconds"] for s in stats),
                "env_seconds": sum(s["env_seconds"] for s in stats),
                "wall_seconds": sum(s["wall_seconds"] for s in stats)},
        episodes=episodes,
    )
