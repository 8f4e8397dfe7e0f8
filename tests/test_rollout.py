"""The lockstep agent loop on the example task: token bookkeeping (masks over sampled tokens only), context modes,
clean truncation, GRPO groups, and text-only agents through the same loop."""

from __future__ import annotations

import pytest

import eppo_envs.example.guess_number  # noqa: F401  (registers example/GuessNumber-v0)
from eppo_train.config import RolloutSection
from eppo_train.policy.agents import ExpertAgent, RandomAgent
from eppo_train.policy.hf import HFPolicy
from eppo_train.rollout.env_pool import LocalEnvPool
from eppo_train.rollout.loop import FULL, ContextMode, Problem, RolloutConfig, run_rollout

ENV = "example/GuessNumber-v0"


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    return HFPolicy("tiny", device="cpu")


@pytest.fixture()
def pool():
    with LocalEnvPool() as p:
        yield p


def _problems(n: int = 2) -> list[Problem]:
    return [Problem(ENV, "train", seed) for seed in range(n)]


def test_expert_through_the_loop_wins_and_reports_stats(pool):
    result = run_rollout(ExpertAgent(), pool, _problems(3), RolloutConfig(group_size=2, max_turns=10, progress=False))
    assert len(result.episodes) == 6 and not result.samples  # text agents give episodes, no training samples
    assert all(e.won and e.terminated for e in result.episodes)
    stats = result.stats["per_task"]["guess_number"]
    assert stats["success"] == 1.0 and stats["mean_reward"] == 1.0 and stats["invalid_rate"] == 0.0
    assert result.stats["turns"] == sum(e.num_steps for e in result.episodes)


def test_random_agent_is_repeatable_and_uses_the_tool_format(pool):
    cfg = RolloutConfig(group_size=2, max_turns=3, progress=False)
    a = run_rollout(RandomAgent(seed=1), pool, _problems(), cfg)
    b = run_rollout(RandomAgent(seed=1), pool, list(reversed(_problems())), cfg)
    key = lambda r: sorted((e.seed, tuple(t.action for t in e.turns)) for e in r.episodes)  # noqa: E731
    assert key(a) == key(b)
    assert all(t.action.startswith("<answer>") for e in a.episodes for t in e.turns)
    assert all(e.truncated and e.num_steps == 3 for e in a.episodes)  # out of turns -> truncated


def test_full_context_masks_exactly_the_sampled_tokens(policy, pool):
    cfg = RolloutConfig(group_size=2, max_turns=3, max_new_tokens=12, max_total_tokens=1024, temperature=1.0,
                        seed=0, progress=False)
    result = run_rollout(policy, pool, _problems(), cfg)
    assert len(result.samples) == len(result.episodes) == 4
    by_id = {s.episode_id: s for s in result.samples}
    for episode, sample in zip(result.episodes, result.samples, strict=True):  # full mode: same order
        assert sample.group_id == f"{ENV}|train|{episode.seed}"
        spans = sample.meta["turn_spans"]
        assert len(spans) == sample.num_turns == len(sample.meta["step_rewards"])
        assert sum(sample.loss_mask) == sum(e - s for s, e in spans) == sample.num_response_tokens
        for (start, end), turn in zip(spans, episode.turns, strict=True):
            assert policy.tokenizer.decode(sample.input_ids[start:end], skip_special_tokens=True) == turn.action
            assert all(sample.loss_mask[start:end]) and all(lp < 0 for lp in sample.old_logprobs[start:end])
        masked_out = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if not m]
        text_out = policy.tokenizer.decode(masked_out)
        assert episode.instruction in text_out  # prompt and observations are context, never trained on
        for turn in episode.turns[:-1]:
            assert turn.observation in text_out
        assert all(lp == 0.0 for lp, m in zip(sample.old_logprobs, sample.loss_mask, strict=True) if not m)
    assert len(by_id) == 4  # one sample per episode, unique episode ids
    groups = {s.group_id for s in result.samples}
    assert len(groups) == 2  # G=2 samples per (env, split, seed)
    assert result.stats["tokens_generated"] == sum(s.num_response_tokens for s in result.samples)


