"""`run.eval_every`: the trainer scores the fixed evaluation set before the first iteration and every N-th."""

import json

import pytest

from eppo_train.cli import main
from eppo_train.config import load_config
from eppo_train.fixed_eval import evaluate_set
from eppo_train.metrics import read_metrics
from eppo_train.policy.factory import PolicyOptions, make_policy
from eppo_train.tasks import prepare_tasks


@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    args = ["--config", "tiny", "--set", f"run.out_dir={out}", "--set", "ray.enabled=false",
            "--set", "run.iterations=3", "--set", "run.eval_every=2", "--set", "evaluation.episodes=4"]
    assert main(args) == 0
    return out / "tiny"


def test_evaluations_before_the_first_every_nth_and_the_last_iteration(evaluated_run):
    assert sorted(p.name for p in (evaluated_run / "evals").iterdir()) == [
        "step_000000.json", "step_000002.json", "step_000003.json"]
    records = {r["step"]: r for r in read_metrics(evaluated_run)}
    assert "eval_success" not in records[1] and "eval_success" not in records[1]["tasks"]["guess_small"]
    for step in (2, 3):
        report = json.loads((evaluated_run / "evals" / f"step_{step:06d}.json").read_text())
        assert report["step"] == step and report["episodes_per_task"] == 4
        for task, values in records[step]["tasks"].items():
            summary = report["tasks"][task]
            assert len(summary["outcomes"]["seeds"]) == 4  # per instance: paired comparisons between steps
            assert values["eval_success"] == summary["success"]
            assert values["eval_success_low"] <= values["eval_success"] <= values["eval_success_high"]
        mean = sum(t["eval_success"] for t in records[step]["tasks"].values()) / 2
        assert records[step]["eval_success"] == pytest.approx(mean) and records[step]["eval_time_s"] > 0


def test_the_last_evaluation_scores_the_final_weights(evaluated_run):
    # the trainer evaluates its generator after the weights were pushed: the same result as the final checkpoint
    # loaded afresh, instance by instance
    cfg = load_config(str(evaluated_run / "config.yaml"))
    final = evaluated_run / "checkpoints" / (evaluated_run / "latest").read_text() / "model"
    policy = make_policy(str(final), "hf", PolicyOptions(dtype=cfg.model.generator_dtype))
    try:
        fresh = evaluate_set(cfg, prepare_tasks(cfg), policy, "final")
    finally:
        policy.policy.close()
    logged = json.loads((evaluated_run / "evals" / "step_000003.json").read_text())
    for task, summary in fresh["tasks"].items():
        assert summary["outcomes"] == logged["tasks"][task]["outcomes"], task


def test_the_evaluation_curve_is_plotted(evaluated_run):
    assert (evaluated_run / "plots" / "eval.png").stat().st_size > 0
