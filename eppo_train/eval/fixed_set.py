"""The run's fixed evaluation set (`cfg.evaluation`): seeds 0..N-1 of each task's evaluation split, played greedily.

One definition serves every place that scores a policy on it: the pipeline's stages, the study's runs,
`eppo-train signal --eval` and the trainer's evaluation every `run.eval_every` iterations. The same seeds at every
call make two results paired instance by instance (each task's `outcomes`, as `summary.py` pairs its stages).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eppo_train.config import Config
from eppo_train.eval.evaluation import EvalProgress, EvalSpec, evaluate
from eppo_train.policy.agents import PolicyAgent
from eppo_train.policy.base import PolicyBackend, SamplingParams
from eppo_train.report.ticks import EVALUATION_AGENT
from eppo_train.rollout.task_slots import reply_tokens

if TYPE_CHECKING:
    from eppo_train.rollout.task_slots import TaskSlot

# (episodes done, episodes in the whole set, new tokens, seconds) over every spec of one evaluation
SetProgress = Callable[[int, int, int, float], None]


def eval_specs(cfg: Config, slots: list[TaskSlot]) -> list[tuple[EvalSpec, list]]:
    """The fixed evaluation set as specs, one per split in use, each with the task slots it covers."""
    ev = cfg.evaluation
    by_split: dict[str | None, list] = {}
    for s in slots:
        by_split.setdefault(ev.split.get(s.label), []).append(s)
    return [(EvalSpec([s.env_id for s in group], ev.episodes, split, ev.max_turns or cfg.rollout.max_turns,
                      ev.max_new_tokens or cfg.rollout.max_new_tokens, cfg.rollout.max_total_tokens,
                      batch_size=ev.batch_size, reply_tokens=reply_tokens(group)), group)
            for split, group in by_split.items()]


def greedy_params(cfg: Config) -> SamplingParams:
    """Greedy decoding at the evaluation's reply cap, as `eval_specs` sets it (each task's own budget caps its rows)."""
    return SamplingParams(cfg.evaluation.max_new_tokens or cfg.rollout.max_new_tokens, 0.0, 1.0, 0)


def evaluation_agent(cfg: Config, policy: PolicyBackend) -> PolicyAgent:
    """`policy` decoding greedily, named `EVALUATION_AGENT` for the progress lines of the stage it runs in."""
    agent = PolicyAgent(policy, greedy_params(cfg))
    agent.name = EVALUATION_AGENT
    return agent


def evaluate_set(cfg: Config, slots: list[TaskSlot], policy: Any, name: str,
                 on_progress: SetProgress | None = None) -> dict[str, Any]:
    """Greedy evaluation of `policy` (an Agent or a policy backend) on the fixed set: `{"model": name,
    "episodes_per_task", "tasks": {task label: evaluation.summarise(...) + env_id, split}, "seconds"}`."""
    specs = eval_specs(cfg, slots)
    total = sum(len(spec.tasks) * spec.episodes for spec, _ in specs)
    tasks: dict[str, Any] = {}
    seconds, before, tokens = 0.0, 0, 0
    for spec, group in specs:
        def report_progress(p: EvalProgress, before: int = before, spent: float = seconds, made: int = tokens) -> None:
            if on_progress is not None:  # totals over every spec, for one ETA over the whole set
                on_progress(before + p.done, total, made + p.tokens, spent + p.seconds)

        report = evaluate(spec, policy, name, report_progress)
        seconds += report.timing["wall_seconds"]
        before += len(spec.tasks) * spec.episodes
        tokens += report.tokens_generated
        for s in group:
            tasks[s.label] = {**report.tasks[s.env_id], "env_id": s.env_id, "split": spec.split or "eval_split"}
    return {"model": name, "episodes_per_task": cfg.evaluation.episodes, "tasks": tasks, "seconds": seconds}
