"""Env throughput: each registered task played by its expert (steps/s), and ALFWorld against the stock wrapper."""

from __future__ import annotations

import tempfile
import time
from importlib import import_module
from pathlib import Path

import eppo_envs
from eppo_envs.benchmarks.experts import run_expert
from eppo_train.benchmarks.common import (
    BenchContext,
    Figure,
    Unavailable,
    failed,
    figure,
    need_module,
    section,
)

# The built-in task packages. eppo_envs registers those listed in its _BUILTIN_TASKS; importing the rest here
# makes a package that exists but is not yet listed show up too (or say why it does not import).
TASK_PACKAGES = ("example.guess_number", "alfworld", "webshop", "searchqa", "math", "code")


def registered_envs() -> tuple[list[str], list[Figure]]:
    """Every registered env id, and a failure row for each built-in package that does not import."""

    problems: list[Figure] = []
    for package in TASK_PACKAGES:
        try:
            import_module(f"eppo_envs.{package}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(f"eppo_envs.{package}"):
                continue  # not written yet: nothing to report, it simply is not a registered env
            problems.append(failed("envs", f"eppo_envs.{package}", "steps/s", "import", exc))
        except Exception as exc:  # a package being built may be broken right now: say so, measure the rest
            problems.append(failed("envs", f"eppo_envs.{package}", "steps/s", "import", exc))
    return list(eppo_envs.tasks()), problems


def cli_import(module: str) -> str:
    """`--import MODULE ` when a plain `eppo-envs` does not register the task (the examples), else nothing: the
    figure's command must rerun as written."""

    builtin = any(module == f"eppo_envs.{name}" or module.startswith(f"eppo_envs.{name}.")
                  for name in eppo_envs._BUILTIN_TASKS)
    return "" if builtin else f"--import {module} "


@section("envs", "env steps/s with the expert", "1-3 min")
def bench_envs(ctx: BenchContext) -> list[Figure]:

    env_ids, rows = registered_envs()
    env_ids = [e for e in env_ids if ctx.wants_env(e)]
    budget_s = ctx.size(45, 10)  # per env, all repetitions together: slow envs (ALFWorld's planner) get fewer episodes
    for env_id in env_ids:
        how = ""
        try:
            env = eppo_envs.make(env_id)
            split, module = env.unwrapped.eval_split, type(env.unwrapped).__module__
            env.close()
            t0 = time.perf_counter()
            run_expert(env_id, split, 1, first_seed=1000)  # untimed: builds caches, starts browsers/JVMs
            per_episode = time.perf_counter() - t0
            episodes = max(1, min(ctx.size(20, 3), int(budget_s / ctx.reps() / max(per_episode, 1e-3))))
            how = f"eppo-envs {cli_import(module)}expert {env_id} --split {split} --episodes {episodes}"
            runs = [run_expert(env_id, split, episodes) for _ in range(ctx.reps())]
            rows.append(figure("envs", f"{env_id} expert", [r["steps_per_s"] for r in runs], "steps/s", how,
                               success=runs[-1]["success_rate"], mean_steps=runs[-1]["mean_steps"]))
        except Exception as exc:
            rows.append(failed("envs", f"{env_id} expert", "steps/s", how or env_id, exc))
    if not rows:
        raise Unavailable("no env is registered")
    return rows


@section("alfworld_ref", "ALFWorld vs the stock alfworld TextWorld wrapper", "2-4 min")
def bench_alfworld_reference(ctx: BenchContext) -> list[Figure]:
    reference = need_module("eppo_envs.alfworld.reference", "the stock-wrapper reference")
    split, episodes = "valid_unseen", ctx.size(5, 2)
    how = (f"expert's commands, {split} seeds 0-{episodes - 1}, replayed on the same files: eppo/ALFWorld-v0 vs "
           "textworld.gym+AlfredDemangler, interleaved; resets (load+reset) and steps timed apart; cold/disk/warm: "
           "see docs/alfworld.md (python -m eppo_envs.alfworld.reference)")
    expert = reference.play_expert(split, episodes)  # the planner is timed on its own: it is not the env
    stock: list = []
    ours: dict[str, list] = {cache: [] for cache in reference.CACHE_STATES}
    with tempfile.TemporaryDirectory(prefix="eppo-bench-alfworld-") as tmp:
        games = reference.write_games(expert.played, Path(tmp), split)
        for _ in range(ctx.reps()):
            stock.append(reference.stock_replay(games))
            for cache in reference.CACHE_STATES:
                ours[cache].append(reference.ours_replay(games, cache))
    steps = sum(len(c) for _, c in expert.played)
    sec = "alfworld_ref"
    rows = [
        figure(sec, "ALFWorld stock textworld.gym + alfworld wrappers", [r.steps_per_s for r in stock], "steps/s", how,
               steps=steps),
        figure(sec, "ALFWorld stock resets (load + reset)", [r.resets_per_s for r in stock], "resets/s", how,
               resets=episodes),
    ]
    for cache, runs in ours.items():
        rows += [
            figure(sec, f"ALFWorld ours ({cache}), same games", [r.steps_per_s for r in runs], "steps/s", how,
                   steps=steps),
            figure(sec, f"ALFWorld ours ({cache}) resets", [r.resets_per_s for r in runs], "resets/s", how,
                   resets=episodes),
            figure(sec, f"ALFWorld ours ({cache}) / stock, steps", [o.steps_per_s / s.steps_per_s for o, s in
                                                                    zip(runs, stock, strict=True)], "ratio", how),
            figure(sec, f"ALFWorld ours ({cache}) / stock, resets", [o.resets_per_s / s.resets_per_s for o, s in
                                                                     zip(runs, stock, strict=True)], "ratio", how),
        ]
    plan_how = "time inside the expert's expert_action (fast-downward's planner) vs inside env reset/step, same episodes"
    rows += [
        figure(sec, "ALFWorld expert planner time per step", [1000 * expert.planner_s / max(expert.steps, 1)], "ms",
               plan_how, steps=expert.steps),
        figure(sec, "ALFWorld env time per expert step (fast engine)", [1000 * expert.env_s / max(expert.steps, 1)],
               "ms", plan_how, steps=expert.steps),
    ]
    return rows
