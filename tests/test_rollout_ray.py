"""Env workers over Ray: the same episodes as in-process, and a killed worker is replaced without changing them."""

from __future__ import annotations

import json
import time

import pytest

import eppo_envs.example.guess_number  # noqa: F401
from eppo_train.policy.agents import RandomAgent
from eppo_train.rollout.env_pool import EnvJob, LocalEnvPool, RayEnvPool
from eppo_train.rollout.loop import Problem, RolloutConfig, run_rollout
from eppo_train.runtime.ray_cluster import init_ray

ray = pytest.importorskip("ray")
ENV = "example/GuessNumber-v0"


@pytest.fixture(scope="module")
def ray_session():
    init_ray(num_cpus=2)
    yield
    ray.shutdown()


def _transcripts(result) -> list:
    return sorted((e.seed, [(t.action, t.observation, t.reward) for t in e.turns]) for e in result.episodes)


def _wait_until_dead(actor, attempts: int = 100) -> None:
    for _ in range(attempts):
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor is still answering")


def _kill(actor) -> None:
    """ray.kill is asynchronous: return once the actor really is dead, so the next call meets a dead worker."""
    ray.kill(actor)
    _wait_until_dead(actor)


def test_ray_pool_matches_local_and_survives_a_killed_worker(ray_session):
    problems = [Problem(ENV, "test", seed) for seed in range(3)]
    cfg = RolloutConfig(group_size=2, max_turns=4, progress=False)
    local = run_rollout(RandomAgent(), LocalEnvPool(), problems, cfg)
    pool = RayEnvPool(2)
    try:
        remote = run_rollout(RandomAgent(), pool, problems, cfg)
        assert _transcripts(remote) == _transcripts(local)

        # Mid-episode: two steps, kill worker 0, step again. The new worker replays the first two actions.
        jobs = [EnvJob(slot, ENV, "test", 5) for slot in range(2)]
        reference = LocalEnvPool()
        assert pool.reset(jobs) == reference.reset(jobs)
        actions = ["<answer>50</answer>", "<answer>25</answer>", "<answer>75</answer>"]
        for action in actions[:2]:
            assert pool.step([0, 1], [action] * 2) == reference.step([0, 1], [action] * 2)
        _kill(pool.workers[0])
        assert pool.step([0, 1], [actions[2]] * 2) == reference.step([0, 1], [actions[2]] * 2)
        assert pool.restarts == 1
    finally:
        pool.close()


def test_eval_numbers_do_not_depend_on_the_worker_count(ray_session, tmp_path):
    from eppo_train.eval.cli import main

    reports = []
    for workers in ("0", "2"):
        out = tmp_path / f"w{workers}.json"
        args = ["--policy", "random", "--tasks", "guess_number", "--import", "eppo_envs.example.guess_number",
                "--episodes", "4", "--max-turns", "3", "--workers", workers, "--no-progress", "--json", str(out)]
        assert main(args) == 0
        report = json.loads(out.read_text())
        report.pop("timing")
        reports.append(report)
    assert reports[0] == reports[1]


def test_a_resource_no_node_offers_fails_in_one_line(ray_session):
    from eppo_train.config import ConfigError

    with pytest.raises(ConfigError) as err:
        RayEnvPool(1, resources={"env": 1})
    message = str(err.value)
    assert "\n" not in message and "'env'" in message and "ray start --resources" in message


def test_a_local_ray_offers_the_custom_resources_a_cluster_config_asks_for():
    from eppo_train.config import load_config
    from eppo_train.learner.workers import local_resources

    cfg = load_config("tiny", ["env.num_workers=3", "ray.resources_per_worker={env: 1}",
                               "ray.generator_resources={gpu_node: 1}", "ray.learner_resources={gpu_node: 0.5}"])
    assert local_resources(cfg) == {"env": 3.0, "gpu_node": 1.5}
    assert local_resources(load_config("tiny")) == {}


def test_a_dead_actor_is_one_line_naming_it(ray_session):
    """The generator or the learner actor killed under a run (OOM, `kill -9`, its node gone): the call that meets it
    raises `WorkerLost`, one line naming which actor, not Ray's multi-line ActorDiedError (eppo-train prints it
    with the resume hint, exit 1)."""
    from eppo_train.config import load_config
    from eppo_train.learner.workers import RayWorkers
    from eppo_train.policy.base import SamplingParams
    from eppo_train.runtime.interrupt import WorkerLost

    workers = RayWorkers(load_config("tiny", ["ray.actor_cpus=0.5", "ray.torch_threads=1"]))
    try:
        greedy = SamplingParams(max_new_tokens=2, temperature=0.0)
        assert len(workers.policy.generate([[1, 2, 3]], greedy)) == 1  # both actors up
        workers.sync_weights()
        ray.kill(workers.learner)
        _wait_until_dead(workers.learner)
        with pytest.raises(WorkerLost, match=r"^the learner actor died \(") as err:
            workers.train([])
        assert "\n" not in str(err.value)
        ray.kill(workers.gen)
        _wait_until_dead(workers.gen)
        with pytest.raises(WorkerLost, match=r"^the generator actor died \(") as err:
            workers.policy.generate([[1, 2, 3]], greedy)
        assert "\n" not in str(err.value)
    finally:
        workers.close()


