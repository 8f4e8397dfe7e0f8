"""Run metrics: one JSON line per iteration (`metrics.jsonl`) and the same numbers as TensorBoard scalars.

A line looks like `{"step": 3, "loss": ..., "rollout_tokens_per_s": ..., "tasks": {"math": {"success": ...}},
"events": {"crossovers": [["a", "b"]], "spikes": ["math"]}}`. Checkpoints record the file's byte offset; a resumed
run truncates the file back to it (and TensorBoard purges later steps), so the metrics continue exactly from the
checkpoint, without the half-finished iteration the crash left behind.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None  # JSON has no NaN; a missing point plots as a gap
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def _tag(key: str) -> str:
    """The TensorBoard tag of an iteration scalar: memory (report/memory.py) under `memory/`, the rest `train/`."""
    if key.startswith(("mem_", "cuda_")):
        return f"memory/{key.removeprefix('mem_')}"
    return f"train/{key}"


class MetricsWriter:
    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_offset: int | None = None,
                 resume_step: int | None = None) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_offset is not None and self.path.exists():
            with open(self.path, "r+b") as f:
                f.truncate(resume_offset)
        elif resume_offset is None:
            self.path.write_text("")
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops events a crashed run wrote after the checkpoint
            purge = resume_step + 1 if resume_step is not None else None
            self.tb = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=purge)

    def offset(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def log(self, step: int, scalars: dict[str, float], tasks: dict[str, dict[str, float]],
            events: dict[str, list] | None = None) -> dict:
        record = {"step": step, **scalars, "tasks": tasks, "events": events or {}}
        with open(self.path, "a") as f:
            f.write(json.dumps(_finite(record)) + "\n")
        if self.tb is not None:
            for k, v in scalars.items():
                if isinstance(v, int | float) and math.isfinite(v):
                    self.tb.add_scalar(_tag(k), v, step)
            for task, values in tasks.items():
                for k, v in values.items():
                    if isinstance(v, int | float) and math.isfinite(v):
                        self.tb.add_scalar(f"{task}/{k}", v, step)
            self.tb.flush()
        return record

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def task_means(records: list[dict], keys: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per task, the mean over the iterations that logged it of each of `keys` (a task or key never logged is
    left out)."""
    sums: dict[str, dict[str, list[float]]] = {}
    for r in records:
        for task, values in r.get("tasks", {}).items():
            for k in keys:
                v = values.get(k)
                if isinstance(v, int | float) and math.isfinite(v):
                    sums.setdefault(task, {}).setdefault(k, []).append(float(v))
    return {t: {k: sum(v) / len(v) for k, v in per.items()} for t, per in sorted(sums.items())}

