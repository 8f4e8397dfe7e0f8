"""Advantage estimators on small batches with hand-computed results."""

import pytest

from eppo_train.algos.advantages import compute_advantages
from eppo_train.core.records import Sample


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
    from eppo_train.core.registry import ConfigError

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
    from eppo_train.rollout.task_slots import TaskSlot, training_rewards

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


def test_task_normalisation_over_groups_of_different_spread_and_window_samples():
    # one task, three groups (Dr. GRPO centring per group over episodes, then a z-score over the task's episodes):
    # g1: episode a won (2 window samples), b lost -> centred +0.5, +0.5, -0.5; g2 flat -> 0, 0;
    # g3: rewards 0.2 / 0 -> +0.1, -0.1. Over the 6 episodes the mean is 0 and the std sqrt(0.52 / 6); over the 7
    # samples it would be 0.4 / 7 (episode a counted twice)
    batch = [sample("t", "g1", "a", 1.0, turn=0, turns=2), sample("t", "g1", "a", 1.0, turn=1, turns=2),
             sample("t", "g1", "b", 0.0), sample("t", "g2", "c", 0.5), sample("t", "g2", "d", 0.5),
             sample("t", "g3", "e", 0.2), sample("t", "g3", "f", 0.0)]
    centred = [0.5, 0.5, -0.5, 0.0, 0.0, 0.1, -0.1]
    std = (0.52 / 6) ** 0.5
    want = [c / (std + 1e-6) for c in centred]
    grpo = compute_advantages(batch, "grpo")  # +1 +1 -1 0 0 +1 -1: mean 1/7
    assert grpo.stats["adv_mean"] == pytest.approx(1 / 7, abs=1e-5) == grpo.per_task["t"]["adv_mean"]
    for scale in (True, False):  # the task-level z-score is the estimator's definition, whatever scale_by_std says
        got = [s.advantage for s in compute_advantages(batch, "task", scale_by_std=scale).samples]
        assert got == pytest.approx(want, abs=1e-6)


def window(ep, turn, turns, reward, obs, step_reward):
    s = sample("t", "g", ep, reward, turn=turn, turns=turns)  # every turn has the same prompt tokens
    s.meta.update(observation_hash=obs, step_reward=step_reward)
    return s


def test_gigpo_on_the_rollouts_window_samples_uses_their_step_rewards_and_observation_hashes():
    # As the rollout writes them: each turn's step reward and the hash of the observation it acts on (the prompts
    # are all the same tokens, so only the hashes tell the states apart). gamma 0.5: a earns 0.5 at turn 0 and 1 at
    # turn 1: returns 0.5 + 0.5 * 1 = 1 (h0) and 1 (h1); b (lost): 0 at h0, hx, h1; c (won at once): 1 (h0)
    batch = [window("a", 0, 2, 1.0, "h0", 0.5), window("a", 1, 2, 1.0, "h1", 1.0),
             window("b", 0, 3, 0.0, "h0", 0.0), window("b", 1, 3, 0.0, "hx", 0.0), window("b", 2, 3, 0.0, "h1", 0.0),
             window("c", 0, 1, 1.0, "h0", 1.0)]
    res = compute_advantages(batch, "gigpo", options={"gamma": 0.5, "weight": 0.5}).samples
    # episodes a, c won, b lost: mean 2/3, population std sqrt(2)/3; step group h0 {1, 0, 1} alike
    win, loss = (1 / 3) / (2 ** 0.5 / 3 + 1e-6), (-2 / 3) / (2 ** 0.5 / 3 + 1e-6)
    # h1 {1, 0}: +-1; hx is visited once: no step term
    want = [win + 0.5 * win, win + 0.5 * 1.0, loss + 0.5 * loss, loss, loss - 0.5 * 1.0, win + 0.5 * win]
    assert [s.advantage for s in res] == pytest.approx(want, abs=1e-5)
    # Dr. GRPO (scale_by_std false): both terms only centred; h0: +1/3, -2/3, +1/3; h1: +0.5, -0.5
    res = compute_advantages(batch, "gigpo", scale_by_std=False, options={"gamma": 0.5, "weight": 0.5}).samples
    want = [1 / 3 + 1 / 6, 1 / 3 + 0.25, -2 / 3 - 1 / 3, -2 / 3, -2 / 3 - 0.25, 1 / 3 + 1 / 6]
    assert [s.advantage for s in res] == pytest.approx(want, abs=1e-9)
    # without hashes the state is the prompt, whatever the reply: all of a group's turns here share one
    from eppo_train.algos.advantages import state_key

    other_reply = sample("t", "g", "z", 0.0)
    other_reply.input_ids = [1, 2, 9, 9]
    assert state_key(sample("t", "g", "y", 1.0)) == state_key(other_reply)


def test_step_return_and_gigpos_published_defaults():
    from eppo_train.algos.advantages import GigpoOptions, step_return

    s = sample("t", "g", "a", 1.0, turn=0, turns=3)
    assert step_return(s, 0.5) == 0.25  # the final reward two turns later: gamma^2
    assert step_return(sample("t", "g", "a", 1.0, turn=2, turns=3), 0.5) == 1.0
    assert step_return(sample("t", "g", "a", 0.7), 0.5) == 0.7  # whole-episode sample: the episode's reward
    s.meta["step_return"] = 0.3
    assert step_return(s, 0.5) == 0.3  # a known return wins
    assert (GigpoOptions().weight, GigpoOptions().gamma) == (1.0, 0.95)  # GiGPO (Feng et al. 2025): omega 1, gamma 0.95


def test_batch_and_per_task_statistics_by_hand():
    # task x: group g1 (1, 0) -> +-1, group g2 flat (1, 1) -> 0, 0; task y: group g3 (0.5, 0.1, 0.3) -> +-1.2247, 0
    batch = [sample("x", "g1", "a", 1.0), sample("x", "g1", "b", 0.0), sample("x", "g2", "c", 1.0),
             sample("x", "g2", "d", 1.0), sample("y", "g3", "e", 0.5), sample("y", "g3", "f", 0.1),
             sample("y", "g3", "g", 0.3)]
    res = compute_advantages(batch, "grpo")
    z = 0.2 / ((0.08 / 3) ** 0.5 + 1e-6)
    assert [s.advantage for s in res.samples] == pytest.approx([1, -1, 0, 0, z, -z, 0], abs=1e-5)
    assert res.stats["groups"] == 3 and res.stats["zero_variance_groups"] == 1
    assert res.stats["zero_variance_frac"] == pytest.approx(1 / 3) and res.stats["samples_kept"] == 7
    assert res.stats["adv_mean"] == pytest.approx(0.0, abs=1e-6)
    assert res.stats["adv_std"] == pytest.approx(((2 + 2 * z * z) / 7) ** 0.5, abs=1e-5)
    assert res.per_task["x"] == pytest.approx({"adv_mean": 0.0, "adv_std": 0.5 ** 0.5, "adv_abs_mean": 0.5,
                                               "zero_var_frac": 0.5}, abs=1e-5)
    assert res.per_task["y"] == pytest.approx({"adv_mean": 0.0, "adv_std": z * (2 / 3) ** 0.5,
                                               "adv_abs_mean": 2 * z / 3, "zero_var_frac": 0.0}, abs=1e-5)
    kept = compute_advantages(batch, "grpo", filter_zero_variance=True)
    assert kept.stats["samples_kept"] == 5 and kept.stats["zero_variance_groups"] == 1
    assert kept.per_task["x"]["zero_var_frac"] == 0.5 and kept.per_task["x"]["adv_abs_mean"] == pytest.approx(1.0, abs=1e-5)
