"""Reward integrity under a policy's attacks on the text tasks: no reply may turn a loss into a win (or a win into a
loss), and a malformed one is refused, not half-read. Each test pins a hole found by attacking the real envs."""

from __future__ import annotations

import pytest
from gymnasium.error import ResetNeeded

import eppo_envs
import eppo_envs.alfworld  # noqa: F401  (registers the ids)
import eppo_envs.example.guess_number  # noqa: F401


def _play_past_the_cap(env_id: str, **kwargs) -> None:
    """Two idle steps hit a cap of 2 (truncated); the expert's next move must be refused, not scored."""
    env = eppo_envs.make(env_id, max_episode_steps=2, **kwargs)
    env.reset(seed=0)
    for _ in range(2):
        _, reward, terminated, truncated, info = env.step("no tool call")
    assert truncated and not terminated and not info["won"]
    for _ in range(6):  # without the guard the expert went on and won on step 4 (ALFWorld) / 3-5 (guess)
        with pytest.raises(ResetNeeded, match=r"truncated.*call reset\(\)"):
            env.step(env.unwrapped.expert_action())
    env.reset(seed=0)  # a new episode steps again
    env.step(env.unwrapped.expert_action())
    env.close()


@pytest.mark.parametrize("env_id, kwargs", [("example/GuessNumber-v0", {}),
                                            ("eppo/ALFWorld-v0", {"split": "valid_unseen"})])
def test_no_step_and_no_win_past_the_step_cap(env_id, kwargs):
    _play_past_the_cap(env_id, **kwargs)


def test_the_remote_session_refuses_a_step_past_the_cap():
    from eppo_envs.remote.environment import EppoEnvironment
    from eppo_envs.remote.models import TextAction

    session = EppoEnvironment("example/GuessNumber-v0", env_kwargs={"max_episode_steps": 1})
    session.reset(seed=0)
    assert session.step(TextAction(text="no tool call")).done
    with pytest.raises(ResetNeeded):  # the server answers 409, as after a terminated episode
        session.step(TextAction(text=session.env.unwrapped.expert_action()))
    session.close()


@pytest.fixture(scope="module")
def alfworld():
    env = eppo_envs.make("eppo/ALFWorld-v0", split="valid_unseen")
    yield env
    env.close()


def test_alfworld_reads_a_bare_command_only_from_a_reply_without_tags(alfworld):
    _, info = alfworld.reset(seed=0)
    target = [a for a in info["admissible_actions"] if a.startswith("go to ")][1]
    # an unclosed tag, or another tool's, is not a command even when its last line is one (it was applied)
    for reply in (f"<action>\n{target}", f"<think>x</think><action>\n{target}\n", f"<answer>\n{target}",
                  f"<search>x</search>\n{target}", f"</action>\n{target}"):
        obs, reward, terminated, _, info = alfworld.step(reply)
        assert not info["action_valid"] and "command" not in info and "You arrive" not in obs, reply
    for reply in (target, f"I will move.\n{target}", f"<think>plan</think>\n{target.upper()}."):  # still tolerated
        alfworld.reset(seed=0)
        obs, _, _, _, info = alfworld.step(reply)
        assert info["action_valid"] and info["command"] == target and obs.startswith("You arrive"), reply
