"""One study run's result file (`docs/results/study/<name>.json`): small, self-describing, enough for the report.

    {"schema": 1, "name": "eppo-seed0", "group": "eppo", "algo": "eppo", "seed": 0, "overrides": [],
     "command": "eppo-train study", "date": "2026-12-01T12:00:00Z", "wall_seconds": ..., "train_seconds": ...,
     "eval_seconds": ..., "load": {"start": [1m, 5m, 15m], "end": [...]}, "machine": {"cpus": 2, ...},
     "resumed_from_step": 0, "start_model": {"model": ..., "sha256": ...}, "config": {...the run's config...},
     "training_episodes": 960,
     "iterations": [{"step": 1, "success": ..., "iteration_time_s": ..., "tasks": {"math": {"success": ...,
                     "entropy": ..., "entropy_ema": ..., "eps_low": ..., "eps_high": ..., "clip_frac": ...}},
                     "crossovers": [["a", "b"]], "spikes": ["math"]}, ...],
     "crossovers": 3, "spikes": 1,
     "evaluation": {"episodes_per_task": 64, "tasks": {"math": {"success": ..., "success_ci95": [...],
                    "split": ..., "reward_revision": 2,
                    "outcomes": {"seeds": [0, ...], "won": [...], "reward": [...]}}}}}

Nothing in it depends on the machine it is read on, so a report can be rebuilt anywhere from the files alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eppo_envs.core.registry import reward_changes_after, reward_revision
from eppo_train.config import Config, to_dict
from eppo_train.rollout.task_slots import task_label
from eppo_train.study.plan import StudyRun

SCHEMA = 1
# Per-task training numbers kept per iteration (the rest of metrics.jsonl stays in the scratch run folder).
TASK_KEYS = ("success", "reward", "entropy", "entropy_ema", "pace_scale", "eps_low", "eps_high", "clip_frac",
             "clip_low_frac", "clip_high_frac", "ratio_dev", "ratio_std", "approx_kl", "response_length", "samples")
EVAL_KEYS = ("episodes", "success", "success_ci95", "mean_reward", "mean_reward_ci95", "invalid_action_rate",
             "env_id", "split", "reward_revision", "outcomes")


def model_fingerprint(model: str) -> dict[str, Any]:
    """sha256 of a local model folder's weight files (empty for a named model: its weights are the shipped ones)."""
    folder = Path(model)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return {}
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 22), b""):
                digest.update(block)
    return {"sha256": digest.hexdigest()}


def _iteration(rec: dict) -> dict[str, Any]:
    events = rec.get("events", {})
    return {
        "step": int(rec["step"]),
        "success": rec.get("success"),
        "iteration_time_s": rec.get("iteration_time_s"),
        "tasks": {t: {k: v[k] for k in TASK_KEYS if k in v} for t, v in rec.get("tasks", {}).items()},
        "crossovers": events.get("crossovers", []),
        "spikes": events.get("spikes", []),
    }


def build_record(run: StudyRun, cfg: Config, start: dict, metrics: list[dict], report: dict, *, command: str,
                 resumed_from: int, started: float, train_s: float, eval_s: float,
                 load: tuple[tuple[float, ...], tuple[float, ...]]) -> dict[str, Any]:
    iterations = [_iteration(r) for r in metrics]
    return {
        "schema": SCHEMA,
        "name": run.name,
        "group": run.group,
        "algo": run.algo,
        "seed": run.seed,
        "overrides": list(run.overrides),
        "command": command,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_seconds": round(train_s + eval_s, 1),
        "train_seconds": round(train_s, 1),
        "eval_seconds": round(eval_s, 1),
        "load": {"start": [round(x, 2) for x in load[0]], "end": [round(x, 2) for x in load[1]]},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.machine()},
        "resumed_from_step": resumed_from,
        "start_model": start,
        "config": to_dict(cfg),
        "training_episodes": cfg.run.iterations * sum(t.problems for t in cfg.env.tasks) * cfg.rollout.group_size,
        "iterations": iterations,
        "crossovers": sum(len(i["crossovers"]) for i in iterations),
        "spikes": sum(len(i["spikes"]) for i in iterations),
        "evaluation": _evaluation(report),
    }


START_FILE = "start-model.json"  # the start model's evaluation: not a run, the baseline every run is paired with
# A machine whose SFT comes out with other weights (CPU kernels differ between machines: the same demos and loss
# curve give another sha256 on another machine) evaluates its own start model into `start-model-<sha12>.json`, and
# the report pairs each run with the start model it began from.
START_PREFIX = "start-model"


