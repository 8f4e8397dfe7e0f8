"""Every task served over HTTP on 127.0.0.1: the conformance suite through `eppo_envs.remote.connect`, and a remote
episode identical to a local one. Cheap tasks run in the default suite; the heavy ones are `slow`."""

from __future__ import annotations

import os

import pytest

import eppo_envs
import eppo_envs.example.guess_number  # noqa: F401  (the servers import it too, with --import)
import eppo_envs.remote as remote
from eppo_envs.core import conformance
from eppo_envs.core.record import json_safe
from tests.remote_helpers import served

pytest.importorskip("openenv.core.env_server")

CHEAP = {"example/GuessNumber-v0", "eppo/MathTool-v0"}
NO_CHROMIUM = not os.path.exists("/usr/bin/chromium")


def _param(env_id: str):
    marks = [] if env_id in CHEAP else [pytest.mark.slow]
    if "Browser" in env_id:
        marks += [pytest.mark.browser, pytest.mark.skipif(NO_CHROMIUM, reason="no /usr/bin/chromium")]
    return pytest.param(env_id, marks=marks)


ALL = [_param(env_id) for env_id in eppo_envs.tasks()]


def _episode(env, seed: int, split: str, actions: list[str] | None = None, max_steps: int = 60):
    """Play `actions` (or the env's expert) from (split, seed); return the transcript and the actions taken."""
    obs, info = env.reset(seed=seed, options={"split": split})
    transcript: list = [obs, json_safe(info)]
    taken: list[str] = []
    for n in range(max_steps):
        action = actions[n] if actions is not None else env.unwrapped.expert_action()
        obs, reward, terminated, truncated, info = env.step(action)
        taken.append(action)
        transcript.append((obs, reward, terminated, truncated, json_safe(info)))
        if terminated or truncated or (actions is not None and n + 1 == len(actions)):
            break
    return transcript, taken


@pytest.mark.parametrize("env_id", ALL)
def test_remote_episode_equals_local(env_id):
    """Same (split, seed), same actions (the expert's, then one malformed reply): same text, rewards and info."""
    local = eppo_envs.make(env_id)
    split = local.unwrapped.eval_split
    with served(env_id) as (url, _):
        client = remote.connect(url)
        try:
            for seed in (0, 1):
                remote_run, actions = _episode(client, seed, split)
                local_run, _ = _episode(local, seed, split, actions)
                assert remote_run == local_run
                bad = ["", "<nonsense>", "x" * 100_000]
                assert _episode(client, seed, split, bad)[0] == _episode(local, seed, split, bad)[0]
        finally:
            client.close()
            local.close()


@pytest.mark.parametrize("env_id", ALL)
def test_conformance_over_http(env_id):
    """The unchanged conformance suite, pointed at the server through the client's Gymnasium id."""
    browser = "Browser" in env_id
    with served(env_id) as (url, _):
        conformance.check_gymnasium(remote.REMOTE_ID, url=url)
        conformance.check_determinism(remote.REMOTE_ID, seeds=(0, 1) if browser else (0, 1, 7), url=url)
        conformance.check_expert(remote.REMOTE_ID, seeds=(0,) if browser else (0, 1, 2), url=url)
        conformance.check_malformed(remote.REMOTE_ID, count=60 if browser else 500, url=url)


@pytest.mark.slow
def test_interop_doc_snippets_run_against_a_real_server():
    """docs/interop.md's python and curl snippets, with the doc's placeholder URL replaced by a live server's."""
    import re
    import subprocess
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "interop.md").read_text()
    python_blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    curl_block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) if "curl" in b)
    assert len(python_blocks) >= 2
    with served("eppo/MathTool-v0") as (url, _):
        for n, block in enumerate(python_blocks):
            if "127.0.0.1:40123" in block:
                exec(compile(block.replace("http://127.0.0.1:40123", url), f"interop block {n}", "exec"), {})
        script = curl_block.replace("http://127.0.0.1:40123", url)
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert '"instance_id":"math/test/' in proc.stdout and '"closed":true' in proc.stdout
