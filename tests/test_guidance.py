"""Expert-guided groups (`algo.expert_guidance`): which groups get the expert, what its member holds, its advantage."""

from __future__ import annotations

from dataclasses import replace

import pytest

from eppo_train.algos.advantages import compute_advantages
from eppo_train.config import ConfigError, load_config
from eppo_train.core.records import Sample
from eppo_train.policy.hf import HFPolicy
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.guidance import expert_guidance, losing_groups
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout

GUESS = "example/GuessNumber-v0"


def _sample(group: str, member: int, won: bool) -> Sample:
    env_id, split, seed = group.split("|")
    return Sample("t", group, f"{group}#{member}", -1, [1, 2], [0, 1], [0.0, 0.0], float(won), won,
                  meta={"env_id": env_id, "split": split, "seed": int(seed)})


def test_losing_groups_are_those_without_a_win():
    samples = [_sample("a|train|1", 0, False), _sample("a|train|1", 1, True),
               _sample("a|train|2", 0, False), _sample("a|train|2", 1, False),
               _sample("b|test|3", 0, False),
               _sample("c|train|4", 0, True), _sample("c|train|4", 1, False)]  # a win before a loss: not losing
    assert losing_groups(samples) == [Problem("a", "train", 2), Problem("b", "test", 3)]


@pytest.fixture(scope="module")
def guess_rollout():
    """The untrained tiny model on GuessNumber 1-1000 (10 turns): it never wins, so every group only loses."""
    import eppo_envs.example.guess_number  # noqa: F401  (registers the task)

    policy = HFPolicy("tiny", device="cpu")
    rc = RolloutConfig(group_size=2, max_turns=10, max_new_tokens=16, max_total_tokens=1024, progress=False,
                       seed=0)
    pool = LocalEnvPool({GUESS: {"low": 1, "high": 1000}})
    problems = [Problem(GUESS, "train", seed) for seed in (3, 4, 5)]
    result = run_rollout(policy, pool, problems, rc)
    yield policy, pool, rc, result
    pool.close()


def test_every_losing_group_gets_one_winning_expert_member(guess_rollout):
    policy, pool, rc, result = guess_rollout
    assert not any(s.won for s in result.samples)
    guidance = expert_guidance(result.samples, pool, policy.tokenizer, rc, max_reply_tokens=256)
    groups = {s.group_id for s in result.samples}
    assert {s.group_id for s in guidance.samples} == groups
    assert len(guidance.samples) == len(groups)  # one whole-episode sample per group
    task = result.samples[0].task
    assert guidance.per_task == {task: {"losing_groups": 3.0, "guided_groups": 3.0}}
    for s in guidance.samples:
        assert s.won and s.reward == 1.0 and s.episode_id == f"{s.group_id}#expert"
        replies = [policy.tokenizer.decode(s.input_ids[a:b]) for a, b in s.meta["turn_spans"]]
        assert all("<answer>" in r for r in replies)  # the expert's own moves, in the policy's chat format
        assert sum(s.loss_mask) == sum(b - a for a, b in s.meta["turn_spans"])  # only its replies are trained
    # Dr. GRPO: the expert's win stands against G losses
    adv = compute_advantages(result.samples + guidance.samples, scale_by_std=False, filter_zero_variance=True)
    by_member = {s.episode_id.rsplit("#", 1)[1]: s.advantage for s in adv.samples if s.group_id == GUESS + "|train|3"}
    assert by_member == pytest.approx({"0": -1 / 3, "1": -1 / 3, "expert": 2 / 3})


def test_an_expert_reply_over_the_reply_budget_is_not_used(guess_rollout):
    policy, pool, rc, result = guess_rollout
    tight = replace(rc, max_new_tokens=4)  # the expert's `<answer>500</answer>` and its end token need more
    guidance = expert_guidance(result.samples, pool, policy.tokenizer, tight, max_reply_tokens=256)
    assert guidance.samples == []
    assert next(iter(guidance.per_task.values())) == {"losing_groups": 3.0, "guided_groups": 0.0}


def test_guidance_needs_recomputed_old_logprobs():
    assert load_config("tiny", ["algo.expert_guidance=true"]).algo.expert_guidance
    with pytest.raises(ConfigError, match="algo.expert_guidance needs learner.recompute_old_logprobs"):
        load_config("tiny", ["algo.expert_guidance=true", "learner.recompute_old_logprobs=false"])
