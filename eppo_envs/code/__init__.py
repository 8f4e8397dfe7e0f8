"""Code with unit tests (`eppo/Code-v0`): HumanEval (test) and generated problems (train), run in the sandbox."""

import eppo_envs

eppo_envs.register(
    "eppo/Code-v0",
    entry_point="eppo_envs.code.env:CodeEnv",
    task="code",
    description="Write a Python function; unit tests run in the sandbox, failing-test feedback, 3 attempts",
    max_episode_steps=6,
)
