"""Every registered task passes the same contract. A new task is covered by registering it: nothing to add here."""

import os

import pytest

import eppo_envs
import eppo_envs.example.bandit  # noqa: F401  (the learning test's bandit)
import eppo_envs.example.guess_number  # noqa: F401  (registers the README's example task, like a user would)
import eppo_envs.testbed  # noqa: F401  (the pace testbed, registered on import like a user's task)
from eppo_envs.core import conformance


def _param(env_id: str):
    """Browser tasks need Debian's headless Chromium: marked `browser`, skipped (not failed) where it is missing."""
    if "Browser" not in env_id:
        return env_id
    missing = not os.path.exists("/usr/bin/chromium")
    return pytest.param(env_id, marks=[pytest.mark.browser, pytest.mark.skipif(missing, reason="no /usr/bin/chromium")])


ENV_IDS = [_param(env_id) for env_id in eppo_envs.tasks()]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_checker(env_id):
    conformance.check_gymnasium(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_text(env_id):
    conformance.check_determinism(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_expert_wins(env_id):
    conformance.check_expert(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_malformed_actions_never_crash(env_id):
    conformance.check_malformed(env_id, count=500)


# The tools action format (docs/models.md): every built-in task declares its tools. The expert plays the same game
# in both formats (same observations, rewards, ends and `won` at every step, so it wins in both), and hostile calls
# (wrong name, bad JSON, extra arguments, a call inside <think>, several calls) are invalid with the tools how-to.
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_expert_plays_the_same_game_in_both_formats(env_id):
    assert conformance.declares_tools(env_id)
    conformance.check_formats_agree(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_malformed_tool_calls_never_crash(env_id):
    conformance.check_malformed(env_id, count=500, action_format="tools")
