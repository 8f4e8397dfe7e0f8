"""The one agent loop: a batch of problems from several tasks, each played G times, all live episodes in lockstep.

Per turn, every live episode acts in one batched call (`Agent.act`: a token policy's `generate`, or a text-only
agent for evaluation), then every env steps. Token agents get a transcript built by appending token ids (see
`policy/chat.py`), so each `Sample` holds exactly what the sampler conditioned on, with a loss mask over sampled
tokens only. Context per task (`ContextMode`): `full` (the whole transcript, one Sample per episode) or `window`
(the first user message plus the last k exchanges, one Sample per turn). Episodes and samples carry the task label
the caller gives (`RolloutConfig.labels`), so nothing downstream rewrites them.

An episode whose env speaks the tools action format (its reset info carries `tools`) declares them to the chat
template; each reply is read with the template's tool-call syntax (`ChatFormat.parse`) into the canonical call the
env reads, and the observation answering a reply's one call comes back as a `tool` message (`policy/chat.py`).
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from eppo_envs.core import Episode, Turn, first_prompt
from eppo_envs.core.record import TURN_INFO_DROPPED, json_safe
from eppo_train.config import CONTEXT_KINDS, RolloutSection
from eppo_train.core.records import Sample
from eppo_train.core.stats import episode_stats
from eppo_train.policy.agents import Action, Agent, TurnState, as_agent
from eppo_train.policy.base import SamplingParams
from eppo_train.policy.chat import ChatFormat
from eppo_train.policy.tool_calls import parse_reply
from eppo_train.report.ticks import RolloutTick, notify
from eppo_train.rollout.env_pool import EnvJob, EnvPool


@dataclass(frozen=True)
class Problem:
    env_id: str
    split: str
    seed: int

    @property
    def group_id(self) -> str:
        return f"{self.env_id}|{self.split}|{self.seed}"


@dataclass(frozen=True)
class ContextMode:
    """What a token policy sees each turn: `full` (the whole transcript, one Sample per episode) or `window`
    (the first user message plus the last `window` exchanges, one Sample per turn)."""

    kind: str = "full"  # full | window
    window: int = 0  # exchanges kept (window mode, >= 1)

    def __post_init__(self) -> None:
        if self.kind not in CONTEXT_KINDS:
            raise ValueError(f"context mode must be one of {', '.join(CONTEXT_KINDS)}, got {self.kind!r}")
        if self.kind == "window" and self.window < 1:
            raise ValueError(f"a window context keeps >= 1 exchanges, got {self.window}")


FULL = ContextMode()


@dataclass
class RolloutConfig(RolloutSection):
    """The rollout's settings: the config's `rollout` section (same fields, same defaults) plus what the caller
    decides per run: each task's context mode and label, the sampling seed, stop strings."""

    context: dict[str, ContextMode] = field(default_factory=dict)  # task label or env id -> mode (else FULL)
    labels: dict[str, str] = field(default_factory=dict)  # env id -> the task label episodes are tagged with
    reply_tokens: dict[str, int] = field(default_factory=dict)  # env id -> its reply budget (else max_new_tokens)
    stop: tuple[str, ...] = ()
    seed: int | None = None  # sampling seed (turn t uses seed + t)

    @classmethod
    def from_section(cls, section: RolloutSection, **extra: Any) -> RolloutConfig:
        return cls(**{f.name: getattr(section, f.name) for f in fields(RolloutSection)}, **extra)

    def label(self, env_id: str, env_task: str) -> str:
        """The task label of an episode of `env_id`: the caller's, else the env's own task name."""
        return self.labels.get(env_id, env_task)

    def context_mode(self, task: str, env_id: str) -> ContextMode:
        return self.context.get(env_id) or self.context.get(task) or FULL

    def reply_budget(self, env_id: str) -> int:
        """Most new tokens one reply of `env_id` may take (its task's own budget, else `max_new_tokens`)."""
        return self.reply_tokens.get(env_id, self.max_new_tokens)

    def for_expert(self, max_reply_tokens: int) -> RolloutConfig:
        """This config for the task experts (SFT demonstrations, expert-guided groups): one episode per problem, and
        replies up to `max_reply_tokens`, not cut at the policy's budget (a cut reply would send the env text the
        sample does not hold; callers count or drop replies over a task's budget instead)."""
        return replace(self, group_size=1, progress=False, reply_tokens={},
                       max_new_tokens=max(self.max_new_tokens, max_reply_tokens))

    def sampling(self, turn: int = 0) -> SamplingParams:
        """One turn's decoding; its token cap is the largest reply budget (each row is capped by its own)."""
        seed = None if self.seed is None else self.seed + turn
        cap = max([self.max_new_tokens, *self.reply_tokens.values()])
        return SamplingParams(cap, self.temperature, self.top_p, seed, tuple(self.stop))


