"""The code sandbox: runs untrusted, model-written Python under bubblewrap with rlimits and a wall-clock timeout.

    from eppo_envs.tools.sandbox import run_python
    result = run_python("print(2 ** 10)")
    result.stdout, result.reason        # ('1024\\n', 'ok')

See docs/sandbox.md for what is isolated, the limits, and the unsafe rlimit-only fallback.
"""

from eppo_envs.tools.sandbox.config import DEFAULT_PACKAGES, Limits, Reason, RunResult, SandboxConfig
from eppo_envs.tools.sandbox.layout import SandboxSetupError
from eppo_envs.tools.sandbox.runner import UNSAFE_ENV, Sandbox, default_sandbox, run_python

__all__ = [
    "DEFAULT_PACKAGES",
    "UNSAFE_ENV",
    "Limits",
    "Reason",
    "RunResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxSetupError",
    "default_sandbox",
    "run_python",
]
