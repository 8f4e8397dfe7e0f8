"""Env throughput: each registered task played by its expert (steps/s), and ALFWorld against the stock wrapper."""

from __future__ import annotations

from importlib import import_module

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
    import eppo_envs

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


@section("envs", "env steps/s with the expert", "1-3 min")
def bench_envs(ctx: BenchContext) -> list[Figure]:
    import eppo_envs
    from eppo_envs.cli import run_expert

    env_ids, rows = registered_envs()
    episodes = ctx.size(8, 2)
    for env_id in env_ids:
        how = ""
        try:
            env = eppo_envs.make(env_id)
            split = env.unwrapped.eval_split
            env.close()
            how = f"eppo-envs expert {env_id} --split {split} --episodes {episodes}"
            runs = [run_expert(env_id, split, episodes) for _ in range(ctx.reps())]
            rows.append(figure("envs", f"{env_id} expert", [r["steps_per_s"] for r in runs], "steps/s", how,
                               success=runs[-1]["success_rate"], mean_steps=runs[-1]["mean_steps"]))
        except Exception as exc:
            rows.append(failed("envs", f"{env_id} expert", "steps/s", how or env_id, exc))
    if not rows:
        raise Unavailable("no env is registered")
    return rows


@section("alfworld_ref", "ALFWorld vs the stock alfworld TextWorld wrapper", "1 min")
def bench_alfworld_reference(ctx: BenchContext) -> list[Figure]:
    reference = need_module("eppo_envs.alfworld.reference", "the stock-wrapper reference")
    measure = getattr(reference, "compare", None) or getattr(reference, "measure", None)
    if measure is None:
        raise Unavailable("eppo_envs.alfworld.reference has no compare()/measure() function")
    games = ctx.size(4, 1)
    runs = [measure(games=games) for _ in range(ctx.reps())]
    how = f"eppo_envs.alfworld.reference.{measure.__name__}(games={games})"
    ours = [r["ours_steps_per_s"] for r in runs]
    stock = [r["stock_steps_per_s"] for r in runs]
    return [
        figure("alfworld_ref", "ALFWorld (ours), expert on the same games", ours, "steps/s", how),
        figure("alfworld_ref", "ALFWorld stock alfworld TextWorld wrapper", stock, "steps/s", how),
        figure("alfworld_ref", "ALFWorld ours / stock", [o / s for o, s in zip(ours, stock, strict=True)], "ratio",
               how, steps=runs[-1].get("steps")),
    ]