@dataclass
class RolloutResult:
    samples: list[Sample]
    episodes: list[Episode]
    stats: dict[str, Any]


@dataclass
class _Live:
    """One episode in flight."""

    problem: Problem
    member: int
    slot: int
    episode: Episode
    mode: ContextMode
    observation: str
    info: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[dict] | None = None  # the env's tools (the tools action format), else None
    # token transcript (token agents only): ids, mask, log-probs; spans of each response in `ids`
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    windows: list[tuple[list[int], Action]] = field(default_factory=list)  # window mode: (prompt, response) per turn
    obs_hashes: list[str] = field(default_factory=list)
    done: bool = False
    overflow: bool = False

    @property
    def episode_id(self) -> str:
        return f"{self.problem.group_id}#{self.member}"


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


def _window(messages: list[dict[str, str]], k: int, system: int) -> list[dict[str, str]]:
    """Keep the system/first user messages and the last k (assistant, user) exchanges; alternation is preserved."""
    head = messages[: system + 1]
    exchanges = messages[system + 1 :]
    return head + exchanges[-2 * k :] if len(exchanges) > 2 * k else messages


def run_rollout(
    policy: Agent | Any,
    pool: EnvPool,
    problems: Sequence[Problem],
    cfg: RolloutConfig,
) -> RolloutResult:
    """Play every problem `cfg.group_size` times. `policy`: an Agent, a PolicyBackend or a ChatBackend."""
    agent = as_agent(policy, cfg.sampling())
    fmt = ChatFormat(agent.tokenizer, cfg.system_prompt) if agent.needs_tokens else None
    started = time.perf_counter()
    gen_s = env_s = 0.0
    # Episodes ordered by task so slots (and hence Ray workers) hold a mix of tasks in round-robin.
    order = sorted(((p, g) for p in problems for g in range(cfg.group_size)), key=lambda pg: pg[0].env_id)
    jobs = [EnvJob(slot, p.env_id, p.split, p.seed) for slot, (p, _) in enumerate(order)]
    t = time.perf_counter()
    resets = pool.reset(jobs)
    env_s += time.perf_counter() - t

    lives: list[_Live] = []
    for slot, ((problem, member), (obs, info)) in enumerate(zip(order, resets, strict=True)):
        user = first_prompt(obs, info)
        messages = fmt.start(user) if fmt else _start_messages(user, cfg.system_prompt)
        task = cfg.label(problem.env_id, info["task"])
        episode = Episode(problem.env_id, task, info.get("split", problem.split), problem.seed,
                          info["instance_id"], info.get("instruction", ""), obs)
        tools = info.get("tools") if info.get("action_format") == "tools" else None
        live = _Live(problem, member, slot, episode, cfg.context_mode(task, problem.env_id), obs, info,
                     messages, tools, obs_hashes=[_hash(obs)])
        if fmt is not None:
            live.ids = fmt.prompt_ids(messages, tools)
            live.mask, live.logprobs = [0] * len(live.ids), [0.0] * len(live.ids)
        lives.append(live)

    if fmt is not None and any(live.tools is not None for live in lives):
        fmt.syntax  # noqa: B018  (a template without tool support is its one-line error now, before any generation)
    bar = _progress(len(lives), cfg.progress)
    tokens = 0
    for turn in range(cfg.max_turns):
        states, acting = [], []
        for live in lives:
            if live.done:
                continue
            state = _turn_state(live, turn, fmt, cfg)
            if state.budget <= 0 and fmt is not None:  # no room left for even one token: end it cleanly
                live.done = live.overflow = live.episode.truncated = True
                bar.update(1)
                continue
            states.append(state)
            acting.append(live)
        if not acting:
            break
        if agent.needs_tokens:
            agent.params = cfg.sampling(turn)  # type: ignore[attr-defined]
        t = time.perf_counter()
        actions = agent.act(states, pool)
        gen_s += time.perf_counter() - t
        for live, action in zip(acting, actions, strict=True):
            if live.tools is not None:
                _read_calls(action, fmt)
        t = time.perf_counter()
        outs = pool.step([s.slot for s in states], [a.env_text if a.env_text is not None else a.text for a in actions])
        env_s += time.perf_counter() - t
        for live, state, action, out in zip(acting, states, actions, outs, strict=True):
            _advance(live, state, action, out, fmt)
            if live.done:
                bar.update(1)
        bar.set_postfix(turn=turn + 1, live=sum(not x.done for x in lives))
        tokens += sum(len(a.token_ids or ()) for a in actions)
        notify(RolloutTick(sum(x.done for x in lives), len(lives), tokens, gen_s, turn + 1, agent=agent.name))
    for live in lives:
        if not live.done:  # out of turns
            live.done = live.episode.truncated = True
            bar.update(1)
    bar.close()
    notify(RolloutTick(len(lives), len(lives), tokens, gen_s, cfg.max_turns, final=True, agent=agent.name))
    wall = time.perf_counter() - started
    samples = [s for live in lives for s in _samples(live)] if fmt is not None else []
    episodes = [live.episode for live in lives]
    return RolloutResult(samples, episodes, _stats(lives, samples, gen_s, env_s, wall))


