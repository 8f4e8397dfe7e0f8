"""Dynamic sampling that refills (rollout/refill.py), with a scripted rollout: which problems each round plays, how
many rounds run, and how a `members` refill extends a group."""

from dataclasses import replace

from eppo_train.config import TaskConfig, load_config
from eppo_train.core.records import Sample
from eppo_train.rollout import refill as refill_module
from eppo_train.rollout.loop import Problem, RolloutConfig
from eppo_train.rollout.refill import refill, signal_groups
from eppo_train.rollout.task_slots import TaskSlot, train_problems


def _slots():
    return [TaskSlot(TaskConfig(id="example/A-v0", name="a", problems=2), "example/A-v0", "a"),
            TaskSlot(TaskConfig(id="example/B-v0", name="b", problems=1), "example/B-v0", "b")]


def _samples(problems, rc, rewards):
    """G members a problem (rc.group), member ids from rc.first_member, rewards from `rewards(problem, member)`."""
    out = []
    for p in problems:
        for g in range(rc.group(p.env_id)):
            m = rc.first_member + g
            out.append(Sample(p.env_id[-4].lower(), p.group_id, f"{p.group_id}#{m}", -1, [1, 2], [0, 1], [0.0, 0.0],
                              rewards(p, m), meta={"env_id": p.env_id, "split": p.split, "seed": p.seed}))
    return out


class _Script:
    """A run_rollout stand-in: round k's rewards come from rewards[k]; it records what each round was asked."""

    def __init__(self, rewards):
        self.rewards, self.calls = rewards, []

    def __call__(self, policy, pool, problems, rc):
        self.calls.append((list(problems), rc))
        return type("R", (), {"samples": _samples(problems, rc, self.rewards[len(self.calls) - 1]), "episodes": []})


def test_problems_refill_until_the_floor_or_the_cap(monkeypatch):
    cfg = load_config("tiny", ["algo.refill_rounds=3", "run.seed=5"])
    slots = _slots()
    rc = RolloutConfig(group_size=2, seed=11, progress=False)
    first = train_problems(cfg, slots, 7)
    # the iteration's own batch: a's two groups without variance, b's one with
    batch = _samples(first, rc, lambda p, m: float(p.env_id.endswith("B-v0") and m == 0))
    assert signal_groups(batch) == {"b": 1}
    script = _Script([lambda p, m: 0.0, lambda p, m: float(m == 0)])  # round 0: flat again; round 1: variance
    monkeypatch.setattr(refill_module, "run_rollout", script)
    out = refill(cfg, slots, 7, None, None, rc, batch, lambda s: s)
    assert out.rounds == 2 and len(script.calls) == 2
    for r, (problems, round_rc) in enumerate(script.calls):
        # only task a is short (floor: its 2 problems); new problems from the stream 7/refill/r
        assert problems == train_problems(cfg, [slots[0]], 7, per_task=2, stream=f"7/refill/{r}")
        assert round_rc.seed == 11 + 104_729 * (r + 1) and round_rc.first_member == 0
    assert not {p.group_id for p, _ in [(p, 0) for p in first]} & {p.group_id for c in script.calls for p in c[0]}
    assert out.per_task["a"] == {"refill_groups": 4.0, "signal_groups": 2.0}
    assert out.per_task["b"] == {"refill_groups": 0.0, "signal_groups": 1.0}
    assert len(out.samples) == 8  # two rounds x two problems x G = 2

    capped = replace(cfg, algo=replace(cfg.algo, refill_rounds=1))
    script = _Script([lambda p, m: 0.0])
    monkeypatch.setattr(refill_module, "run_rollout", script)
    assert refill(capped, slots, 7, None, None, rc, batch, lambda s: s).rounds == 1


def test_members_refill_extends_the_groups_without_variance(monkeypatch):
    cfg = load_config("tiny", ["algo.refill_rounds=2", "algo.refill=members"])
    slots = [replace(_slots()[0], cfg=replace(_slots()[0].cfg, min_signal_groups=1))]
    rc = RolloutConfig(group_size=2, seed=3, progress=False)
    first = [Problem("example/A-v0", "train", 40), Problem("example/A-v0", "train", 41)]
    batch = _samples(first, rc, lambda p, m: 0.0)
    script = _Script([lambda p, m: float(m == 3)])  # the new members: one wins
    monkeypatch.setattr(refill_module, "run_rollout", script)
    out = refill(cfg, slots, 0, None, None, rc, batch, lambda s: s)
    problems, round_rc = script.calls[0]
    assert problems == [first[0]] and round_rc.first_member == 2  # one group (the floor is 1), members 2 and 3
    assert sorted(s.episode_id for s in out.samples) == [f"{first[0].group_id}#2", f"{first[0].group_id}#3"]
    assert out.rounds == 1 and signal_groups(batch + out.samples) == {"a": 1}
