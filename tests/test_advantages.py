"""Advantage estimators on small batches with hand-computed results."""

import pytest

from eppo_train.advantages import compute_advantages
from eppo_train.records import Sample


def sample(task, group, ep, reward, turn=-1, turns=1, prompt=(1, 2)):
    ids = [*prompt, 7, 8]
    return Sample(task, group, ep, turn, ids, [0] * len(prompt) + [1, 1], [0.0] * len(ids), reward, num_turns=turns)


def test_grpo_group_normalisation():
    batch = [sample("t", "g", f"e{i}", r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    res = compute_advantages(batch, "grpo")
    # mean 0.5, population std 0.5
    assert [s.advantage for s in res.samples] == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-4)
    assert [s.advantage for s in batch] == [0.0] * 4  # new records: the rollout's are left as they were
    assert res.stats["zero_variance_groups"] == 0
    no_std = compute_advantages(batch, "grpo", scale_by_std=False)
    assert [s.advantage for s in no_std.samples] == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_zero_variance_groups_reported_and_filtered():
    batch = [sample("t", "g1", "a", 1.0), sample("t", "g1", "b", 0.0),
             sample("t", "g2", "c", 1.0), sample("t", "g2", "d", 1.0)]
    res = compute_advantages(batch, "grpo")
    assert res.stats["zero_variance_groups"] == 1 and len(res.samples) == 4
    assert res.per_task["t"]["zero_var_frac"] == 0.5
    res = compute_advantages(batch, "grpo", filter_zero_variance=True)
    assert [s.episode_id for s in res.samples] == ["a", "b"]


def test_task_normalisation_equalises_scales():
    # task x rewards in {0, 10}, task y in {0, 1}: after per-task normalisation both have unit scale
    batch = [sample("x", "gx", "a", 10.0), sample("x", "gx", "b", 0.0),
             sample("y", "gy", "c", 1.0), sample("y", "gy", "d", 0.0)]
    res = compute_advantages(batch, "task")
    assert [s.advantage for s in res.samples] == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-4)


def test_gigpo_adds_step_advantage_for_shared_states():
    # window mode, one group: two episodes share the first state (prompt 1,2); their turn-0 samples
    # form a step group. Episode a wins after 1 turn, b after 3 -> discounted returns 1 and 0.9^2 (gamma 0.9)
    batch = [sample("t", "g", "a", 1.0, turn=0, turns=1),
             sample("t", "g", "b", 1.0, turn=0, turns=3),
             sample("t", "g", "b", 1.0, turn=1, turns=3, prompt=(3, 4)),
             sample("t", "g", "c", 0.0, turn=0, turns=1, prompt=(5, 6))]
    batch = compute_advantages(batch, "gigpo", options={"gamma": 0.9, "weight": 1.0}).samples
    # episode rewards a=1, b=1, c=0: mean 2/3, std sqrt(2)/3
    ep = (1 - 2 / 3) / (2 ** 0.5 / 3 + 1e-6)
    # step group {a turn0 (1.0), b turn0 (0.81)}: mean 0.905, std 0.095 -> +1 / -1
    assert batch[0].advantage == pytest.approx(ep + 1.0, abs=1e-4)
    assert batch[1].advantage == pytest.approx(ep - 1.0, abs=1e-4)
    assert batch[2].advantage == pytest.approx(ep, abs=1e-4)  # a state seen once: episode advantage only


def test_estimator_options_are_validated_by_the_estimator():
    from eppo_train.typed import ConfigError

    batch = [sample("t", "g", "a", 1.0), sample("t", "g", "b", 0.0)]
    with pytest.raises(ConfigError, match="unknown key algo.advantage_options.gama"):
        compute_advantages(batch, "gigpo", options={"gama": 0.9})
    with pytest.raises(ConfigError, match="takes no options"):
        compute_advantages(batch, "grpo", options={"gamma": 0.9})
    with pytest.raises(ConfigError, match="algo.advantage: unknown estimator 'nope'"):
        compute_advantages(batch, "nope")


def test_train_reward_won_scores_groups_on_success_alone():
    # WebShop-style graded rewards: 0.9 (close, wrong product) vs 1.0 (won). With train_reward "won" the close miss
    # counts as a loss, the other task keeps its env reward; the input samples are left as they were
    from eppo_train.config import TaskConfig
    from eppo_train.tasks import TaskSlot, training_rewards

    slots = [TaskSlot(TaskConfig(id="eppo/WebShop-v0", train_reward="won"), "w", "webshop"),
             TaskSlot(TaskConfig(id="eppo/MathTool-v0"), "m", "math")]
    batch = [sample("webshop", "g", "a", 0.9), sample("webshop", "g", "b", 1.0), sample("math", "h", "c", 0.5)]
    batch[1].won = True
    scored = training_rewards(batch, slots)
    assert [s.reward for s in scored] == [0.0, 1.0, 0.5]
    assert [s.reward for s in batch] == [0.9, 1.0, 0.5]
    res = compute_advantages(scored, "grpo", scale_by_std=False)
    assert [s.advantage for s in res.samples[:2]] == pytest.approx([-0.5, 0.5])
    # window mode: only the last turn's step reward carries the win
    turns = [sample("webshop", "g", "a", 0.9, turn=t, turns=2) for t in (0, 1)]
    for s in turns:
        s.meta["step_reward"] = 0.45
    assert [s.meta["step_reward"] for s in training_rewards(turns, slots)] == [0.0, 0.0]


def test_flat_groups_and_a_group_of_one_get_zero_advantage():
    # all-equal rewards: R - mean = 0 whatever the std guard; a group of one: its own mean, std 0 -> 0 / 1e-6 = 0.
    # Both are zero-variance groups (2 of 3); the third, rewards 0.3/0.1: mean 0.2, population std 0.1 -> +-1
    batch = [sample("t", "flat", "a", 0.7), sample("t", "flat", "b", 0.7), sample("t", "one", "c", 1.0),
             sample("t", "g", "d", 0.3), sample("t", "g", "e", 0.1)]
    for scale in (True, False):
        res = compute_advantages(batch, "grpo", scale_by_std=scale)
        want = [0.0, 0.0, 0.0, 1.0, -1.0] if scale else [0.0, 0.0, 0.0, 0.1, -0.1]
        assert [s.advantage for s in res.samples] == pytest.approx(want, abs=1e-4)
        assert res.stats["zero_variance_groups"] == 2