def test_an_env_worker_that_keeps_dying_is_one_line(ray_session):
    pool = RayEnvPool(1, max_restarts=0)
    try:
        pool.reset([EnvJob(0, ENV, "test", 5)])
        _kill(pool.workers[0])
        from eppo_train.runtime.interrupt import WorkerLost

        with pytest.raises(WorkerLost, match=r"^the env worker 0, replaced 0 times, died \(") as err:
            pool.step([0], ["<answer>50</answer>"])
        assert "\n" not in str(err.value)
    finally:
        pool.close()


def test_an_env_worker_killed_by_a_signal_is_one_warning_line_and_no_ray_report(ray_session, capfd):
    """`kill -9` (or the OOM killer) on an env worker: the rollout goes on (replayed), and the user reads one line
    saying so. Ray's raylet publishes its own report of the death, which its driver would print on stdout a second
    or so later, whatever the command is printing then: a paragraph of lease and worker ids and an OOM how-to (or,
    for a dead raylet, its last 20 log lines), after eppo-train's one-line error as often as before it."""
    import os
    import signal

    pool = RayEnvPool(1)
    try:
        jobs = [EnvJob(slot, ENV, "test", 5) for slot in range(2)]
        reference = LocalEnvPool()
        assert pool.reset(jobs) == reference.reset(jobs)
        assert pool.step([0, 1], ["<answer>50</answer>"] * 2) == reference.step([0, 1], ["<answer>50</answer>"] * 2)
        victim = pool.workers[0]
        os.kill(ray.get(victim.__ray_call__.remote(lambda host: os.getpid())), signal.SIGKILL)
        _wait_until_dead(victim)
        assert pool.step([0, 1], ["<answer>25</answer>"] * 2) == reference.step([0, 1], ["<answer>25</answer>"] * 2)
        assert pool.restarts == 1
        time.sleep(5)  # the raylet's report reaches the driver asynchronously (about a second, measured)
    finally:
        pool.close()
    out, err = capfd.readouterr()
    assert "died" not in out and "raylet" not in out and "raylet" not in err, (out, err)
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: the env worker 0 died (its process ended: killed, out of memory, or its node went "
                        "away); a new one replays its 2 episodes and the rollout goes on"], err



@pytest.mark.parametrize("failure", ["no node in time", "dies too"])
def test_an_env_worker_whose_replacement_fails_is_one_line(ray_session, monkeypatch, failure):
    """Replacing a dead env worker can fail: no node hosts the new one in time, or it dies too (its node, or the
    raylet, is gone). Either is `WorkerLost` (not a RuntimeError or Ray's ActorDiedError), so eppo-train prints its
    one line with the resume hint, not a traceback."""
    from eppo_train.runtime.interrupt import WorkerLost

    pool = RayEnvPool(1)
    try:
        pool.reset([EnvJob(0, ENV, "test", 5)])
        _kill(pool.workers[0])
        if failure == "no node in time":
            pool.respawn_timeout_s = 0.001  # the new actor is not even up by then
            pattern = r"^env worker 0 died and no node could host a replacement within"
        else:
            spawn = pool._spawn

            def dead_on_arrival():
                actor = spawn()
                _kill(actor)
                return actor

            monkeypatch.setattr(pool, "_spawn", dead_on_arrival)
            pattern = r"^the replacement of env worker 0 died \("
        with pytest.raises(WorkerLost, match=pattern) as err:
            pool.step([0], ["<answer>50</answer>"])
        assert "\n" not in str(err.value)
    finally:
        pool.close()


def test_an_env_worker_lost_with_the_last_node_is_one_line_at_once(ray_session, monkeypatch):
    """A local Ray's raylet killed: the replacement can never be placed. eppo-eval (no generator actor to fail
    first) waited the whole respawn_timeout_s (300 s), then blamed the worker's resources."""
    from eppo_train.runtime.interrupt import WorkerLost

    pool = RayEnvPool(1, respawn_timeout_s=60.0)
    try:
        pool.reset([EnvJob(0, ENV, "test", 5)])
        _kill(pool.workers[0])
        # the node is gone: its replacement is never placed, and the cluster has no live node
        monkeypatch.setattr(pool, "_spawn", lambda: pool._actor_cls.options(
            num_cpus=0, resources={"eppo-test-nowhere": 1}).remote(pool.env_kwargs))
        monkeypatch.setattr(pool, "_node_alive", lambda: False, raising=False)
        t0 = time.monotonic()
        with pytest.raises(WorkerLost, match=r"^env worker 0 died with its Ray node .* no node is left"):
            pool.step([0], ["<answer>50</answer>"])
        assert time.monotonic() - t0 < 15
    finally:
        pool.close()
