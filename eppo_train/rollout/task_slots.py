"""The configured tasks as the run sees them: task slots, the iteration's problems, the rollout settings.

`prepare_tasks(cfg)` turns `env.tasks` into `TaskSlot`s (registering a run-local env where a task sets its own
name, kwargs or turn limit); `train_problems` draws one iteration's problems; `rollout_config` builds the rollout's
typed settings for an iteration. The trainer, the SFT stage, the pipeline, studies and benchmarks all start here,
so they see the same tasks, labels and seeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import eppo_envs
from eppo_envs.core.registry import env_class, task_spec
from eppo_train.config import Config, ConfigError, TaskConfig, import_plugins
from eppo_train.rollout.loop import ContextMode, Problem, RolloutConfig

if TYPE_CHECKING:  # the rollout (gymnasium, env pools) loads when a rollout is built, not with the CLI
    from eppo_train.core.records import Sample
    from eppo_train.rollout.loop import ContextMode, Problem, RolloutConfig


@dataclass
class TaskSlot:
    """One configured task: the env id the rollout makes, and the label EPPO paces and logs it by."""

    cfg: TaskConfig
    env_id: str
    label: str

    @property
    def context(self) -> ContextMode:

        return ContextMode(self.cfg.context, self.cfg.window if self.cfg.context == "window" else 0)


# The shipped examples register their ids only when imported (so they stay out of `eppo-envs list`): a config that
# names one without its module (a YAML without an env section gets the dataclass default, example/GuessNumber-v0)
# is told which module to import.
EXAMPLE_MODULES = {"example/GuessNumber-v0": "eppo_envs.example.guess_number",
                   "example/Bandit-v0": "eppo_envs.example.bandit"}


def _module_hint(env_id: str) -> str:
    module = EXAMPLE_MODULES.get(env_id)
    if module:
        return f"it is registered by {module}: add env.imports: [{module}]"
    return "a task of your own is registered by the module you name in env.imports"


def prepare_tasks(cfg: Config) -> list[TaskSlot]:
    """Import task modules, check every id, and register a run-local variant where a task sets its own name,
    kwargs or turn limit (so two settings of one env are two tasks, and Ray workers rebuild them from the spec)."""
    import gymnasium as gym


    import_plugins(cfg)  # done by from_dict already; again for a Config built in code (importing twice is free)
    slots, labels = [], set()
    for i, t in enumerate(cfg.env.tasks):
        if t.id not in gym.registry:
            raise ConfigError(f"env.tasks.{i}.id: unknown task {t.id!r} (registered: {', '.join(eppo_envs.tasks())}; "
                              f"{_module_hint(t.id)})")
        label = t.name or task_label(t.id)
        if label in labels:
            raise ConfigError(f"env.tasks.{i}: task {label!r} appears twice; give one a `name`")
        labels.add(label)
        # the tools format is a constructor option of every task (AgentEnv's action_format)
        kwargs = {**t.kwargs, "action_format": "tools"} if cfg.env.action_format == "tools" else t.kwargs
        env_id = task_variant(t.id, label, kwargs, t.max_turns) if t.name or kwargs or t.max_turns else t.id
        if kwargs:
            _check_options(env_id, f"env.tasks.{i}.kwargs" if t.kwargs else "env.action_format")
        check_split(t.id, t.split, f"env.tasks.{i}.split")
        slots.append(TaskSlot(t, env_id, label))
    for name, split in cfg.evaluation.split.items():
        if name not in labels:
            raise ConfigError(f"evaluation.split: no task {name!r} (tasks: {', '.join(s.label for s in slots)})")
        check_split(next(s.cfg.id for s in slots if s.label == name), split, f"evaluation.split.{name}")
    for name in cfg.pacing.target_entropy:  # a mistyped label would pace that task toward the default target
        if name not in labels:
            raise ConfigError(f"pacing.target_entropy: no task {name!r} (tasks: {', '.join(s.label for s in slots)})")
    return slots


def check_split(task_id: str, split: str, key: str) -> None:
    """A split the task does not have is a one-line ConfigError now, not the env's ValueError at its first reset.
    (Only where the class names its splits: an env registered outside EPPO may not.)"""

    splits = getattr(env_class(task_id), "splits", None)
    if isinstance(splits, tuple | list) and split not in splits:
        raise ConfigError(f"{key}: {split!r} is not a split of {task_id} ({', '.join(splits)})")


_checked: set[tuple] = set()  # (env id, its kwargs) built once in this process: prepare_tasks runs once per stage


def _check_options(env_id: str, key: str) -> None:
    """Build the variant once, so that an option the task does not take (or refuses) is a one-line ConfigError now,
    not a traceback from the first env built mid-run (in a Ray worker, after the SFT or the model load)."""
    import gymnasium as gym

    spec = gym.spec(env_id)
    token = (env_id, repr(sorted(spec.kwargs.items())))
    if token in _checked:
        return
    try:
        gym.make(env_id).close()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc}") from None
    _checked.add(token)


def task_label(env_id: str) -> str:
    """A registered id's task name ("alfworld"), or the id's last part for an env registered outside EPPO."""

    try:
        return task_spec(env_id).task
    except KeyError:
        return env_id.split("/")[-1]


def task_variant(task_id: str, label: str, kwargs: dict[str, Any], max_turns: int | None = None) -> str:
    """Register `run/<label>-v0`: the registered `task_id` with extra constructor kwargs and/or a turn limit no longer
    than its own. Registering the same variant again is a no-op. Returns the variant's id."""
    import gymnasium as gym


    base = gym.spec(task_id)
    env_id = f"run/{label}-v0"
    steps = min(max_turns, base.max_episode_steps or max_turns) if max_turns else base.max_episode_steps
    merged = {**base.kwargs, **kwargs}
    known = gym.registry.get(env_id)
    if known is None or (known.kwargs, known.max_episode_steps, known.entry_point) != (
            merged, steps, base.entry_point):
        eppo_envs.register(env_id, base.entry_point, task=label, description=f"{task_id} as {label}",
                           max_episode_steps=steps, **merged)
    return env_id


