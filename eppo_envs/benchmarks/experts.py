"""Expert throughput: each task played by its own oracle, timed (steps/s) with its success rate and mean reward.

    from eppo_envs.benchmarks.experts import run_expert
    run_expert("example/GuessNumber-v0", None, 5)    # {'env_id': ..., 'success_rate': 1.0, 'steps_per_s': ...}
"""

from __future__ import annotations

import time

import eppo_envs
from eppo_envs.core import expert_policy, play_episode


def run_expert(env_id: str, split: str | None, episodes: int, first_seed: int = 0) -> dict:
    """Play the expert on seeds first_seed.. and return the figures `eppo-envs expert|bench` and `make bench` print."""
    env = eppo_envs.make(env_id)
    split = split or env.unwrapped.eval_split  # None: the env's own evaluation split
    policy = expert_policy(env)
    steps = 0
    results = []
    start = time.perf_counter()
    try:
        for seed in range(first_seed, first_seed + episodes):
            episode = play_episode(env, policy, seed=seed, split=split)
            steps += episode.num_steps
            results.append(episode)
        elapsed = time.perf_counter() - start  # play only: closing a browser env takes seconds
    finally:  # a Ctrl-C too: the env's sandbox, server or browser goes now, not at interpreter exit
        env.close()
    return {
        "env_id": env_id,
        "split": split,
        "episodes": episodes,
        "success_rate": sum(e.won for e in results) / max(episodes, 1),
        "mean_reward": sum(e.total_reward for e in results) / max(episodes, 1),
        "mean_steps": steps / max(episodes, 1),
        "steps_per_s": steps / elapsed if elapsed > 0 else float("nan"),
        "lost": [e.instance_id for e in results if not e.won],
    }
