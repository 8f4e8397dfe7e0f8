"""Memory: where the driver's memory goes, step by step, and each process's peak RSS over make-train's RL workload.

Two measurements, each in a fresh child process (the bench's own process holds the other sections' models):

- `breakdown`: the driver's RSS after each step of a make-train RL start, in the order a run takes them: the
  interpreter with torch, transformers and this package; each task's data (its first env made, reset and stepped
  once with its expert's action: ALFWorld's games and grammar, WebShop's catalogue and search index, SearchQA's
  BM25 index, ...); the rest of an RL batch's env instances (problems x G per task); the learner's model; the
  learner after one step on a batch of make-train's size (AdamW's state, the frozen-layer cache, the step's freed
  blocks). Each figure is the step's increase of RSS; the learner's step also gives its peak.
- `rl`: `eppo-train --config pipeline` for a few RL iterations (no SFT, no evaluation): every iteration's memory
  account (report/memory.py) from its metrics; the figure is each component's largest per-iteration peak.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eppo_train.benchmarks.common import BenchContext, Figure, Unavailable, failed, figure, note, section
from eppo_train.benchmarks.model import BatchShape, synthetic_batch
from eppo_train.config import load_config
from eppo_train.report.memory import MemoryAccount, flatness, release
from eppo_train.report.metrics import read_metrics

SECTION = "memory"


def _gb(b: float) -> float:
    return round(b / 1e9, 3)


def breakdown(model: str, quick: bool) -> list[dict]:
    """The driver's RSS (bytes) after each step; run in a fresh process (`python -m ... breakdown`)."""
    import gc

    import psutil

    me = psutil.Process()
    steps: list[dict] = []

    def mark(what: str, **extra: float) -> None:
        gc.collect()
        steps.append({"step": what, "rss": me.memory_info().rss, **extra})

    mark("interpreter, this package's light modules")
    import gymnasium as gym
    import torch  # noqa: F401  (measured: what importing it costs)
    import transformers  # noqa: F401

    from eppo_train.learner.learner import Learner
    from eppo_train.rollout.task_slots import prepare_tasks

    mark("torch, transformers, eppo_train, eppo_envs imported")
    cfg = load_config("pipeline", [f"model.name={model}", "sft.steps=0"])
    slots = prepare_tasks(cfg)
    mark("the config and task slots")
    envs = []
    for task in cfg.env.tasks:
        env = gym.make(task.id, **task.kwargs)
        env.reset(seed=0, options={"split": "train"})
        env.step(env.unwrapped.expert_action())
        envs.append(env)
        mark(f"task data: {task.name or task.id} (first env, reset, one expert step)")
    for task in cfg.env.tasks:
        for i in range(1, 2 if quick else task.problems * cfg.rollout.group_size):
            env = gym.make(task.id, **task.kwargs)
            env.reset(seed=i, options={"split": "train"})
            envs.append(env)
    mark(f"the RL batch's other env instances ({len(envs)} in all)")
    learner = Learner(cfg)
    mark(f"learner: {model} loaded ({cfg.model.dtype}), top {cfg.learner.train_top_layers} blocks trainable")
    shape = BatchShape(4, 64, 64) if quick else BatchShape(80, 448, 224)  # ~54k tokens: make-train's RL batch
    batch = synthetic_batch(shape, learner.model.config.vocab_size)
    account = MemoryAccount()
    account.sample()
    learner.train_step(batch)
    peak = account.sample().peak["driver"]
    mark(f"learner after one step of {shape.describe()} (AdamW state; the step's blocks not yet trimmed)", peak=peak)
    release()
    mark("the same after release() (gc + malloc_trim)")
    del slots
    return steps


def _child(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)


@section(SECTION, "RSS of the driver step by step; peak RSS per process over make-train's RL iterations",
         "~8 min")
def run(ctx: BenchContext) -> list[Figure]:
    model = "tiny" if ctx.quick or ctx.model == "tiny" else ctx.model
    figures: list[Figure] = []
    how = f"python -m eppo_train.benchmarks.memory breakdown {model}{' --quick' if ctx.quick else ''}"
    try:
        out = _child(["-m", "eppo_train.benchmarks.memory", "breakdown", model, *(["--quick"] if ctx.quick else [])],
                     1800)
        if out.returncode != 0:
            raise Unavailable(f"breakdown failed: {(out.stderr.strip().splitlines() or ['?'])[-1][:200]}")
        steps = json.loads(out.stdout.strip().splitlines()[-1])
        for before, step in zip(steps, steps[1:], strict=False):
            extra = {"rss_gb": _gb(step["rss"])}
            if "peak" in step:
                extra["peak_gb"] = _gb(step["peak"])
            figures.append(figure(SECTION, f"driver +{step['step']}", [_gb(step["rss"] - before["rss"])], "GB", how,
                                  **extra))
    except Exception as exc:  # noqa: BLE001  (the rl part may still run)
        figures.append(failed(SECTION, "driver breakdown", "GB", how, exc))
    figures += _rl(ctx, model)
    return figures


def _rl(ctx: BenchContext, model: str) -> list[Figure]:
    iterations = 2 if ctx.quick else 4
    with tempfile.TemporaryDirectory(prefix="eppo-bench-memory-") as tmp:
        sets = [f"model.name={model}", f"run.out_dir={tmp}", f"run.iterations={iterations}", "sft.steps=0",
                "run.eval_every=0", "run.plots=false", f"run.save_every={iterations}"]
        if model == "tiny":
            sets.append("model.backend=hf")  # vLLM's CPU attention has no kernel for its head size
        args = ["-m", "eppo_train.cli", "--config", "pipeline", *(a for s in sets for a in ("--set", s))]
        how = "eppo-train --config pipeline " + " ".join(f"--set {s}" for s in sets if not s.startswith("run.out"))
        note(SECTION, f"{iterations} RL iterations of the pipeline config ({model})")
        t0 = time.perf_counter()
        out = _child(args, 3600)
        if out.returncode != 0:
            return [failed(SECTION, "make-train RL iterations", "GB", how,
                           RuntimeError((out.stderr.strip().splitlines() or ["?"])[-1][:200]))]
        records = read_metrics(Path(tmp) / "pipeline")
    comps = sorted({k[4:-8] for r in records for k in r if k.startswith("mem_") and k.endswith("_peak_gb")})
    figures = []
    for comp in comps:
        peaks = [float(r.get(f"mem_{comp}_peak_gb") or 0.0) for r in records]
        ends = [round(float(r.get(f"mem_{comp}_gb") or 0.0), 3) for r in records]
        figures.append(figure(SECTION, f"peak RSS, {comp}, RL iterations 1-{len(records)}", [max(peaks)], "GB", how,
                              per_iteration_peak_gb=[round(p, 3) for p in peaks], per_iteration_end_gb=ends,
                              seconds=round(time.perf_counter() - t0, 1)))
    flat = flatness(records, after=1)
    if flat is not None:
        figures.append(figure(SECTION, f"total RSS slope, iterations 2-{len(records)}",
                              [flat["slope_mb_per_iteration"]], "MB/iteration", how,
                              max_deviation_pct=round(flat["max_deviation_pct"], 2)))
    return figures


if __name__ == "__main__":  # the child: python -m eppo_train.benchmarks.memory breakdown MODEL [--quick]
    if len(sys.argv) >= 3 and sys.argv[1] == "breakdown":
        print(json.dumps(breakdown(sys.argv[2], "--quick" in sys.argv)))
