"""`eppo-train signal`: the share of GRPO groups with reward variance, per task and temperature.

The model is test_learning's bandit warm start (the tiny model SFT'd on a demonstrator that answers a random digit),
whose greedy answer is one wrong digit: sampled nearly greedily every member of a group gives that answer, so no
group carries signal; sampled hot, members differ and some hit the rewarded digit. The greedy reply loses every
problem, so every group with a winning member is one that can move the greedy reply (`rescue`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

from test_learning import bandit_config

from eppo_train.cli import main
from eppo_train.config import load_config
from eppo_train.eval.group_signal import SignalRow, measure, measure_eval, table
from eppo_train.rollout.task_slots import prepare_tasks
from eppo_train.sft import sft_model


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


def test_table_by_hand():
    """Two tasks of 4 and 6 groups at two temperatures, given out of order. The shares are weighted by groups, the
    greedy and reach figures are plain means over tasks (reach: greedy + rescue per task)."""
    rows = [SignalRow("beta", 1.2, 6, 0.5, 2 / 6, 0.65, 2 / 6, 55.4), SignalRow("alpha", 1.2, 4, 0.75, 0.5, 0.45, 0.25, 20.0),
            SignalRow("beta", 0.7, 6, 0.0, 0.0, 0.5, 2 / 6, 40.6), SignalRow("alpha", 0.7, 4, 0.5, 0.25, 0.3, 0.25, 12.4)]
    assert table(rows) == "\n".join([
        "| task | groups | greedy | T=0.7: signal / rescue / success / reply | T=1.2: signal / rescue / success / reply |",
        "|---|---:|---:|---:|---:|",
        "| alpha | 4 | 0.25 | 0.50 / 0.25 / 0.30 / 12 | 0.75 / 0.50 / 0.45 / 20 |",
        "| beta | 6 | 0.33 | 0.00 / 0.00 / 0.50 / 41 | 0.50 / 0.33 / 0.65 / 55 |",
        # signal (0.5*4 + 0*6)/10, rescue (0.25*4)/10; greedy (0.25 + 1/3)/2; reach (0.25+0.25 + 1/3+0)/2
        "\nT=0.7: 0.20 of 10 groups carry signal, 0.10 can move the greedy reply (a member wins where it loses); "
        "mean over tasks: greedy 0.29, the greedy reply or a member wins 0.42",
        # signal (0.75*4 + 0.5*6)/10, rescue (0.5*4 + 1/3*6)/10; reach (0.25+0.5 + 1/3+1/3)/2
        "\nT=1.2: 0.60 of 10 groups carry signal, 0.40 can move the greedy reply (a member wins where it loses); "
        "mean over tasks: greedy 0.29, the greedy reply or a member wins 0.71",
    ])


# seed -> (the greedy reply won, the G = 3 samples' wins). Signal: 0, 1, 5 (some but not all won). Rescue: 1, 2 (a
# sample won, the greedy reply lost); 0, 4 and 5 have a winning sample too, but the greedy reply already wins them.
_WINS = {0: (True, (1, 0, 0)), 1: (False, (0, 1, 0)), 2: (False, (1, 1, 1)), 3: (False, (0, 0, 0)),
         4: (True, (1, 1, 1)), 5: (True, (0, 1, 1))}
_EXPECTED = SignalRow("t", 1.0, 6, signal=3 / 6, rescue=2 / 6, success=10 / 18, greedy=3 / 6, reply_tokens=7.0)
_SLOT = SimpleNamespace(label="t", env_id="eppo/T", cfg=SimpleNamespace(train_reward="won"))


def _episode(seed, won, split="eval", env_id="eppo/T"):
    return SimpleNamespace(env_id=env_id, task=env_id[-1].lower(), split=split, seed=seed, won=bool(won),
                           total_reward=float(won), num_steps=1, invalid_actions=0, truncated=False,
                           turns=[SimpleNamespace(info={"response_tokens": 7})])


def _no_model(monkeypatch):
    closer = SimpleNamespace(close=lambda: None)
    monkeypatch.setattr("eppo_train.eval.group_signal.prepare_tasks", lambda cfg: [_SLOT])
    monkeypatch.setattr("eppo_train.learner.workers.engine_spec", lambda cfg: None)
    monkeypatch.setattr("eppo_train.eval.group_signal.make_engine", lambda spec: closer)
    return closer


def test_measure_eval_counts_signal_and_rescue_by_hand(monkeypatch):
    @dataclass
    class Spec:
        tasks: tuple = ("eppo/T",)
        episodes: int = 6
        temperature: float = 0.0
        samples: int = 1
        seed: int = 0

    def evaluate(spec, policy):
        if spec.temperature == 0.0:
            assert spec.samples == 1
            episodes = [_episode(seed, greedy) for seed, (greedy, _) in _WINS.items()]
        else:
            assert spec.samples == 3 and spec.temperature == 1.0
            episodes = [_episode(seed, w) for seed, (_, wins) in _WINS.items() for w in wins]
        return SimpleNamespace(episodes=episodes, tokens_generated=0, timing={"wall_seconds": 1.0})

    _no_model(monkeypatch)
    monkeypatch.setattr("eppo_train.eval.group_signal.eval_specs", lambda cfg, slots: [(Spec(), [_SLOT])])
    monkeypatch.setattr("eppo_train.eval.group_signal.evaluate", evaluate)
    cfg = load_config("tiny", ["rollout.group_size=3"])
    assert measure_eval(cfg, [1.0], progress=lambda _: None) == [_EXPECTED]


def test_measure_counts_rescue_only_where_the_greedy_reply_loses(monkeypatch):
    """Task t plays `_WINS`; task u, beside it, two problems the greedy reply wins and every sample loses: t's row
    counts t's groups only."""
    from eppo_train.core.records import Sample
    from eppo_train.rollout.loop import Problem

    wins = {"eppo/T": _WINS, "eppo/U": {0: (True, (0, 0, 0)), 1: (True, (0, 0, 0))}}

    def run_rollout(policy, pool, problems, rollout):
        if rollout.temperature == 0.0:
            assert rollout.group_size == 1
            episodes = [_episode(p.seed, wins[p.env_id][p.seed][0], "train", p.env_id) for p in problems]
            return SimpleNamespace(episodes=episodes, samples=[], stats={})
        episodes, samples = [], []
        for p in problems:
            for k, won in enumerate(wins[p.env_id][p.seed][1]):
                episodes.append(_episode(p.seed, won, "train", p.env_id))
                samples.append(Sample(p.env_id[-1].lower(), p.group_id, f"{p.group_id}/{k}", -1, [1, 2], [0, 1],
                                      [0.0, 0.0], reward=0.5, won=bool(won)))  # scored as `won` by training_rewards
        return SimpleNamespace(episodes=episodes, samples=samples, stats={})

    closer = _no_model(monkeypatch)
    other = SimpleNamespace(label="u", env_id="eppo/U", cfg=SimpleNamespace(train_reward="won"))
    monkeypatch.setattr("eppo_train.eval.group_signal.prepare_tasks", lambda cfg: [_SLOT, other])
    monkeypatch.setattr("eppo_train.eval.group_signal.LocalEnvPool", lambda: closer)
    monkeypatch.setattr("eppo_train.eval.group_signal.train_problems",
                        lambda cfg, slots, b, stream: [Problem(env, "train", seed) for env in wins for seed in wins[env]])
    monkeypatch.setattr("eppo_train.eval.group_signal.rollout_config", lambda cfg, slots, iteration: cfg.rollout)
    monkeypatch.setattr("eppo_train.eval.group_signal.run_rollout", run_rollout)
    cfg = load_config("tiny", ["rollout.group_size=3", "rollout.temperature=1.0"])
    assert measure(cfg, [1.0], batches=1, progress=lambda _: None) == [
        _EXPECTED, SignalRow("u", 1.0, 2, signal=0.0, rescue=0.0, success=0.0, greedy=1.0, reply_tokens=7.0)]


def test_a_wrong_model_is_told_before_the_tasks_are_set_up(tmp_path, capsys, monkeypatch):
    # `eppo-train signal --model runs/nothere` set up the pipeline's five tasks (~10-20 s) before the model's error
    import eppo_train.rollout.task_slots

    def too_early(cfg):
        raise AssertionError("the tasks were set up before the model was checked")

    monkeypatch.setattr(eppo_train.rollout.task_slots, "prepare_tasks", too_early)
    assert main(["signal", "--model", str(tmp_path / "nothere")]) == 2
    assert capsys.readouterr().err.startswith(f"eppo-train: error: model '{tmp_path / 'nothere'}' not found")
