"""summary.md's paired stage-to-stage intervals, and evaluation.evaluate as a library call."""

from __future__ import annotations

from pathlib import Path

import eppo_envs.example.guess_number  # noqa: F401  (registers example/GuessNumber-v0)
from eppo_train.config import load_config
from eppo_train.eval.evaluation import EvalSpec, evaluate
from eppo_train.policy.factory import make_policy
from eppo_train.report.summary import table, write_summary


def _task(won: list[bool]) -> dict:
    n = len(won)
    return {"episodes": n, "success": sum(won) / n, "mean_reward": sum(won) / n, "mean_reward_ci95": [0.0, 1.0],
            "outcomes": {"seeds": list(range(n)), "won": won, "reward": [float(w) for w in won]}}


def _done() -> dict:
    lost, half = [False] * 64, [True] * 32 + [False] * 32
    return {
        "eval_base": {"tasks": {"a": _task(lost), "b": _task(lost)}},
        "eval_sft": {"tasks": {"a": _task(half), "b": _task(lost)}},
        "eval_rl": {"tasks": {"a": _task(half), "b": _task(lost)}},
    }


def test_paired_columns_per_task_and_for_the_mean():
    rows = table(_done(), "success")
    assert rows[0] == "| task | before SFT | after SFT | after RL | SFT − base | RL − SFT |"
    a, b, mean = rows[2], rows[3], rows[4]
    # task a: 32 of 64 instances flip to won -> +0.50 ± 1.96·0.5/8 (paired), excluding 0; RL keeps them: 0 exactly
    assert a.startswith("| a | 0.00 [0.00, 0.06] | 0.50 [0.38, 0.62] | 0.50 [0.38, 0.62] | +0.50 [+0.38, +0.62] *")
    assert a.endswith("| +0.00 [+0.00, +0.00] |")
    assert b.endswith("| +0.00 [+0.00, +0.00] | +0.00 [+0.00, +0.00] |")
    # the mean over the two tasks: +0.25, its stratified paired interval half as wide as task a's
    assert "**+0.25 [+0.19, +0.31] ***" in mean and "**0.25 [0.19, 0.31]**" in mean


def test_stages_scored_by_different_rewards_are_not_compared(tmp_path: Path):
    """A run resumed after a reward change: its SFT evaluation was scored by revision 1, its RL evaluation by 2.
    RL − SFT would be the reward's change, so neither task a's cell nor the mean says a number; stages of one
    revision, and reports without revisions, are compared as before."""
    done = _done()
    for stage, revision in (("eval_base", 1), ("eval_sft", 1), ("eval_rl", 2)):
        done[stage]["tasks"]["a"]["reward_revision"] = revision
    rows = table(done, "success")
    assert rows[2].endswith("| +0.50 [+0.38, +0.62] * | reward changed |")
    assert rows[3].endswith("| +0.00 [+0.00, +0.00] | +0.00 [+0.00, +0.00] |")  # b: no revision recorded
    assert rows[4].endswith("| **reward changed** |")
    text = write_summary(tmp_path, load_config("tiny"), done).read_text()
    assert "the stages scored a by different revisions of its reward" in text
    assert "Rewards (revision, `eppo-envs list`): a r2." in text  # the newest stage's
    assert "different revisions" not in write_summary(tmp_path, load_config("tiny"), _done()).read_text()


def test_reports_without_outcomes_still_summarise(tmp_path: Path):
    done = {k: {"tasks": {t: {"episodes": 8, "success": 0.25, "mean_reward": 0.25, "mean_reward_ci95": [0.0, 0.5]}
                          for t in ("guess_small", "guess_large")}} for k in ("eval_base", "eval_sft")}
    text = write_summary(tmp_path, load_config("tiny"), done).read_text()
    assert "| guess_small | 0.25 [0.07, 0.59] | 0.25 [0.07, 0.59] | — |" in text


def test_evaluate_is_a_library_call_with_paired_outcomes():
    spec = EvalSpec(["example/GuessNumber-v0"], episodes=5, max_turns=12)
    report = evaluate(spec, make_policy("expert"), "expert")
    task = report.tasks["example/GuessNumber-v0"]
    assert task["success"] == 1.0 and task["success_ci95"][1] == 1.0
    assert task["outcomes"]["seeds"] == [0, 1, 2, 3, 4] and all(task["outcomes"]["won"])
    lo, hi = task["mean_reward_ci95"]
    assert 0.0 <= lo <= task["mean_reward"] <= hi  # a bootstrap interval stays inside the data's range
    assert "episodes" not in report.to_dict() and len(report.episodes) == 5


def test_the_summary_shows_how_often_the_clip_acted_during_rl():
    from eppo_train.report.summary import clip_table

    records = [{"step": 1, "optimizer_steps": 4.0, "tasks": {"math": {"clip_low_frac": 0.01, "clip_high_frac": 0.002,
                                                                      "ratio_dev": 0.05, "approx_kl": 0.001,
                                                                      "eps_low": 0.2, "eps_high": 0.28,
                                                                      "entropy": 0.3}}},
               {"step": 2, "optimizer_steps": 4.0, "tasks": {"math": {"clip_low_frac": 0.03, "clip_high_frac": 0.004,
                                                                      "ratio_dev": 0.07, "approx_kl": 0.003,
                                                                      "eps_low": 0.1, "eps_high": 0.14,
                                                                      "entropy": 0.1}}}]
    lines = clip_table(records)
    assert lines[0].startswith("## The clip during RL (4 optimizer steps a batch")
    assert "| math | 2.00 | 0.30 | 0.0600 | 0.00200 | 0.150 | 0.210 | 0.200 |" in lines
    assert clip_table([{"step": 1, "tasks": {}}]) == []
