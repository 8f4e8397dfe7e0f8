"""The tiny run under every loss, and under Ray (slow: a few minutes each on two cores)."""

import pytest

from eppo_train.cli import main
from eppo_train.report.metrics import read_metrics


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "dapo", "clip_cov", "kl_cov"])
def test_tiny_run_with_each_loss(tmp_path, algo):
    assert main(["--config", "tiny", "--set", f"algo.name={algo}", "--set", "ray.enabled=false",
                 "--set", "run.iterations=2", "--set", f"run.out_dir={tmp_path}"]) == 0
    records = read_metrics(tmp_path / "tiny")
    assert [r["step"] for r in records] == [1, 2]
    if algo in ("grpo", "dapo"):  # unpaced: every task keeps the base bounds
        assert len({t["eps_high"] for r in records for t in r["tasks"].values()}) == 1


@pytest.mark.slow
def test_tiny_run_on_ray(tmp_path):
    assert main(["--config", "tiny", "--set", f"run.out_dir={tmp_path}", "--set", "run.iterations=2"]) == 0
    assert [r["step"] for r in read_metrics(tmp_path / "tiny")] == [1, 2]
