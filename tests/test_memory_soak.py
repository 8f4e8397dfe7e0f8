"""Soak: 100 RL iterations of a tiny model on the five real tasks in one process, its memory sampled every iteration
(report/memory.py, from the run's own metrics.jsonl), must not grow.

The bound: after a warm-up of 10 iterations (the envs' caches, the tokenizer's, the allocator's first arenas fill),
the least-squares slope of the run's total RSS is at most `SLOPE_BOUND_MB` a run iteration, and no iteration's total
is more than 5 % off the mean. 0.5 MB an iteration is 18 MB over make-train's 36 iterations: an object of the
iteration (a batch's samples, its episodes, the learner's cached states) kept alive each time would be far more.
Measured on the branch that added it: see docs/bench.md, "Memory".
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eppo_train.report.memory import flatness

ITERATIONS = 100
WARMUP = 10
SLOPE_BOUND_MB = 0.5  # a run iteration
DEVIATION_BOUND_PCT = 5.0

# The tiny random model (HF generation: vLLM has no CPU kernel for its head size) on the pipeline's five tasks, two
# turns each, one problem x G=2 a task: every env's reset, step, observation and reward runs each iteration.
SOAK_CONFIG = """
run: {name: soak, save_every: 1000, keep_checkpoints: 1, plots: false}
model: {name: tiny, backend: hf}
env:
  tasks:
    - {id: eppo/ALFWorld-v0, name: alfworld, problems: 1, max_turns: 2, kwargs: {show_admissible: compact}}
    - {id: eppo/WebShop-v0, name: webshop, problems: 1, max_turns: 2}
    - {id: eppo/SearchQA-v0, name: searchqa, problems: 1, max_turns: 2}
    - {id: eppo/MathTool-v0, name: math, problems: 1, max_turns: 2, kwargs: {level: 1}}
    - {id: eppo/Code-v0, name: code, problems: 1, max_turns: 2, kwargs: {level: [2, 3]}}
rollout: {group_size: 2, max_new_tokens: 12, max_total_tokens: 1024, progress: false}
algo: {name: eppo}
pacing: {warmup: 1}
learner: {lr: 1.0e-3, micro_batch_tokens: 2048}
ray: {enabled: false}
"""


@pytest.mark.slow
def test_rss_stays_flat_over_100_iterations_on_the_real_tasks(tmp_path: Path):
    config = tmp_path / "soak.yaml"
    config.write_text(SOAK_CONFIG)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[1]),
                                                                      os.environ.get("PYTHONPATH")]))}
    # a process of its own: the account measures the command's process tree, not pytest's
    proc = subprocess.run([sys.executable, "-m", "eppo_train.cli", "--config", str(config),
                           "--set", f"run.out_dir={tmp_path}", "--set", f"run.iterations={ITERATIONS}"], env=env, capture_output=True, text=True,
                          timeout=3600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "soak" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == ITERATIONS
    totals = [round(r["mem_total_gb"], 3) for r in records]
    flat = flatness(records, after=WARMUP)
    said = (f"total RSS (GB) by iteration: {totals}; after {WARMUP}: slope {flat['slope_mb_per_iteration']:+.2f} MB "
            f"an iteration, largest deviation {flat['max_deviation_pct']:.1f} %")
    print(said)
    assert flat["slope_mb_per_iteration"] <= SLOPE_BOUND_MB, said
    assert flat["max_deviation_pct"] <= DEVIATION_BOUND_PCT, said
    # the driver's own share flat too (a leak there could hide behind a shrinking helper process)
    driver = flatness(records, key="mem_driver_gb", after=WARMUP)
    assert driver["slope_mb_per_iteration"] <= SLOPE_BOUND_MB, said
