"""Model-side throughput: HF rollout generation (tokens/s, env share of wall time) and the learner update (tokens/s).

Learner batches are synthetic (seeded random token ids, a fixed prompt/response split, +-1 advantages): the update
costs the same whatever the tokens are, and a fixed shape makes the figure comparable across machines and with
TRL (see trl_ref.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from eppo_train.benchmarks.common import BenchContext, Figure, Unavailable, failed, figure, section


@dataclass(frozen=True)
class BatchShape:
    rows: int = 4
    prompt: int = 256
    completion: int = 256

    @property
    def tokens(self) -> int:
        return self.rows * (self.prompt + self.completion)

    def describe(self) -> str:
        return f"{self.rows} x ({self.prompt} prompt + {self.completion} completion) tokens"


def shape_for(ctx: BenchContext) -> BatchShape:
    return BatchShape(2, 32, 32) if ctx.quick else BatchShape()


def synthetic_batch(shape: BatchShape, vocab: int, seed: int = 0) -> list:
    """Learner samples of the given shape; half the rows get advantage +1, half -1 (a GRPO group)."""
    from eppo_train.records import Sample

    rng = random.Random(seed)
    out = []
    for r in range(shape.rows):
        n = shape.prompt + shape.completion
        out.append(Sample(task="bench", group_id="bench|0", episode_id=f"bench#{r}", turn_index=-1,
                          input_ids=[rng.randrange(100, vocab) for _ in range(n)],
                          loss_mask=[0] * shape.prompt + [1] * shape.completion, old_logprobs=[0.0] * n,
                          reward=float(r % 2), advantage=1.0 if r % 2 else -1.0))
    return out


def learner_config(model: str, overrides: tuple[str, ...]):
    from eppo_train.config import load_config

    return load_config("default", (f"model.name={model}", "run.seed=0", *overrides))


# "comparable" settings: what TRL's GRPOTrainer does by default on CPU (full fine-tune, fp32, one pass, one step).
FULL_FP32 = ("learner.train_top_layers=0", "learner.bf16_autocast_cpu=false", "model.dtype=float32",
             "learner.epochs=1", "learner.mini_batches=1", "algo.name=grpo")
_cache: dict[tuple, list[float]] = {}  # (model, shape, overrides) -> tokens/s samples (the trl section reuses them)


def measure_learner(model: str, shape: BatchShape, overrides: tuple[str, ...], reps: int) -> list[float]:
    """Tokens (prompt + completion, every row) per second of `Learner.train_step`, one value per repetition.

    The first step is run untimed (allocator and optimizer-state warm-up), as TRL's is in trl_ref.py.
    """
    key = (model, shape, overrides, reps)
    if key in _cache:
        return _cache[key]
    import time

    from eppo_train.learner import Learner

    cfg = learner_config(model, (*overrides, f"learner.micro_batch_tokens={max(shape.tokens, 16)}"))
    learner = Learner(cfg, device="cpu")
    vocab = learner.model.config.vocab_size
    learner.train_step(synthetic_batch(shape, vocab, seed=99))
    out = []
    for rep in range(reps):
        batch = synthetic_batch(shape, vocab, seed=rep)
        t0 = time.perf_counter()
        learner.train_step(batch)
        out.append(shape.tokens / (time.perf_counter() - t0))
    _cache[key] = out
    return out


@section("learner", "learner tokens/s (fwd+bwd+AdamW)", "2 min")
def bench_learner(ctx: BenchContext) -> list[Figure]:
    model = ctx.model
    shape = shape_for(ctx)
    rows = []
    for label, overrides in (("default config (top 6 layers, bf16 autocast)", ()),
                             ("full fine-tune, fp32", FULL_FP32)):
        how = (f"Learner.train_step, --config default --set model.name={model} "
               + " ".join(f"--set {o}" for o in overrides) + f"; {shape.describe()}")
        try:
            samples = measure_learner(model, shape, overrides, ctx.reps())
            rows.append(figure("learner", f"{model}: {label}", samples, "tokens/s", how, tokens=shape.tokens))
        except Exception as exc:
            rows.append(failed("learner", f"{model}: {label}", "tokens/s", how, exc))
    return rows


def rollout_problems(ctx: BenchContext) -> list:
    """One problem per task (the first registered env of each), seeds 0..; the example task only if alone."""
    from eppo_envs.core.registry import task_spec
    from eppo_train.benchmarks.envs import registered_envs
    from eppo_train.rollout import Problem

    env_ids = [e for e in registered_envs()[0] if ctx.wants_env(e)]
    seen: dict[str, str] = {}
    for env_id in env_ids:
        seen.setdefault(task_spec(env_id).task, env_id)
    chosen = [e for e in seen.values() if not e.startswith("example/")] or list(seen.values())
    if not chosen:
        raise Unavailable("no env is registered")
    import eppo_envs

    problems = []
    for env_id in chosen[: ctx.size(5, 2)]:
        env = eppo_envs.make(env_id)
        problems.append(Problem(env_id, env.unwrapped.eval_split, 0))
        env.close()
    return problems


@section("rollout", "HF rollout generation tokens/s and env share", "2-4 min")
def bench_rollout(ctx: BenchContext) -> list[Figure]:
    model = ctx.model
    from eppo_train.envpool import LocalEnvPool
    from eppo_train.policy.hf import HFPolicy
    from eppo_train.rollout import RolloutConfig, run_rollout

    problems = rollout_problems(ctx)
    cfg = RolloutConfig(group_size=2, max_turns=ctx.size(3, 2), max_new_tokens=ctx.size(48, 8), temperature=1.0,
                        seed=0, progress=False)
    policy = HFPolicy(model, dtype="bfloat16")
    how = (f"run_rollout, HFPolicy({model!r}, bf16), LocalEnvPool, {len(problems)} problems x G={cfg.group_size} "
           f"({', '.join(p.env_id for p in problems)}), {cfg.max_turns} turns, {cfg.max_new_tokens} new tokens/turn")
    stats = []
    with LocalEnvPool() as pool:
        run_rollout(policy, pool, problems[:1], RolloutConfig(group_size=1, max_turns=1, max_new_tokens=4,
                                                              progress=False))  # warm-up: env builds, first call
        for rep in range(ctx.reps()):
            cfg.seed = rep
            stats.append(run_rollout(policy, pool, problems, cfg).stats)
    policy.close()
    last = stats[-1]
    return [
        figure("rollout", f"{model}: generation tokens/s", [s["tokens_per_second"] for s in stats], "tokens/s", how,
               tokens=last["tokens_generated"], turns=last["turns"], wall_s=round(last["wall_seconds"], 2)),
        figure("rollout", f"{model}: rollout tokens/s (wall)",
               [s["tokens_generated"] / s["wall_seconds"] for s in stats], "tokens/s", how),
        figure("rollout", "env share of rollout wall time", [s["env_share"] for s in stats], "share", how,
               env_s=round(last["env_seconds"], 2)),
    ]
