"""`run.eval_every`: the trainer scores the fixed evaluation set before the first iteration and every N-th."""

import json
import shutil

import pytest

from eppo_train.cli import main
from eppo_train.config import load_config
from eppo_train.eval.fixed_set import evaluate_set
from eppo_train.policy.factory import PolicyOptions, make_policy
from eppo_train.report.metrics import read_metrics
from eppo_train.rollout.task_slots import prepare_tasks


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
            assert values["eval_success"] == summary["success"] and values["eval_reward"] == summary["mean_reward"]
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


def test_the_evaluation_curve_draws_each_task_with_its_interval_and_the_mean(evaluated_run, monkeypatch):
    from matplotlib.container import ErrorbarContainer

    from eppo_train.report import plots

    drawn = {}
    save = plots._save

    def keep(fig, path):  # noqa: ANN001
        if path.name == "eval.png":
            ax = fig.axes[0]
            drawn["lines"] = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines}
            bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
            drawn["lines"].update({c.get_label(): (list(c.lines[0].get_xdata()), list(c.lines[0].get_ydata()))
                                   for c in bars})
            drawn["bars"] = {c.get_label(): [tuple(map(tuple, s)) for s in c.lines[2][0].get_segments()] for c in bars}
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    plots.plot_run(evaluated_run)
    evals = [json.loads((evaluated_run / "evals" / f"step_{s:06d}.json").read_text()) for s in (0, 2, 3)]
    tasks = sorted(evals[0]["tasks"])
    assert sorted(drawn["bars"]) == tasks
    for t in tasks:
        assert drawn["lines"][t] == ([0, 2, 3], [pytest.approx(e["tasks"][t]["success"]) for e in evals])
        assert drawn["bars"][t] == [((s, pytest.approx(e["tasks"][t]["success_ci95"][0])),
                                     (s, pytest.approx(e["tasks"][t]["success_ci95"][1])))
                                    for s, e in zip((0, 2, 3), evals, strict=True)]
    mean = [sum(e["tasks"][t]["success"] for t in tasks) / len(tasks) for e in evals]
    assert drawn["lines"]["mean over tasks"] == ([0, 2, 3], pytest.approx(mean))


def test_a_resumed_run_keeps_its_step_0_evaluation(evaluated_run, tmp_path):
    # the start point of the curve is the weights before any update: a resume (start > 0) does not score its
    # loaded weights as step 0 again, and goes on every N-th iteration
    run = tmp_path / "tiny"
    shutil.copytree(evaluated_run, run)
    assert main(["--resume", str(run), "--set", "run.iterations=4"]) == 0
    assert sorted(p.name for p in (run / "evals").iterdir()) == [
        "step_000000.json", "step_000002.json", "step_000003.json", "step_000004.json"]
    assert (run / "evals" / "step_000000.json").read_text() == \
        (evaluated_run / "evals" / "step_000000.json").read_text()


def test_an_evaluation_reports_each_tasks_success_interval_and_reward(tmp_path, monkeypatch):
    # on a task whose reward is not its success (the tiny run's rewards are 0 or 1): what goes where in the metrics
    from types import SimpleNamespace

    from eppo_train.eval import fixed_set
    from eppo_train.trainer import Trainer

    report = {"model": "m", "episodes_per_task": 4, "seconds": 2.0, "tasks": {
        "a": {"success": 0.5, "success_ci95": [0.15, 0.85], "mean_reward": 0.25},
        "b": {"success": 1.0, "success_ci95": [0.51, 1.0], "mean_reward": 0.75}}}
    monkeypatch.setattr(fixed_set, "evaluation_agent", lambda cfg, policy: "agent")
    monkeypatch.setattr(fixed_set, "evaluate_set", lambda cfg, slots, agent, name: report)
    trainer = SimpleNamespace(cfg=SimpleNamespace(evaluation=SimpleNamespace(episodes=4)), slots=[],
                              run_dir=tmp_path / "run")
    assert Trainer._evaluate(trainer, None, 5) == {"success": 0.75, "seconds": 2.0, "tasks": {
        "a": {"eval_success": 0.5, "eval_success_low": 0.15, "eval_success_high": 0.85, "eval_reward": 0.25},
        "b": {"eval_success": 1.0, "eval_success_low": 0.51, "eval_success_high": 1.0, "eval_reward": 0.75}}}
    assert json.loads((tmp_path / "run" / "evals" / "step_000005.json").read_text()) == {"step": 5, **report}