def _read_calls(action: Action, fmt: ChatFormat | None) -> None:
    """Fill a tools-format action's calls and env text from its reply text, where the agent has not (an endpoint
    gives structured calls; a token policy writes them in its template's syntax; a text agent such as the expert
    writes the env's canonical syntax, which is Hermes')."""
    if action.env_text is None or action.calls is None:
        reply = fmt.parse(action.text) if fmt is not None else parse_reply("hermes", action.text)
        action.env_text = reply.env_text if action.env_text is None else action.env_text
        action.calls = reply.calls if action.calls is None else action.calls


def _start_messages(user: str, system: str | None) -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def _turn_state(live: _Live, turn: int, fmt: ChatFormat | None, cfg: RolloutConfig) -> TurnState:
    mode = live.mode.kind
    system = 1 if live.messages and live.messages[0]["role"] == "system" else 0
    messages = _window(live.messages, live.mode.window, system) if mode == "window" else live.messages
    prompt: list[int] | None = None
    if fmt is not None:
        prompt = live.ids if mode == "full" else fmt.prompt_ids(messages, live.tools)
    p = live.problem
    reply = cfg.reply_budget(p.env_id)
    budget = reply if prompt is None else min(reply, cfg.max_total_tokens - len(prompt))
    return TurnState(live.slot, p.env_id, live.episode.task, p.seed, live.member, turn, live.observation, live.info,
                     messages, prompt, budget, live.tools)


