"""The conformance suite: what every EPPO task promises, checked the same way for all of them.

`tests/test_conformance.py` runs `check_all` on every registered id; a user runs it on a new task with
`eppo_envs.core.conformance.check_all("mylab/MyTask-v0")`. Each check raises `ConformanceError` with a message
that names the env, the input and what went wrong. A task that declares tools (`AgentEnv.tools`) is checked in both
action formats (`action_format="tools"` passed on to every check), and the expert must play the same game in both
(`check_formats_agree`).
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator, Sequence
from typing import Any

from gymnasium.utils.env_checker import check_env

from eppo_envs.core.parsing import TOOL_TAGS
from eppo_envs.core.play import expert_policy, play_episode
from eppo_envs.core.registry import env_class, make
from eppo_envs.core.spaces import PRINTABLE
from eppo_envs.core.tools import Tool, call_text, read_call

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


def malformed_calls(tools: Sequence[Tool], rng: random.Random) -> Iterator[tuple[str, bool]]:
    """Hostile and broken replies in the `tools` format, each with whether it must be invalid."""
    tool = tools[0]
    args = {p: "x" for p, _ in tool.parameters}
    good = call_text(tool.name, args)
    fixed = [
        ("", True),
        ("\x00\x01\x02\xff", True),
        ("x" * 200_000, True),
        (tool.render(args), True),  # the tags format's own text is no call
        (f"<tool_call>{json.dumps({'name': tool.name, 'arguments': args})}", True),  # never closed
        ("<tool_call>{\"name\": </tool_call>", True),  # bad JSON
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", True),  # nested past the parser's depth
        ("<tool_call>[1, 2]</tool_call>", True),
        (call_text("no_such_tool", args), True),  # wrong name
        (call_text(tool.name, {**args, "extra": "1"}), True),  # an extra argument
        (call_text(tool.name, {}), True) if args else ("<tool_call>null</tool_call>", True),  # missing arguments
        (call_text(tool.name, {p: ["a"] for p in args}), True) if args else ("<tool_call>1</tool_call>", True),
        ("<tool_call>" + json.dumps({"name": tool.name, "arguments": args, "id": 1}) + "</tool_call>", True),
        ("<tool_call>" + json.dumps({"name": tool.name, "arguments": [1]}) + "</tool_call>", True),
        (f"<think>{good}</think>", True),  # a call inside the reasoning
        (f"<think>let me think {good}", True),  # inside a think block never closed
        (good + "\n" + good, True),  # several calls in one reply
        (call_text(tool.name, {p: f"a{tool.literals()[0] if tool.literals() else '<think>'}b" for p in args}), True),
        ("<tool_call>" * 500, True),
        ("\ud800 lone surrogate", True),
    ]
    yield from fixed
    junk = string.printable + "\x00\x07\x1b\u00e9\u4e2d\U0001f600"
    for i in range(500 - len(fixed)):
        kind = i % 4
        if kind == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))).decode("latin-1"), True
        elif kind == 1:  # a call of another name
            name = "".join(rng.choice(string.ascii_letters) for _ in range(8))
            yield call_text(name, args), name not in {t.name for t in tools}
        elif kind == 2:  # a broken JSON body
            body = json.dumps({"name": tool.name, "arguments": args})
            cut = rng.randrange(1, len(body))
            yield f"<tool_call>{body[:cut]}</tool_call>", True
        else:  # a well-formed call with junk arguments: maybe an unknown command; no crash required
            pick = rng.choice(list(tools))
            yield call_text(pick.name, {p: "".join(rng.choice(junk) for _ in range(rng.randrange(0, 60)))
                                        for p, _ in pick.parameters}), False


def check_malformed(env_id: str, count: int = 500, seed: int = 0, **kwargs: Any) -> None:
    """500 random and malformed replies never raise; the broken ones get `action_valid=False` and a how-to."""
    env = make(env_id, **kwargs)
    rng = random.Random(seed)
    unwrapped = env.unwrapped
    hint = unwrapped.action_hint
    try:
        env.reset(seed=seed)
        replies = (malformed_calls(unwrapped.tools, rng) if getattr(unwrapped, "action_format", "tags") == "tools"
                   else malformed_actions(unwrapped.tool_tags, rng))
        for n, (action, must_be_invalid) in enumerate(replies):
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


def check_formats_agree(env_id: str, seeds: Sequence[int] = (0, 1, 2), split: str | None = None,
                        **kwargs: Any) -> None:
    """The expert played in both action formats: each tools-format reply is read as the tags-format reply (the
    same action), and every step gives the same observation, reward, end and `won`."""
    tags, tools = make(env_id, **kwargs), make(env_id, action_format="tools", **kwargs)
    split = split or tags.unwrapped.eval_split
    try:
        for seed in seeds:
            first = [env.reset(seed=seed, options={"split": split})[0] for env in (tags, tools)]
            if first[0] != first[1]:
                _fail(env_id, f"seed {seed}: the first observation differs between the formats")
            for step in range(200):
                action, call = tags.unwrapped.expert_action(), tools.unwrapped.expert_action()
                read = read_call(call, tools.unwrapped.tools)
                if read.error is not None:
                    _fail(env_id, f"seed {seed} step {step}: the tools-format expert's {call!r:.120} is refused: "
                                  f"{read.error}")
                outs = [tags.step(action), tools.step(call)]
                if outs[0][:4] != outs[1][:4] or outs[0][4]["won"] != outs[1][4]["won"]:
                    _fail(env_id, f"seed {seed} step {step}: tags {action!r:.80} gave {outs[0][:4]!r:.200}, tools "
                                  f"{call!r:.80} gave {outs[1][:4]!r:.200}")
                if outs[0][2] or outs[0][3]:
                    break
    finally:
        tags.close()
        tools.close()


def declares_tools(env_id: str) -> bool:
    return bool(getattr(env_class(env_id), "tools", ()))


def check_all(env_id: str, verbose: bool = True, **kwargs: Any) -> tuple[str, ...]:
    """Run every check (the first failure raises ConformanceError); on success say so and return their names. A
    task with tools is checked in both action formats."""
    checks = {"gymnasium": check_gymnasium, "determinism": check_determinism, "expert": check_expert,
              "malformed": check_malformed}
    for check in checks.values():
        check(env_id, **kwargs)
    names = list(checks)
    if declares_tools(env_id) and kwargs.get("action_format", "tags") == "tags":
        for name, check in checks.items():
            check(env_id, **{**kwargs, "action_format": "tools"})
            names.append(f"{name} (tools)")
        check_formats_agree(env_id, **kwargs)
        names.append("formats agree")
    if verbose:
        print(f"{env_id}: conformance OK ({', '.join(names)})")
    return tuple(names)
