"""The `CodeProblem` record shared by every source of coding problems."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CodeProblem:
    key: str  # stable id inside the source, e.g. "HumanEval_0" or "gen_l2_0042"
    prompt: str  # signature and docstring shown to the model
    reference: str  # a full solution that passes every test
    tests: str  # HumanEval-shaped: `def check(candidate): ...`
    entry_point: str  # the function the tests call
    level: int  # difficulty 1-4 for generated problems, 0 for HumanEval
    source: str
