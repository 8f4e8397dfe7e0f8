"""`eppo-train signal`: the share of GRPO groups with reward variance, per task and temperature.

The model is test_learning's bandit warm start (the tiny model SFT'd on a demonstrator that answers a random digit),
whose greedy answer is one wrong digit: sampled nearly greedily every member of a group gives that answer, so no
group carries signal; sampled hot, members differ and some hit the rewarded digit. The greedy reply loses every
problem, so every group with a winning member is one that can move the greedy reply (`rescue`).
"""

from __future__ import annotations

from dataclasses import replace

from test_learning import bandit_config

from eppo_train.cli import main
from eppo_train.group_signal import measure, measure_eval, table
from eppo_train.sft import sft_model
from eppo_train.tasks import prepare_tasks


def _warm_start(tmp_path):
    cfg = bandit_config(tmp_path, "grpo")
    start = sft_model(cfg, prepare_tasks(cfg))  # cached: the same model test_learning starts from
    return replace(cfg, model=replace(cfg.model, name=start), sft=replace(cfg.sft, steps=0))


def test_signal_is_none_near_greedy_and_some_when_hot(tmp_path):
    cfg = _warm_start(tmp_path)
    rows = {r.temperature: r for r in measure(cfg, [0.01, 1.0], batches=2, progress=lambda _: None)}
    cold, hot = rows[0.01], rows[1.0]
    assert cold.task == hot.task == "bandit" and cold.groups == hot.groups == 8  # 4 problems x 2 batches
    assert cold.signal == 0.0, "near-greedy members of a group all give the greedy answer"
    assert hot.signal >= 0.25 and 0.0 < hot.success < 1.0, hot
    assert cold.greedy == hot.greedy == 0.0, "the warm start's greedy answer is wrong on every problem"
    assert cold.rescue == 0.0 and hot.rescue >= hot.signal, "a group with variance has a win the greedy reply lacks"
    text = table(list(rows.values()))
    assert "| bandit | 8 | 0.00 | 0.00 / 0.00 / " in text
    assert f"T=1: {hot.signal:.2f} of 8 groups carry signal, {hot.rescue:.2f} can move the greedy reply" in text


def test_signal_command_rejects_bad_temperatures(capsys):
    assert main(["signal", "--config", "tiny", "--temperatures", "hot"]) == 2
    assert main(["signal", "--config", "tiny", "--temperatures", "0,1"]) == 2
    err = capsys.readouterr().err
    assert "--temperatures: a comma list of numbers, got 'hot'" in err and "must be > 0" in err


def test_signal_on_the_evaluation_set_counts_instances_the_greedy_reply_loses_and_a_sample_wins(tmp_path):
    """`--eval`: the pipeline's evaluation instances (seeds 0..N-1 of the eval split), G samples each. The warm
    start's greedy answer is wrong everywhere, so `rescue` is the share of instances a sample wins (pass@G), and the
    reach line adds it to the greedy success."""
    cfg = _warm_start(tmp_path)
    cfg = replace(cfg, evaluation=replace(cfg.evaluation, episodes=8), rollout=replace(cfg.rollout, group_size=4))
    (row,) = measure_eval(cfg, [1.0], progress=lambda _: None)
    assert row.task == "bandit" and row.groups == 8 and row.greedy == 0.0
    assert 0.0 < row.rescue <= 1.0 and 0.0 < row.success <= row.rescue, row  # pass@1 <= pass@4
    assert row.signal <= row.rescue  # a mixed instance has a win, and the greedy reply lost it
    text = table([row])
    assert f"mean over tasks: greedy 0.00, the greedy reply or a member wins {row.rescue:.2f}" in text


def test_signal_command_reports_progress_inside_each_pass(capsys):
    """A pass over the evaluation set takes minutes on CPU: the command reports episodes done as it goes, then the
    table on stdout."""
    assert main(["signal", "--config", "tiny", "--batches", "1", "--set", "ray.enabled=false"]) == 0
    captured = capsys.readouterr()
    assert "stage 1/1 signal: started" in captured.err
    assert "greedy: batch 1/1 done" in captured.err and "temperature 1.0: batch 1/1 done" in captured.err
    assert "stage 1/1 signal: episodes 4/4" in captured.err, captured.err  # 2 tasks x 2 problems, greedy
    assert "stage 1/1 signal: episodes 12/12" in captured.err, captured.err  # the same x G=3 samples
    assert "| guess_large | 2 |" in captured.out and "| guess_small | 2 |" in captured.out