def reply_tokens(slots: list[TaskSlot]) -> dict[str, int]:
    """env id -> the reply budget of the tasks that set their own (`env.tasks[].max_new_tokens`)."""
    return {s.env_id: s.cfg.max_new_tokens for s in slots if s.cfg.max_new_tokens}


def training_rewards(samples: list[Sample], slots: list[TaskSlot]) -> list[Sample]:
    """The samples as the advantages see them: a task with `train_reward: won` is scored 1 for a won episode and 0
    otherwise (in window mode the last turn's step reward carries it); every other task keeps the env's reward."""
    won_only = {s.label for s in slots if s.cfg.train_reward == "won"}
    if not won_only:
        return samples
    out = []
    for s in samples:
        if s.task in won_only:
            meta = dict(s.meta)
            if "step_reward" in meta:
                meta["step_reward"] = float(s.won) if s.turn_index == s.num_turns - 1 else 0.0
            s = replace(s, reward=float(s.won), meta=meta)
        out.append(s)
    return out


def rollout_config(cfg: Config, slots: list[TaskSlot], iteration: int) -> RolloutConfig:
    """The rollout settings of one iteration: `cfg.rollout`, each slot's context mode and label, a seed per
    (run seed, iteration)."""

    return RolloutConfig.from_section(
        cfg.rollout,
        context={s.env_id: s.context for s in slots},
        labels={s.env_id: s.label for s in slots},
        reply_tokens=reply_tokens(slots),
        seed=(cfg.run.seed * 1_000_003 + iteration * 7919) % 2**31,
    )


def train_problems(cfg: Config, slots: list[TaskSlot], iteration: int, per_task: int | None = None,
                   stream: str | None = None) -> list[Problem]:
    """The iteration's training problems: `problems` per task (or `per_task`), seeded by (run seed, iteration or
    `stream`, task), so a resumed run draws the same ones."""

    out = []
    for s in slots:
        rng = random.Random(f"{cfg.run.seed}/{iteration if stream is None else stream}/{s.label}")
        n = s.cfg.problems if per_task is None else per_task
        out += [Problem(s.env_id, s.cfg.split, rng.randrange(2**31)) for _ in range(n)]
    return out
