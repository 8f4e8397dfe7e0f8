"""The conformance suite: what every EPPO task promises, checked the same way for all of them.

`tests/test_conformance.py` runs `check_all` on every registered id; a user runs it on a new task with
`eppo_envs.core.conformance.check_all("mylab/MyTask-v0")`. Each check raises `ConformanceError` with a message
that names the env, the input and what went wrong.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator, Sequence
from typing import Any

from gymnasium.utils.env_checker import check_env

from eppo_envs.core.parsing import TOOL_TAGS
from eppo_envs.core.play import expert_policy, play_episode
from eppo_envs.core.registry import make
from eppo_envs.core.spaces import PRINTABLE

REQUIRED_INFO = ("task", "instance_id", "won", "action_valid")


class ConformanceError(AssertionError):
    pass


def _fail(env_id: str, message: str) -> None:
    raise ConformanceError(f"{env_id}: {message}")


def check_gymnasium(env_id: str, **kwargs: Any) -> None:
    """Gymnasium's own env checker (spaces, reset/step signatures, seeding determinism)."""
    env = make(env_id, **kwargs)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    except Exception as exc:  # the checker raises AssertionError and others; report them all the same way
        _fail(env_id, f"gymnasium check_env failed: {type(exc).__name__}: {exc}")
    finally:
        env.close()


def _check_info(env_id: str, info: dict, where: str, *, on_reset: bool = False) -> None:
    for key in REQUIRED_INFO + (("instruction",) if on_reset else ()):
        if key not in info:
            _fail(env_id, f"info after {where} lacks {key!r} (has {sorted(info)})")


def _check_text(env_id: str, text: object, where: str) -> None:
    if not isinstance(text, str):
        _fail(env_id, f"observation after {where} is {type(text).__name__}, not str")
    bad = {ch for ch in text if ch not in PRINTABLE}
    if bad:
        _fail(env_id, f"observation after {where} has non-printable characters {sorted(bad)[:5]!r}")


def check_determinism(env_id: str, seeds: Sequence[int] = (0, 1, 7), split: str | None = None, **kwargs: Any) -> None:
    """Two fresh envs on the same (split, seed) give the same text, and the same answers to the same actions."""
    envs = [make(env_id, **kwargs) for _ in range(2)]
    split = split or envs[0].unwrapped.eval_split
    try:
        for seed in seeds:
            runs = []
            for env in envs:
                obs, info = env.reset(seed=seed, options={"split": split})
                _check_info(env_id, info, "reset", on_reset=True)
                _check_text(env_id, obs, "reset")
                transcript = [obs, info["instruction"], info["instance_id"]]
                for _ in range(3):
                    action = env.unwrapped.expert_action()
                    obs, reward, terminated, truncated, info = env.step(action)
                    transcript += [obs, reward]
                    if terminated or truncated:
                        break
                runs.append(transcript)
            if runs[0] != runs[1]:
                diff = next(i for i, (a, b) in enumerate(zip(*runs, strict=False)) if a != b)
                _fail(env_id, f"seed {seed}: two runs differ at item {diff}: {runs[0][diff]!r:.200} != {runs[1][diff]!r:.200}")
    finally:
        for env in envs:
            env.close()


def check_expert(env_id: str, seeds: Sequence[int] = (0, 1, 2), split: str | None = None, **kwargs: Any) -> None:
    """The expert wins every sampled instance."""
    env = make(env_id, **kwargs)
    split = split or env.unwrapped.eval_split
    try:
        for seed in seeds:
            episode = play_episode(env, expert_policy(env), seed=seed, split=split)
            if not episode.won:
                last = episode.turns[-1].observation if episode.turns else episode.first_observation
                _fail(env_id, f"expert lost {episode.instance_id} after {episode.num_steps} steps; last: {last!r:.300}")
    finally:
        env.close()


def malformed_actions(tool_tags: Sequence[str], rng: random.Random) -> Iterator[tuple[str, bool]]:
    """Hostile and broken replies, each with whether the env must flag it invalid (`action_valid=False`)."""
    wrong = [t for t in TOOL_TAGS if t not in tool_tags] or ["nonexistent"]
    own = tool_tags[0] if tool_tags else "action"
    fixed = [
        ("", True),
        ("   \n\t ", True),
        ("\x00\x01\x02\xff", True),
        ("x" * 200_000, True),
        ("<" * 10_000, True),
        (f"<{own}>never closed", True),
        (f"<{own}>", True),
        ("<think>I am still thinking", True),
        ("<think>done</think>", True),
        (f"<{wrong[0]}>1+1</{wrong[0]}>", True),
        (f"</{own}>backwards<{own}>", True),
        ("```python\nunterminated", True),
        (f"<{own}>" * 500, True),
        ("\ud800 lone surrogate", True),
    ]
    yield from fixed
    junk = string.printable + "\x00\x07\x1b\u00e9\u4e2d\U0001f600"
    for i in range(500 - len(fixed)):
        kind = i % 5
        if kind == 0:  # random bytes decoded leniently, as a broken tokenizer might produce
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))).decode("latin-1"), True
        elif kind == 1:  # random printable text: may by chance be a valid command, so only "no crash" is required
            yield "".join(rng.choice(junk) for _ in range(rng.randrange(0, 400))), False
        elif kind == 2:  # a tool of another task
            tag = rng.choice(wrong)
            yield f"<{tag}>{''.join(rng.choice(string.ascii_letters) for _ in range(20))}</{tag}>", True
        elif kind == 3:  # an unclosed tag of this task
            yield f"<{own}>{''.join(rng.choice(string.ascii_letters + ' ') for _ in range(50))}", True
        else:  # garbage inside this task's own tag: valid syntax, possibly an unknown command; no crash required
            yield f"<{own}>{''.join(rng.choice(junk) for _ in range(rng.randrange(0, 80)))}</{own}>", False


def check_malformed(env_id: str, count: int = 500, seed: int = 0, **kwargs: Any) -> None:
    """500 random and malformed replies never raise; the broken ones get `action_valid=False` and a how-to."""
    env = make(env_id, **kwargs)
    rng = random.Random(seed)
    unwrapped = env.unwrapped
    hint = unwrapped.action_hint
    try:
        env.reset(seed=seed)
        for n, (action, must_be_invalid) in enumerate(malformed_actions(unwrapped.tool_tags, rng)):
            if n >= count:
                break
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except Exception as exc:
                _fail(env_id, f"step({action!r:.80}) raised {type(exc).__name__}: {exc}")
            _check_text(env_id, obs, f"step({action!r:.60})")
            _check_info(env_id, info, f"step({action!r:.60})")
            if must_be_invalid:
                if info["action_valid"]:
                    _fail(env_id, f"step({action!r:.80}) was accepted as a valid action")
                if hint not in obs:
                    _fail(env_id, f"reply to invalid {action!r:.60} does not say how to act ({hint!r}): {obs!r:.200}")
            if terminated or truncated:
                env.reset(seed=seed + n + 1)
    finally:
        env.close()


def check_all(env_id: str, verbose: bool = True, **kwargs: Any) -> tuple[str, ...]:
    """Run every check (the first failure raises ConformanceError); on success say so and return their names."""
    checks = {"gymnasium": check_gymnasium, "determinism": check_determinism, "expert": check_expert,
              "malformed": check_malformed}
    for check in checks.values():
        check(env_id, **kwargs)
    if verbose:
        print(f"{env_id}: conformance OK ({', '.join(checks)})")
    return tuple(checks)
