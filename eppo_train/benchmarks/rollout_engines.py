"""The make-train rollout workload through the vLLM engine and through the plain HF path, in one run.

Workload: iteration 0 of the `pipeline` config (`make train`'s RL stage): its five tasks with their levels and turn
limits, its problems per task, G=4, its token budgets, temperature 1, one `run_rollout` call per repetition with
every live episode of the iteration in each engine call. Repetitions alternate the engines (vLLM, HF, vLLM, HF, ...)
so both see the same machine load; the ratio is the median of the per-repetition ratios.

"Fraction of the matmul rate": generation FLOPs (2 x parameters x tokens the model processed for the new
tokens, prompts excluded: a lower bound) per second, over the rate of a large matmul measured in the same run, in the
dtype the engines generate in (`auto`: bf16 where the hardware has it natively, else float32; policy/precision.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from eppo_train.benchmarks.common import BenchContext, Figure, Unavailable, failed, figure, note, section
from eppo_train.config import load_config
from eppo_train.policy.engine import EngineSpec, make_engine
from eppo_train.policy.precision import resolve_dtype
from eppo_train.report.ticks import RolloutTick, listen
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.loop import run_rollout
from eppo_train.rollout.task_slots import prepare_tasks, rollout_config, train_problems

if TYPE_CHECKING:
    from eppo_train.config import Config
    from eppo_train.rollout.loop import Problem, RolloutConfig


def matmul_flops(n: int = 1024, reps: int = 5, dtype: str = "bfloat16") -> float:
    """FLOP/s of an n x n x n matmul in `dtype` on this machine (median of `reps`, after one warm-up)."""
    import torch

    a = torch.randn(n, n, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, dtype=getattr(torch, dtype))
    a @ b
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def make_train_workload(
    model: str, quick: bool, wants_env: Callable[[str], bool] = lambda env_id: True
) -> tuple[Config, RolloutConfig, list[Problem]]:
    """(rollout config, problems, slots) of the pipeline's first RL iteration; `wants_env` (bench --envs) keeps only
    the tasks whose env id it accepts."""

    overrides = [f"model.name={model}"]
    if quick:
        overrides += ["rollout.max_turns=2", "rollout.max_new_tokens=16"]
    cfg = load_config("pipeline", overrides)
    slots = [s for s in prepare_tasks(cfg) if wants_env(s.cfg.id) or wants_env(s.env_id)]
    if not slots:
        raise Unavailable("no task of the make-train workload matches --envs")
    if quick:
        slots = slots[:2]
    rc = replace(rollout_config(cfg, slots, 0), progress=False)
    return cfg, rc, train_problems(cfg, slots, 0)


def _turn_lines(where: str) -> Callable[[RolloutTick], None]:
    """One progress line per turn of a repetition (an HF repetition of the make-train workload takes ~13 min)."""
    def tick(t: RolloutTick) -> None:
        if t.final:  # the last turn's line says it already
            return
        rate = t.tokens / t.generation_seconds if t.generation_seconds > 0 else 0.0
        note("rollout", f"{where}: turn {t.turn}, episodes {t.done}/{t.total}, {t.tokens:,} new tokens, "
                        f"{rate:.0f} new tok/s")

    return tick


@section("rollout", "make-train rollout: new tokens/s, vLLM vs HF, and share of the matmul rate", "25-35 min (HF is most of it)")
def bench_rollout(ctx: BenchContext) -> list[Figure]:

    cfg, rc, problems = make_train_workload(ctx.model, ctx.quick, ctx.wants_env)
    dtype = resolve_dtype(cfg.model.generator_dtype)
    tasks = sorted({p.env_id for p in problems})
    how = (f"run_rollout on the pipeline config's iteration 0 ({len(problems)} problems x G={rc.group_size} over "
           f"{', '.join(tasks)}; {rc.max_turns} turns, {rc.max_new_tokens} new tokens/turn), model {ctx.model} {dtype}; "
           "engines alternate per repetition")
    engines, rows = {}, []
    for backend in ("vllm", "hf"):
        note("rollout", f"starting the {backend} engine ({cfg.model.name}, {dtype})")
        try:
            engines[backend] = make_engine(EngineSpec(cfg.model.name, backend, dtype,
                                                      max(rc.max_total_tokens, 256)))
        except Exception as exc:  # noqa: BLE001  (one engine missing must not hide the other's figure)
            rows.append(failed("rollout", f"{backend}: new tokens/s", "tokens/s", how, exc))
    stats: dict[str, list[dict]] = {b: [] for b in engines}
    with LocalEnvPool() as pool:
        for policy in engines.values():  # warm-up: env builds, first engine call
            run_rollout(policy, pool, problems[:1], replace(rc, group_size=1, max_turns=1, max_new_tokens=4))
        for rep in range(ctx.reps()):
            for backend, policy in engines.items():
                where = f"{backend} repetition {rep + 1}/{ctx.reps()}"
                with listen(_turn_lines(where)):
                    stats[backend].append(run_rollout(policy, pool, problems, replace(rc, seed=rep)).stats)
    params = 0
    if "hf" in engines:
        params = sum(p.numel() for p in engines["hf"].model.parameters())
    for policy in engines.values():
        policy.close()
    peak = matmul_flops(dtype=dtype)
    for backend, runs in stats.items():
        rates = [s["tokens_generated"] / s["generation_seconds"] for s in runs]
        last = runs[-1]
        rows.append(figure("rollout", f"{backend}: new tokens/s", rates, "tokens/s", how,
                           tokens=last["tokens_generated"], turns=last["turns"], episodes=last["episodes"],
                           wall_s=round(last["wall_seconds"], 1), env_share=round(last["env_share"], 3)))
        if params:
            rows.append(figure("rollout", f"{backend}: share of the {dtype} matmul rate",
                               [2 * params * r / peak for r in rates], "share", how,
                               matmul_gflops=round(peak / 1e9, 1), parameters=params))
    if len(stats) == 2:
        ratios = [v["tokens_generated"] / v["generation_seconds"] / (h["tokens_generated"] / h["generation_seconds"])
                  for v, h in zip(stats["vllm"], stats["hf"], strict=True)]
        rows.append(figure("rollout", "vllm / hf new tokens/s (same run)", ratios, "x", how))
    return rows
