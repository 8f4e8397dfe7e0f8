"""Model-side throughput: HF rollout generation (tokens/s, env share of wall time) and the learner update (tokens/s).

Learner batches are synthetic (seeded random token ids, a fixed prompt/response split, +-1 advantages): the update
costs the same whatever the tokens are, and a fixed shape makes the figure comparable across machines and with
TRL (see trl_ref.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eppo_train.benchmarks.common import BenchContext, Figure, failed, figure, note, section
from eppo_train.config import load_config
from eppo_train.core.records import Sample

if TYPE_CHECKING:
    from eppo_train.config import Config


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

    rng = random.Random(seed)
    out = []
    for r in range(shape.rows):
        n = shape.prompt + shape.completion
        out.append(Sample(task="bench", group_id="bench|0", episode_id=f"bench#{r}", turn_index=-1,
                          input_ids=[rng.randrange(100, vocab) for _ in range(n)],
                          loss_mask=[0] * shape.prompt + [1] * shape.completion, old_logprobs=[0.0] * n,
                          reward=float(r % 2), advantage=1.0 if r % 2 else -1.0))
    return out


def learner_config(model: str, overrides: tuple[str, ...]) -> Config:

    return load_config("default", (f"model.name={model}", "run.seed=0", *overrides))


# "comparable" settings: what TRL's GRPOTrainer does by default on CPU (full fine-tune, fp32, one pass, one step).
FULL_FP32 = ("learner.train_top_layers=0", "learner.bf16_autocast_cpu=false", "model.dtype=float32",
             "learner.epochs=1", "learner.mini_batches=1", "algo.name=grpo")
_cache: dict[tuple, list[float]] = {}  # (model, shape, overrides) -> tokens/s samples (the trl section reuses them)


def measure_learner(model: str, shape: BatchShape, overrides: tuple[str, ...], reps: int,
                    section: str = "learner", label: str = "") -> list[float]:
    """Tokens (prompt + completion, every row) per second of `Learner.train_step`, one value per repetition.

    The first step is run untimed (allocator and optimizer-state warm-up), as TRL's is in trl_ref.py. A progress
    line (under `section`, naming `label`) at the load and after every step: on the default model a section takes
    minutes, which would otherwise print nothing until its figures.
    """
    key = (model, shape, overrides, reps)
    if key in _cache:
        return _cache[key]
    import time

    from eppo_train.learner.learner import Learner

    what = f"{model}, {label}" if label else model
    note(section, f"{what}: loading the learner")
    cfg = learner_config(model, (*overrides, f"learner.micro_batch_tokens={max(shape.tokens, 16)}"))
    learner = Learner(cfg, device="cpu")
    vocab = learner.model.config.vocab_size
    learner.train_step(synthetic_batch(shape, vocab, seed=99))
    note(section, f"{what}: warm-up step done")
    out = []
    for rep in range(reps):
        batch = synthetic_batch(shape, vocab, seed=rep)
        t0 = time.perf_counter()
        learner.train_step(batch)
        out.append(shape.tokens / (time.perf_counter() - t0))
        note(section, f"{what}: repetition {rep + 1}/{reps}, {out[-1]:,.0f} tokens/s")
    _cache[key] = out
    return out


UNCACHED = ("learner.cache_frozen=false",)  # the default config with every pass through the frozen layers too


@section("learner", "learner tokens/s (fwd+bwd+AdamW)", "3 min")
def bench_learner(ctx: BenchContext) -> list[Figure]:
    model = ctx.model
    shape = shape_for(ctx)
    rows = []
    measured: dict[tuple[str, ...], list[float]] = {}
    for label, overrides in (("default config (top 6 layers, bf16 autocast)", ()),
                             ("default config, frozen layers recomputed (cache_frozen=false)", UNCACHED),
                             ("full fine-tune, fp32", FULL_FP32)):
        how = (f"Learner.train_step, --config default --set model.name={model} "
               + " ".join(f"--set {o}" for o in overrides) + f"; {shape.describe()}")
        try:
            measured[overrides] = measure_learner(model, shape, overrides, ctx.reps(), label=label)
            rows.append(figure("learner", f"{model}: {label}", measured[overrides], "tokens/s", how,
                               tokens=shape.tokens))
        except Exception as exc:
            rows.append(failed("learner", f"{model}: {label}", "tokens/s", how, exc))
    if () in measured and UNCACHED in measured:
        # what the frozen-layer cache buys; 1.0 where nothing is frozen (a model with <= 6 blocks)
        ratio = [c / u for c, u in zip(sorted(measured[()]), sorted(measured[UNCACHED]), strict=True)]
        rows.append(figure("learner", f"{model}: frozen-layer cache, cached / recomputed", ratio, "ratio",
                           "the two default-config figures above; ratio of the sorted repetitions"))
    return rows


SYNC_SETUPS = (("default config (top 6 layers)", ()), ("full fine-tune", ("learner.train_top_layers=0",)),
               ("LoRA r=16, every projection", ("learner.train_top_layers=0", "learner.lora.r=16")))


@section("sync", "weight sync learner -> engine: bytes and seconds per sync", "2 min")
def bench_sync(ctx: BenchContext) -> list[Figure]:
    """One weight sync, learner -> HF engine in this process (`LocalWorkers.sync_weights`: the tensors that cross
    to the engine, LoRA's adapters merged on the engine's side). Ray adds one object-store copy per node."""
    import time

    from eppo_train.learner.workers import LocalWorkers

    rows = []
    for label, overrides in SYNC_SETUPS:
        how = (f"LocalWorkers.sync_weights, --config default --set model.name={ctx.model} --set model.backend=hf "
               + " ".join(f"--set {o}" for o in overrides) + " (the second sync: LoRA's first also sends the base)")
        try:
            note("sync", f"{label}: loading the learner and the engine")
            cfg = learner_config(ctx.model, ("ray.enabled=false", "model.backend=hf", *overrides))
            workers = LocalWorkers(cfg)
            workers.sync_weights()
            seconds, sent = [], 0.0
            for _ in range(ctx.reps()):
                t0 = time.perf_counter()
                workers.sync_weights()
                seconds.append(time.perf_counter() - t0)
                sent = workers.last_sync["weight_sync_bytes"]
            workers.close()
            rows.append(figure("sync", f"{ctx.model}: {label}", seconds, "s", how, bytes=sent))
        except Exception as exc:
            rows.append(failed("sync", f"{ctx.model}: {label}", "s", how, exc))
    return rows
