"""Math with a Python tool (`eppo/MathTool-v0`): reasoning-gym and CHAMP problems, answers graded by math-verify."""

import eppo_envs

eppo_envs.register(
    "eppo/MathTool-v0",
    entry_point="eppo_envs.math.env:MathToolEnv",
    task="math",
    description="Math word problems and equations with a sandboxed Python tool; math-verify grading",
    max_episode_steps=8,
)
