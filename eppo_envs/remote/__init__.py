"""Serving EPPO tasks over HTTP (OpenEnv) and using them remotely as Gymnasium envs.

    eppo-envs serve eppo/MathTool-v0 --port 0        # prints its URL
    env = eppo_envs.remote.connect("http://127.0.0.1:PORT")

`eppo_envs.remote.server` needs the `serve` extra (`pip install eppo[serve]`: openenv-core); the client only
needs httpx.
"""

import gymnasium as gym

from eppo_envs.remote.client import RemoteEnv, RemoteError, connect

# A Gymnasium id for the client, so tools that take an id (the conformance suite) run against a server:
#   conformance.check_all(REMOTE_ID, url=url)
REMOTE_ID = "eppo-remote/Remote-v0"
if REMOTE_ID not in gym.registry:
    gym.register(id=REMOTE_ID, entry_point="eppo_envs.remote.client:RemoteEnv")

__all__ = ["REMOTE_ID", "RemoteEnv", "RemoteError", "connect"]
