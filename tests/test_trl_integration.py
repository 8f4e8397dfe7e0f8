"""The TRL adapters: `EppoToolEnv` (environment_factory) plays the expert and owns the reward, the dataset names
its episodes, and (slow) examples/trl_grpo.py really trains the tiny model from env rewards."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import eppo_envs
import eppo_envs.example.guess_number  # noqa: F401
from eppo_envs.integrations.trl import (
    EPISODE_KEY,
    EppoToolEnv,
    env_reward_funcs,
    environment_factory,
    episode_dataset,
)

ROOT = Path(__file__).resolve().parents[1]
GUESS = "example/GuessNumber-v0"


def test_environment_factory_plays_the_expert_and_owns_the_reward():
    env = environment_factory(GUESS)()
    # What GRPOTrainer reads off the class: reset, get_reward, and the public methods it turns into tools.
    public = {n for n, _ in inspect.getmembers(EppoToolEnv, predicate=inspect.isfunction) if not n.startswith("_")}
    assert public == {"reset", "act", "get_reward"}
    prompt = env.reset(seed=4, split="test")
    assert "<answer>N</answer>" in prompt
    local = eppo_envs.make(GUESS)
    local.reset(seed=4, options={"split": "test"})
    replies = []
    for _ in range(10):
        move = local.unwrapped.expert_action()
        _, _, terminated, _, _ = local.step(move)
        replies.append(env.act(move))
        if terminated:
            break
    assert replies[-1].startswith("Correct!") and "episode is over" in replies[-1]
    assert env.get_reward() == 1.0
    assert env.act("<answer>1</answer>") == "The episode is over."
    env.reset(seed=4, split="test")
    assert env.get_reward() == 0.0


def test_episode_dataset_and_reward_funcs_keep_the_task():
    data = episode_dataset(GUESS, [0, 1, 2], split="test", low=1, high=3)
    assert data["seed"] == [0, 1, 2] and set(data["task"]) == {"guess_number"}
    tag = json.loads(data[1]["prompt"][0][EPISODE_KEY])
    assert tag == {"env_id": GUESS, "split": "test", "seed": 1, "url": None, "kwargs": {"low": 1, "high": 3}}
    guess, math = env_reward_funcs(["guess_number", "math"])
    assert guess.__name__ == "env_reward_guess_number"
    rewards, tasks = [1.0, 0.0, 0.5], ["guess_number", "math", "guess_number"]
    assert guess(env_reward=rewards, task=tasks) == [1.0, None, 0.5]
    assert math(env_reward=rewards, task=tasks) == [None, 0.0, None]


@pytest.mark.slow
def test_example_trains_the_tiny_model_from_env_rewards(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "trl_grpo.py"), "--steps", "4", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1500,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["max_weight_change"] > 0
    steps = [h for h in summary["log_history"] if "reward" in h]
    assert len(steps) == 4
    assert any(h["reward_std"] > 0 and h["loss"] != 0 for h in steps)  # some group had a learning signal
    episodes = summary["episodes"]
    assert len(episodes) == 4 * 8 and {e["task"] for e in episodes} == {"guess_number", "math"}
    # The logged reward of each step is the mean of its episodes' env rewards...
    for n, h in enumerate(steps):
        batch = episodes[n * 8:(n + 1) * 8]
        assert h["reward"] == pytest.approx(sum(e["total_reward"] for e in batch) / 8, abs=1e-6)
    # ...and replaying an episode's actions on a fresh local env gives the same rewards: they are the env's.
    kwargs = {"example/GuessNumber-v0": {"low": 1, "high": 3}, "eppo/MathTool-v0": {}}
    for e in episodes[:8]:
        env = eppo_envs.make(e["env_id"], **kwargs[e["env_id"]])
        env.reset(seed=e["seed"], options={"split": e["split"]})
        assert [env.step(a)[1] for a in e["actions"]] == e["rewards"]
        env.close()


def test_rollout_func_through_a_server_returns_aligned_tokens_and_env_rewards(tmp_path):
    """`EppoRollout` called by a real GRPOTrainer (tiny model) on GuessNumber 1..3 served with --env-arg-style
    kwargs: token lists line up, the model's tokens (mask 1) are exactly its replies, rewards are the env's."""
    pytest.importorskip("trl")
    pytest.importorskip("openenv.core.env_server")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from eppo_envs.integrations.trl import EppoRollout
    from eppo_envs.remote.server import ServerConfig
    from eppo_train.policy.models import tiny_model_dir
    from tests.remote_helpers import in_thread

    kwargs = {"low": 1, "high": 3}
    with in_thread(ServerConfig(GUESS, env_kwargs=kwargs)) as (url, _):
        data = episode_dataset(GUESS, [0, 1], split="train", url=url)
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir())
        tokenizer.padding_side = "left"
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
        rollout = EppoRollout(max_turns=3, max_new_tokens=8, max_completion_tokens=128)
        args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                          report_to="none", use_cpu=True, save_strategy="no")
        trainer = GRPOTrainer(model=model, reward_funcs=env_reward_funcs(["guess_number"]), args=args,
                              train_dataset=data, processing_class=tokenizer, rollout_func=rollout)
        out = rollout([row["prompt"] for row in data], trainer)
        rollout.close()
    assert len(out["prompt_ids"]) == 2 and out["task"] == ["guess_number", "guess_number"]
    for n, log in enumerate(rollout.logs):
        ids, mask = out["completion_ids"][n], out["env_mask"][n]
        assert len(ids) == len(mask) == len(out["logprobs"][n]) and mask[0] == 1
        assert all(lp == 0.0 for lp, m in zip(out["logprobs"][n], mask, strict=True) if m == 0)
        model_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True)
        assert model_text == "".join(log.actions)
        assert out["env_reward"][n] == log.total_reward
        local = eppo_envs.make(GUESS, **kwargs)  # the same episode in-process gives the same rewards
        local.reset(seed=log.seed, options={"split": "train"})
        assert [local.step(a)[1] for a in log.actions] == log.rewards
        local.close()
