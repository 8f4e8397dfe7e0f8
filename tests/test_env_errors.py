"""A task that raises or breaks its contract is said, not trained on or scored in silence.

An env that raises inside `step` ends that episode unwon (one bad instance must not take a training batch down),
and says so: a plugin task that raises on every step must not train at 0 in silence, nor `eppo-eval` print a table
of zeros with exit 0. The same holds for a task whose hook returns the wrong types (`TaskError`, on every step)."""

from __future__ import annotations

import pytest

import eppo_envs
from eppo_envs.core import AgentEnv, StepResult, TaskError
from eppo_train.eval import cli as eval_cli
from eppo_train.eval.evaluation import summarise
from eppo_train.rollout.env_pool import EnvJob, LocalEnvPool
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout


class _Flaky(AgentEnv):
    """Raises on instance 1's step, works on the others."""

    task = "flaky"
    tool_tags = ("answer",)
    action_hint = "Reply with <answer>N</answer>."

    def num_instances(self, split: str) -> int:
        return 4

    def load_instance(self, split: str, index: int) -> tuple[str, str, dict]:
        self.index = index
        return "Say 1.", "Go.", {}

    def transition(self, text: str) -> StepResult:
        if self.index == 1:
            raise ValueError("the shop's index is missing\nsecond line")
        return StepResult("Right.", reward=1.0, terminated=True, won=True)

    def expert_action(self) -> str:
        return "<answer>1</answer>"


class _Broken(_Flaky):
    task = "broken"

    def transition(self, text: str):  # Gymnasium's 5-tuple instead of a StepResult
        return "obs", 1.0, True, False, {}


@pytest.fixture(autouse=True)
def _registered():
    """The two tasks exist only during this file's tests (other tests list the registered ids)."""
    import gymnasium as gym

    from eppo_envs.core import registry

    ids = ("testlab/Flaky-v0", "testlab/Broken-v0")
    eppo_envs.register(ids[0], entry_point=_Flaky, task="flaky", max_episode_steps=3)
    eppo_envs.register(ids[1], entry_point=_Broken, task="broken", max_episode_steps=3)
    yield
    for env_id in ids:
        gym.registry.pop(env_id, None)
        registry._SPECS.pop(env_id, None)


def _step_all(pool: LocalEnvPool, env_id: str, seeds: list[int]) -> list:
    pool.reset([EnvJob(i, env_id, "train", s) for i, s in enumerate(seeds)])
    return pool.step(list(range(len(seeds))), ["<answer>1</answer>"] * len(seeds))


def test_an_env_that_raises_ends_its_episode_and_is_said_once_per_task_and_error(capsys):
    pool = LocalEnvPool()
    try:
        first = _step_all(pool, "testlab/Flaky-v0", [0, 1, 2, 1])
        again = _step_all(pool, "testlab/Flaky-v0", [1])
    finally:
        pool.close()
    assert [o[4]["won"] for o in first] == [True, False, True, False]
    assert first[1][3] is True and first[1][4]["env_error"].startswith("ValueError: the shop's index is missing")
    assert again[0][4]["env_error"]
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["warning: testlab/Flaky-v0.step raised ValueError: the shop's index is missing; the episode ends "
                     "unwon (said once; every such episode counts in env_errors)"]


def test_env_errors_are_counted_in_the_rollout_stats_and_the_evaluation_report():
    from eppo_train.policy.agents import ExpertAgent

    pool = LocalEnvPool()
    try:
        result = run_rollout(ExpertAgent(), pool, [Problem("testlab/Flaky-v0", "train", s) for s in range(4)],
                             RolloutConfig(group_size=1, max_turns=3))
    finally:
        pool.close()
    assert result.stats["per_task"]["flaky"]["env_errors"] == 1
    assert result.stats["per_task"]["flaky"]["success"] == 0.75
    report = summarise(result.episodes)
    assert report["env_errors"] == 1 and report["success"] == 0.75


def test_a_task_that_breaks_its_contract_stops_the_rollout():
    pool = LocalEnvPool()
    try:
        with pytest.raises(TaskError, match=r"_Broken.transition returned a tuple of 5"):
            _step_all(pool, "testlab/Broken-v0", [0])
    finally:
        pool.close()


def test_eppo_eval_names_a_broken_task_in_one_line(capsys):
    rc = eval_cli.main(["--policy", "expert", "--tasks", "testlab/Broken-v0", "--episodes", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("eppo-eval: error: _Broken.transition returned a tuple of 5")
    assert not any("Traceback" in line for line in err)
