"""Learner ranks as spawned processes joined in a gloo group: the distributed learner against the one-process
reference on the same batch (tests/test_distributed.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import torch

from eppo_train.config import load_config
from eppo_train.learner.distributed import Group, free_address
from eppo_train.learner.learner import Learner
from eppo_train.policy.models import load_model, tiny_model_dir
from tests.test_trainer_learner import make_batch


def learner(overrides: list[str], group=None) -> Learner:
    cfg = load_config("tiny", ["learner.lr=1e-3", "pacing.warmup=0", *overrides])
    return Learner(cfg, load_model(str(tiny_model_dir())), group=group)


def summary(report) -> dict:
    return {"metrics": dict(report.metrics), "per_task": {t: dict(v) for t, v in report.per_task.items()},
            "pace": None if report.pace is None else dict(report.pace.scale)}


def run_steps(lrn: Learner, steps: int, batch_seed: int = 0, n: int = 12) -> dict:
    """`steps` updates on the same batch; the reports, the whole trainable weights after, the pacer's state."""
    reports = [summary(lrn.train_step(make_batch(seed=batch_seed, n=n))) for _ in range(steps)]
    return {"reports": reports, "weights": lrn.trainable_weights(), "pacer": lrn.pacer.state_dict(),
            "sampling": lrn.sampling_weights()}


def _rank(rank: int, world: int, address: str, jobs: list[dict], out: str) -> None:
    torch.set_num_threads(1)
    group = Group(rank, world, address, backend="gloo")
    results = []
    try:
        for job in jobs:
            lrn = learner(job["overrides"], group)
            if job.get("load"):
                lrn.load(Path(job["load"]))
            result = run_steps(lrn, job["steps"], n=job.get("n", 12))
            if job.get("save"):
                lrn.save(Path(job["save"]))
            results.append(result)
    finally:
        group.close()
    if rank == 0:
        torch.save(results, out)


def run_ranks(world: int, jobs: list[dict], out: Path, timeout: float = 900) -> list[dict]:
    """Each job (a learner's overrides, steps, optional checkpoint to save or load) run by `world` spawned ranks in
    turn; rank 0's results."""
    ctx = mp.get_context("spawn")
    address = free_address()
    env = {"OMP_NUM_THREADS": "1"}
    os.environ.update(env)
    procs = [ctx.Process(target=_rank, args=(r, world, address, jobs, str(out))) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "a rank hung"
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return torch.load(out, weights_only=False)


PEAK_SCRIPT = """
import resource, sys, json
import torch
from eppo_train.config import load_config
from eppo_train.learner.learner import Learner
from eppo_train.benchmarks.model import BatchShape, synthetic_batch
model, tokens = sys.argv[1], int(sys.argv[2])
overrides = sys.argv[3:]
cfg = load_config("default", [f"model.name={model}", f"learner.micro_batch_tokens={tokens}", *overrides])
learner = Learner(cfg, device="cpu")
batch = synthetic_batch(BatchShape(rows=tokens // 512, prompt=256, completion=256), learner.model.config.vocab_size)
learner.train_step(batch)
print(json.dumps({"peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def measured_peak(model: str, tokens: int, overrides: list[str]) -> int:
    """Peak RSS of a fresh process that builds the learner and takes one step on `tokens` tokens (rows of 512)."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, model, str(tokens), *overrides], cwd=root, env=env,
                          capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_bytes"])