def _advance(live: _Live, state: TurnState, action: Action, out: tuple, fmt: ChatFormat | None) -> None:
    obs, reward, terminated, truncated, info = out
    extras = {k: v for k, v in json_safe(info).items() if k not in TURN_INFO_DROPPED}
    if action.token_ids is not None:
        extras["response_tokens"] = len(action.token_ids)
    if action.env_text is not None and action.env_text != action.text:
        extras["env_action"] = action.env_text  # what the env was sent: the reply's call, canonical
    live.episode.turns.append(Turn(action.text, obs, float(reward), bool(info.get("action_valid", True)), extras))
    live.episode.won = live.episode.won or bool(info.get("won", False))
    # a reply with exactly one call is answered by a tool message; anything else (tags format included) by a user one
    role = "tool" if live.tools is not None and len(action.calls or ()) == 1 else "user"
    live.messages += [action.message or {"role": "assistant", "content": action.text},
                      ChatFormat.observation_message(obs, role)]
    if fmt is not None and action.token_ids is not None:
        if live.mode.kind == "window":
            live.windows.append((list(state.prompt_ids or []), action))
        start = len(live.ids)
        live.ids += action.token_ids
        live.mask += [1] * len(action.token_ids)
        live.logprobs += list(action.logprobs or [0.0] * len(action.token_ids))
        live.spans.append((start, len(live.ids)))
        if not (terminated or truncated):  # the next turn's scaffolding + observation (never trained on)
            scaffold = fmt.turn_ids(obs, action.token_ids[-1] if action.token_ids else None, role, live.tools)
            live.ids += scaffold
            live.mask += [0] * len(scaffold)
            live.logprobs += [0.0] * len(scaffold)
    live.observation, live.info = obs, info
    live.obs_hashes.append(_hash(obs))
    if terminated or truncated:
        live.done = True
        live.episode.terminated, live.episode.truncated = bool(terminated), bool(truncated)


def _samples(live: _Live) -> list[Sample]:
    ep = live.episode
    if not ep.turns:
        return []  # overflowed before the first response: nothing to train on
    p = live.problem
    meta = {"env_id": p.env_id, "split": p.split, "seed": p.seed, "instance_id": ep.instance_id,
            "truncated": ep.truncated, "overflow": live.overflow, "context": live.mode.kind}
    common = dict(task=ep.task, group_id=p.group_id, episode_id=live.episode_id, reward=ep.total_reward,
                  won=ep.won, num_turns=ep.num_steps)
    rewards = [t.reward for t in ep.turns]
    valid = [t.action_valid for t in ep.turns]
    if live.mode.kind == "full":
        end = live.spans[-1][1]  # drop the trailing observation: nothing after the last response is trained
        return [Sample(turn_index=-1, input_ids=live.ids[:end], loss_mask=live.mask[:end],
                       old_logprobs=live.logprobs[:end], **common,
                       meta={**meta, "turn_spans": live.spans, "step_rewards": rewards, "action_valid": valid,
                             "observation_hashes": live.obs_hashes[: len(live.spans)]})]
    out = []
    for i, (prompt, action) in enumerate(live.windows):
        tokens = action.token_ids or []
        out.append(Sample(turn_index=i, input_ids=prompt + tokens, loss_mask=[0] * len(prompt) + [1] * len(tokens),
                          old_logprobs=[0.0] * len(prompt) + list(action.logprobs or [0.0] * len(tokens)), **common,
                          meta={**meta, "step_reward": rewards[i], "action_valid": valid[i],
                                "observation_hash": live.obs_hashes[i]}))
    return out


def _stats(lives: list[_Live], samples: list[Sample], gen_s: float, env_s: float, wall: float) -> dict[str, Any]:
    tokens = sum(t.info.get("response_tokens", 0) for live in lives for t in live.episode.turns)
    per_task: dict[str, dict[str, float]] = {}
    by_task: dict[str, list[_Live]] = defaultdict(list)
    for live in lives:
        by_task[live.episode.task].append(live)
    for task, group in sorted(by_task.items()):
        per_task[task] = {**episode_stats([x.episode for x in group]),
                          "overflow": sum(x.overflow for x in group) / len(group)}
    return {
        "episodes": len(lives),
        "turns": sum(x.episode.num_steps for x in lives),
        "samples": len(samples),
        "tokens_generated": tokens,
        "generation_seconds": gen_s,
        "env_seconds": env_s,
        "wall_seconds": wall,
        "env_share": env_s / wall if wall > 0 else 0.0,
        "tokens_per_second": tokens / gen_s if gen_s > 0 else 0.0,
        "success": sum(x.episode.won for x in lives) / max(1, len(lives)),
        "per_task": per_task,
    }


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="rollout", unit="ep", disable=not enabled, leave=False, dynamic_ncols=True)