def _evaluation(report: dict) -> dict[str, Any]:
    return {
        "episodes_per_task": report["episodes_per_task"],
        "seconds": report.get("seconds"),
        "tasks": {t: {k: v[k] for k in EVAL_KEYS if k in v} for t, v in report["tasks"].items()},
    }


def start_record(start: dict, report: dict, *, command: str, started: float, eval_s: float,
                 load: tuple[tuple[float, ...], tuple[float, ...]]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "name": "start-model",
        "command": command,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "eval_seconds": round(eval_s, 1),
        "load": {"start": [round(x, 2) for x in load[0]], "end": [round(x, 2) for x in load[1]]},
        "start_model": start,
        "evaluation": _evaluation(report),
    }


def start_key(start: dict) -> str:
    """Which start model a record began from: its weights' sha256 (12 hex digits), or a named model's name."""
    return start.get("sha256", "")[:12] or f"named model {start.get('model')}"


def start_path(results: Path, start: dict) -> Path:
    """Where this start model's evaluation lives: `start-model.json` for the study's first start model,
    `start-model-<sha12>.json` for another one."""
    first = Path(results) / START_FILE
    if not first.exists() or start_key(json.loads(first.read_text())["start_model"]) == start_key(start):
        return first
    return Path(results) / f"{START_PREFIX}-{start_key(start)}.json"


def load_starts(results: Path) -> dict[str, dict]:
    """Every start model's evaluation in `results`, by `start_key`; the study's first start model first."""
    paths = sorted(Path(results).glob(f"{START_PREFIX}*.json"), key=lambda p: (p.name != START_FILE, p.name))
    records = (json.loads(p.read_text()) for p in paths)
    return {start_key(r["start_model"]): r for r in records}


class ResultError(ValueError):
    """A result file that cannot be read: one line naming it."""


def load_results(results: Path) -> list[dict]:
    """Every `<name>.json` result file in `results` (plan.json aside), sorted by name."""
    out = []
    for path in sorted(Path(results).glob("*.json")):
        if path.name == "plan.json" or path.name.startswith(START_PREFIX):
            continue
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ResultError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        missing = [k for k in ("name", "group", "seed", "iterations", "evaluation") if k not in data]
        if missing:
            raise ResultError(f"{path}: not a study result file (no {missing[0]!r})")
        out.append(data)
    return out


def load_plan(results: Path) -> list[str]:
    path = Path(results) / "plan.json"
    if not path.exists():
        return []
    return [r["name"] for r in json.loads(path.read_text()).get("runs", [])]


@dataclass(frozen=True)
class RewardDrift:
    """A task whose reward has changed since some of the study's evaluations were scored."""

    task: str  # the task's label in the study ("math")
    env_id: str
    now: int  # today's reward revision
    scored: dict[int, list[str]]  # earlier revision -> the records scored by it (run names, "start-model")
    changes: list[str]  # the changes since the oldest of those revisions


def _task_ids(records: list[dict]) -> dict[str, str]:
    """Task label -> registered id, from the runs' recorded configs (a start model's record has no config)."""

    ids: dict[str, str] = {}
    for record in records:
        for task in record.get("config", {}).get("env", {}).get("tasks", []):
            ids.setdefault(task.get("name") or task_label(task["id"]), task["id"])
    return ids


def reward_drift(records: list[dict]) -> list[RewardDrift]:
    """Tasks whose evaluations in `records` were scored by an earlier reward revision than the task has today.

    A record without revisions (they are recorded from 2026-12-07 on; the study of 2026-12-01/02 has none) counts as
    revision 1: its rewards are those before every listed change. A task that is not registered here, or keeps no
    revision, is not judged."""

    ids = _task_ids(records)
    drift = []
    for label, env_id in ids.items():
        try:
            now = reward_revision(env_id)
        except Exception:  # noqa: BLE001 (a plugin task not imported here: nothing to compare with)
            continue
        if now is None:
            continue
        scored: dict[int, list[str]] = {}
        for record in records:
            task = record["evaluation"]["tasks"].get(label)
            if task is not None and (revision := int(task.get("reward_revision") or 1)) != now:
                scored.setdefault(revision, []).append(record["name"])
        if scored:
            drift.append(RewardDrift(label, env_id, now, scored, reward_changes_after(env_id, min(scored))))
    return drift