def test_window_context_gives_one_sample_per_turn_with_bounded_history(policy, pool):
    cfg = RolloutConfig(group_size=1, max_turns=4, max_new_tokens=8, context={"guess_number": ContextMode("window", 1)},
                        seed=1, progress=False)
    result = run_rollout(policy, pool, _problems(1), cfg)
    episode = result.episodes[0]
    assert [s.turn_index for s in result.samples] == list(range(episode.num_steps))
    last = result.samples[-1]
    prompt_text = policy.tokenizer.decode([t for t, m in zip(last.input_ids, last.loss_mask, strict=True) if not m])
    assert episode.instruction in prompt_text  # the first user message always stays
    if episode.num_steps >= 3:
        # a window of 1 keeps only the latest exchange: the first turn's raw reply is gone from the last prompt
        assert prompt_text.count("<|im_start|>assistant") == 2
    for sample in result.samples:
        assert sample.loss_mask[-sample.num_response_tokens :] == [1] * sample.num_response_tokens


def test_overflowing_episodes_are_truncated_cleanly(policy, pool):
    cfg = RolloutConfig(group_size=2, max_turns=6, max_new_tokens=40, max_total_tokens=150, seed=2, progress=False)
    result = run_rollout(policy, pool, _problems(), cfg)
    assert all(len(s.input_ids) <= 150 for s in result.samples)
    assert all(e.truncated for e in result.episodes if not e.won)
    assert result.stats["per_task"]["guess_number"]["overflow"] > 0


def test_context_mode_is_typed_and_validated():
    with pytest.raises(ValueError, match=">= 1 exchanges"):
        ContextMode("window", 0)
    with pytest.raises(ValueError, match="full, window"):
        ContextMode("windo", 2)
    cfg = RolloutConfig(context={ENV: ContextMode("window", 3)})
    assert cfg.context_mode("guess_number", ENV) == ContextMode("window", 3)
    assert cfg.context_mode("other", "other/Env-v0") == FULL


def test_one_rollout_config_with_the_config_sections_defaults():
    section = RolloutSection(group_size=3, max_new_tokens=12)
    rc = RolloutConfig.from_section(section, seed=5)
    assert isinstance(rc, RolloutSection) and (rc.group_size, rc.max_new_tokens, rc.seed) == (3, 12, 5)
    defaults = RolloutConfig()
    assert (defaults.group_size, defaults.max_new_tokens, defaults.max_total_tokens) == (
        RolloutSection().group_size, RolloutSection().max_new_tokens, RolloutSection().max_total_tokens)


def test_episodes_and_samples_carry_the_label_they_are_given(policy, pool):
    cfg = RolloutConfig(group_size=2, max_turns=2, max_new_tokens=8, labels={ENV: "guess_tagged"}, seed=3,
                        progress=False)
    result = run_rollout(policy, pool, _problems(1), cfg)
    assert {e.task for e in result.episodes} == {"guess_tagged"}
    assert {s.task for s in result.samples} == {"guess_tagged"}
    assert set(result.stats["per_task"]) == {"guess_tagged"}


def test_a_task_with_its_own_reply_budget_gets_exactly_that_budget(policy, pool):
    """`env.tasks[].max_new_tokens`: replies of that task stop at its budget, the other task's at the rollout's."""
    from eppo_train.config import ConfigError, from_dict
    from eppo_train.rollout.task_slots import prepare_tasks, rollout_config

    cfg = from_dict({"env": {"tasks": [{"id": ENV, "name": "short", "max_new_tokens": 3}, {"id": ENV, "name": "long"}]},
                     "rollout": {"max_new_tokens": 12, "max_turns": 2, "group_size": 2, "progress": False}})
    slots = prepare_tasks(cfg)
    rc = rollout_config(cfg, slots, 0)
    assert rc.sampling().max_new_tokens == 12  # the widest budget; each row is capped by its own
    problems = [Problem(s.env_id, "train", seed) for s in slots for seed in range(2)]
    result = run_rollout(policy, pool, problems, rc)
    lengths = {task: [t.info["response_tokens"] for e in result.episodes if e.task == task for t in e.turns]
               for task in ("short", "long")}
    assert lengths["short"] and max(lengths["short"]) <= 3
    assert max(lengths["long"]) > 3 and max(lengths["long"]) <= 12  # the random tiny model runs to its cap
    with pytest.raises(ConfigError, match=r"env.tasks.0.max_new_tokens"):
        from_dict({"env": {"tasks": [{"id": ENV, "max_new_tokens": 0}]}})
