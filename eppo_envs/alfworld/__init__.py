"""ALFWorld on TextWorld's PDDL engine, with problems generated from the floorplans bundled in `alfworld`.

Importing this package registers `eppo/ALFWorld-v0` (the env module is imported on `make`). See docs/alfworld.md.
"""

import eppo_envs

eppo_envs.register(
    "eppo/ALFWorld-v0",
    entry_point="eppo_envs.alfworld.env:AlfWorldEnv",
    task="alfworld",
    description="ALFWorld household tasks (six types) on TextWorld's PDDL engine",
    max_episode_steps=50,
)
