"""`eppo-eval`: any policy on any EPPO tasks, on fixed seeded instances, with confidence intervals.

    eppo-eval --policy default --tasks all --episodes 50
    eppo-eval --policy hf:runs/main/checkpoints/step_100 --tasks alfworld,webshop --json out.json
    eppo-eval --policy openai:http://localhost:8000/v1 --model-name Qwen2.5-7B-Instruct --tasks math

Instances are seeds 0..N-1 of each task's evaluation split (the same for every policy, worker count and order);
model policies decode greedily unless --temperature is given; episodes run through the same agent loop as training.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

import eppo_envs
from eppo_train.policy.agents import Agent, ChatAgent, ExpertAgent, PolicyAgent, RandomAgent
from eppo_train.policy.base import SamplingParams

Z95 = 1.959964


class UsageError(ValueError):
    """A user mistake (unknown task, policy, model): printed as one line, exit code 2."""


# ----------------------------------------------------------------------------- statistics
def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sound at 0 and n successes, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_ci(values: list[float], z: float = Z95) -> tuple[float, float, float]:
    """Mean and a normal-approximation 95% interval."""
    if not values:
        return 0.0, 0.0, 0.0
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, m, m
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
    half = z * sd / math.sqrt(len(values))
    return m, m - half, m + half


def summarise(episodes: list) -> dict[str, Any]:
    n = len(episodes)
    wins = sum(e.won for e in episodes)
    steps = sum(e.num_steps for e in episodes)
    reward, r_lo, r_hi = mean_ci([e.total_reward for e in episodes])
    turns, t_lo, t_hi = mean_ci([float(e.num_steps) for e in episodes])
    invalid = sum(e.invalid_actions for e in episodes)
    return {
        "episodes": n,
        "success": wins / n if n else 0.0,
        "success_ci95": list(wilson(wins, n)),
        "mean_reward": reward,
        "mean_reward_ci95": [r_lo, r_hi],
        "mean_turns": turns,
        "mean_turns_ci95": [t_lo, t_hi],
        "invalid_action_rate": invalid / steps if steps else 0.0,
        "invalid_action_rate_ci95": list(wilson(invalid, steps)),
        "truncated": sum(e.truncated for e in episodes) / n if n else 0.0,
    }


# ----------------------------------------------------------------------------- policies, chosen by name
@dataclass
class PolicyOptions:
    model_name: str | None
    device: str | None
    dtype: str
    batch_size: int
    params: SamplingParams


def _hf(path: str, opts: PolicyOptions) -> Agent:
    from eppo_train.policy.hf import HFPolicy

    return PolicyAgent(HFPolicy(path, device=opts.device, dtype=opts.dtype, max_batch=opts.batch_size), opts.params)


def latest_checkpoint(root: Path = Path("runs")) -> Path | None:
    """The newest folder under `root` holding a transformers model (config.json + weights)."""
    found = [p.parent for p in root.glob("**/config.json") if any(p.parent.glob("*.safetensors"))] if root.exists() else []
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _latest(_: str, opts: PolicyOptions) -> Agent:
    checkpoint = latest_checkpoint()
    if checkpoint is None:
        print("no checkpoint under runs/: evaluating the default model", file=sys.stderr)
    return _hf(str(checkpoint) if checkpoint else "default", opts)


def _openai(url: str, opts: PolicyOptions) -> Agent:
    from eppo_train.policy.openai import OpenAIChat

    if not url:
        raise UsageError("openai policy needs a URL: --policy openai:http://host:port/v1")
    return ChatAgent(OpenAIChat(url, model=opts.model_name), opts.params)


def _vllm(path: str, opts: PolicyOptions) -> Agent:
    try:
        module = importlib.import_module("eppo_train.policy.vllm")
    except ImportError as exc:
        raise UsageError(f"the vllm policy is unavailable ({exc}); install the extra: pip install -e .[vllm]") from None
    backend_cls = getattr(module, "VLLMPolicy", None)
    if backend_cls is None:
        raise UsageError("eppo_train.policy.vllm has no VLLMPolicy")
    return PolicyAgent(backend_cls(path or "default"), opts.params)


# name -> builder(argument after "name:", options). "hf:PATH", "default", "latest", "expert", ...
POLICIES: dict[str, Callable[[str, PolicyOptions], Agent]] = {
    "hf": _hf,
    "default": lambda _, o: _hf("default", o),
    "tiny": lambda _, o: _hf("tiny", o),
    "latest": _latest,
    "openai": _openai,
    "vllm": _vllm,
    "expert": lambda _, o: ExpertAgent(),
    "random": lambda arg, o: RandomAgent(seed=int(arg) if arg.isdigit() else 0),
}


def make_agent(spec: str, opts: PolicyOptions) -> Agent:
    kind, _, arg = spec.partition(":")
    if kind not in POLICIES:
        raise UsageError(f"unknown policy {spec!r}; use one of: hf:PATH, {', '.join(k for k in POLICIES if k != 'hf')}")
    if kind == "hf" and not arg:
        raise UsageError("hf policy needs a path: --policy hf:PATH")
    from eppo_train.policy.models import ModelNotFoundError

    try:
        return POLICIES[kind](arg, opts)
    except ModelNotFoundError as exc:
        raise UsageError(str(exc)) from None


# ----------------------------------------------------------------------------- tasks and instances
def resolve_tasks(spec: str) -> list[str]:
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


def eval_split(env_id: str) -> str:
    entry = gym.spec(env_id).entry_point
    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return getattr(cls, "eval_split", "test")


def problems_for(env_ids: list[str], split: str | None, episodes: int) -> list:
    from eppo_train.rollout import Problem

    return [Problem(env_id, split or eval_split(env_id), seed) for env_id in env_ids for seed in range(episodes)]


# ----------------------------------------------------------------------------- running
def evaluate(agent: Agent, env_ids: list[str], args: argparse.Namespace) -> tuple[dict[str, Any], list]:
    from eppo_train.envpool import make_pool
    from eppo_train.rollout import RolloutConfig, run_rollout

    problems = problems_for(env_ids, args.split, args.episodes)
    max_turns = args.max_turns or max((gym.spec(e).max_episode_steps or 30) for e in env_ids)
    cfg = RolloutConfig(group_size=1, max_turns=max_turns, max_new_tokens=args.max_new_tokens,
                        max_total_tokens=args.max_total_tokens, temperature=args.temperature, top_p=args.top_p,
                        seed=args.seed, progress=not args.no_progress)
    episodes, stats = [], []
    with make_pool(args.workers, args.ray_address) as pool:
        # Fixed-size chunks in a fixed order: the same instances meet the same batch for every run.
        for start in range(0, len(problems), args.batch_size):
            result = run_rollout(agent, pool, problems[start : start + args.batch_size], cfg)
            episodes += result.episodes
            stats.append(result.stats)
    by_task: dict[str, list] = {}
    for episode in episodes:
        by_task.setdefault(episode.env_id, []).append(episode)
    report = {
        "policy": args.policy,
        "split": args.split or "eval_split",
        "episodes_per_task": args.episodes,
        "temperature": args.temperature,
        "tasks": {env_id: summarise(by_task.get(env_id, [])) for env_id in env_ids},
        "tokens_generated": sum(s["tokens_generated"] for s in stats),
        "timing": {  # the only fields that differ between two runs of the same command
            "generation_seconds": sum(s["generation_seconds"] for s in stats),
            "env_seconds": sum(s["env_seconds"] for s in stats),
            "wall_seconds": sum(s["wall_seconds"] for s in stats),
        },
    }
    return report, episodes


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report['policy']} — {report['episodes_per_task']} episodes per task (95% CI)")
    for column in ("task", "success", "mean reward", "mean turns", "invalid actions"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for env_id, s in report["tasks"].items():
        table.add_row(
            env_id,
            f"{s['success']:.3f} [{s['success_ci95'][0]:.3f}, {s['success_ci95'][1]:.3f}]",
            f"{s['mean_reward']:.3f} [{s['mean_reward_ci95'][0]:.3f}, {s['mean_reward_ci95'][1]:.3f}]",
            f"{s['mean_turns']:.2f} [{s['mean_turns_ci95'][0]:.2f}, {s['mean_turns_ci95'][1]:.2f}]",
            f"{s['invalid_action_rate']:.3f}",
        )
    # Piped output (CI logs, files) gets a wide table instead of rich's 80-column default.
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eppo-eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="latest",
                   help="hf:PATH | default | latest | tiny | openai:URL | vllm:PATH | expert | random")
    p.add_argument("--tasks", default="all", help="'all' or a comma list of task names or ids")
    p.add_argument("--split", default=None, help="default: each task's eval_split")
    p.add_argument("--episodes", type=int, default=20, help="instances per task: seeds 0..N-1")
    p.add_argument("--json", type=Path, help="write the summary here")
    p.add_argument("--transcripts", type=Path, help="write one JSON line per episode here")
    p.add_argument("--workers", type=int, default=0, help="Ray env workers (0: envs in this process)")
    p.add_argument("--ray-address", default=None)
    p.add_argument("--model-name", default=None, help="model name sent to an openai endpoint")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed when --temperature > 0")
    p.add_argument("--max-turns", type=int, default=None, help="default: the longest task time limit")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-total-tokens", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=64, help="episodes played in lockstep per chunk")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--import", dest="imports", action="append", default=[],
                   help="module that registers extra tasks (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    try:
        for module in args.imports:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise UsageError(f"cannot import {module!r}: {exc}") from None
        if args.episodes < 1 or args.batch_size < 1:
            raise UsageError("--episodes and --batch-size must be at least 1")
        env_ids = resolve_tasks(args.tasks)
        params = SamplingParams(args.max_new_tokens, args.temperature, args.top_p, args.seed)
        agent = make_agent(args.policy, PolicyOptions(args.model_name, args.device, args.dtype, args.batch_size, params))
        report, episodes = evaluate(agent, env_ids, args)
    except (UsageError, ValueError) as exc:
        print(f"eppo-eval: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # an endpoint or worker failure: one line, not a traceback
        print(f"eppo-eval: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print_table(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    if args.transcripts:
        args.transcripts.parent.mkdir(parents=True, exist_ok=True)
        with args.transcripts.open("w") as f:
            for episode in episodes:
                f.write(json.dumps({"policy": args.policy, **episode.to_dict()}, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
