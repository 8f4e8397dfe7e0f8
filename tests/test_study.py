"""The study (`make experiment-quick`): every loss x seed trained and evaluated, one comparison table, overlays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_experiment_quick_writes_table_and_plots(tmp_path: Path):
    from eppo_train.cli import main

    out = tmp_path / "quick"
    assert main(["study", "--quick", "--out", str(out)]) == 0
    table = (out / "comparison.md").read_text()
    for algo in ("grpo", "dapo", "eppo"):
        assert f"| {algo} |" in table
        for seed in range(3):
            assert (out / "evals" / f"{algo}-s{seed}.json").exists()
    data = json.loads((out / "comparison.json").read_text())
    assert set(data) == {"grpo", "dapo", "eppo"} and all(0 <= d["mean"][0] <= 1 for d in data.values())
    assert (out / "plots" / "success.png").stat().st_size > 0 and (out / "plots" / "entropy.png").exists()


def test_study_rejects_an_unknown_loss(tmp_path: Path):
    from eppo_train.cli import main

    assert main(["study", "--quick", "--algos", "grpo,nope", "--out", str(tmp_path / "x")]) == 2
