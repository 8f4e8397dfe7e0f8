"""The pluggable "act" step of the one agent loop (`eppo_train.rollout.loop.run_rollout`).

An `Agent` answers a batch of live episodes in one call. Token agents (`PolicyAgent`) read each episode's prompt
token ids and return sampled ids and log-probs (training and model evaluation), `ExpertTokenAgent` the expert's
replies as tokens (SFT demonstrations, expert-guided groups); text agents (`ChatAgent`,
`ExpertAgent`, `RandomAgent`) read messages or the env and return text only (evaluation). Build one from a name
(`latest`, a path, `expert`, ...) with `eppo_train.policy.factory.make_policy`.
"""

from __future__ import annotations

import random
import string
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from eppo_envs.core.registry import env_class
from eppo_envs.core.tools import call_text
from eppo_train.policy.base import ChatBackend, PolicyBackend, SamplingParams
from eppo_train.policy.chat import CALL_ID, ChatFormat
from eppo_train.policy.engine import EngineGroup
from eppo_train.policy.tool_calls import canonical_text, parse_reply

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class EnvPool(Protocol):
    """What an agent may ask of the rollout's env pool (`eppo_train.rollout.env_pool.EnvPool` is one)."""

    def expert_actions(self, slots: Sequence[int]) -> list[str]: ...


@dataclass
class TurnState:
    """What an agent may read about one live episode at this turn (filled by the rollout)."""

    slot: int
    env_id: str
    task: str
    seed: int
    member: int  # index within the GRPO group (0..G-1)
    turn: int
    observation: str
    info: dict[str, Any]
    messages: list[dict[str, Any]]  # the context as chat messages (window applied)
    prompt_ids: list[int] | None = None  # the same context as token ids (token agents only)
    budget: int = 0  # most new tokens this turn may take (context length left)
    tools: list[dict] | None = None  # the task's tools as JSON schemas (the tools action format), else None


@dataclass
class Action:
    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finished: bool = True
    meta: dict[str, Any] = field(default_factory=dict)
    # the tools action format: the reply's calls ({"name", "arguments"}) and the canonical text the env is sent;
    # None: the rollout reads them off `text` (policy/tool_calls.py)
    calls: list[dict[str, Any]] | None = None
    env_text: str | None = None
    message: dict[str, Any] | None = None  # the assistant message to keep, when not {"role": "assistant", "content": text}


class Agent(ABC):
    needs_tokens: bool = False  # True: the rollout keeps token ids and fills `prompt_ids`/`budget`
    tokenizer: Any = None
    name: str = "agent"

    @abstractmethod
    def act(self, states: Sequence[TurnState], pool: EnvPool) -> list[Action]: ...


class PolicyAgent(Agent):
    """A token-level policy (HF, vLLM): one batched generate call per turn for every live episode."""

    needs_tokens = True

    def __init__(self, policy: PolicyBackend, params: SamplingParams) -> None:
        self.policy, self.params = policy, params
        self.tokenizer = policy.tokenizer
        self.name = getattr(policy, "name", type(policy).__name__)

    def act(self, states: Sequence[TurnState], pool: EnvPool) -> list[Action]:
        prompts = [s.prompt_ids or [] for s in states]
        budgets = [s.budget for s in states]
        if isinstance(self.policy, EngineGroup):  # an episode (and its GRPO group) stays on one engine
            keys = [(s.task, s.env_id, s.seed) for s in states]
            gens = self.policy.generate_for(keys, prompts, self.params, budgets=budgets)
        else:
            gens = self.policy.generate(prompts, self.params, budgets=budgets)
        return [Action(g.text, g.token_ids, g.logprobs, g.finished) for g in gens]


class ChatAgent(Agent):
    """A text-only chat backend (an OpenAI-compatible endpoint): messages in, text out. In the tools action format
    the task's tools go with the request and the reply's structured calls come back (`ChatBackend.chat_tools`)."""

    def __init__(self, backend: ChatBackend, params: SamplingParams) -> None:
        self.backend, self.params = backend, params
        self.name = getattr(backend, "name", "chat")

    def act(self, states: Sequence[TurnState], pool: EnvPool) -> list[Action]:
        if not any(s.tools for s in states):
            return [Action(text) for text in self.backend.chat([s.messages for s in states], self.params)]
        out = []
        for reply in self.backend.chat_tools([s.messages for s in states], [s.tools or [] for s in states],
                                             self.params):
            text = canonical_text(reply.content, reply.calls)
            if len(reply.calls) == 1:  # kept as the API's structured call, which the tool message answers
                message = {"role": "assistant", "content": reply.content,
                           "tool_calls": [{"id": CALL_ID, "type": "function", "function": reply.calls[0]}]}
            else:  # no call or several: the reply as text, answered by a user message
                message = {"role": "assistant", "content": text}
            out.append(Action(text, calls=reply.calls, env_text=text, message=message))
        return out


class ExpertAgent(Agent):
    """Each env's own oracle, asked where the env lives (in this process or in its Ray worker)."""

    name = "expert"

    def act(self, states: Sequence[TurnState], pool: EnvPool) -> list[Action]:
        return [Action(text) for text in pool.expert_actions([s.slot for s in states])]


class ExpertTokenAgent(Agent):
    """Each env's expert, answering in tokens (SFT demonstrations, expert-guided groups): the reply text tokenized
    plus the end-of-turn token, as the sampler would have emitted it. Log-probs are 0 (the expert is not a
    distribution; the learner recomputes old log-probs with the training model)."""

    needs_tokens = True
    name = "expert"

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        self.eos = eos if isinstance(eos, int) else list(eos)[0]
        self.chat = ChatFormat(tokenizer)

    def act(self, states: Sequence[TurnState], pool: EnvPool) -> list[Action]:
        out = []
        for state, text in zip(states, pool.expert_actions([s.slot for s in states]), strict=True):
            if state.tools:  # the env's canonical call, written as the model's chat template writes calls
                reply = parse_reply("hermes", text)
                text = self.chat.reply_text(reply.content, reply.calls, state.tools) if reply.calls else text
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: max(state.budget - 1, 0)]
            ids = ids + [self.eos]
            out.append(Action(text, ids, [0.0] * len(ids), True))
        return out


def tool_tags(env_id: str) -> tuple[str, ...]:
    """The tags a task accepts, read from its class without building an env."""

    return tuple(getattr(env_class(env_id), "tool_tags", ("action",)))


class RandomAgent(Agent):
    """A random admissible action when the env lists them, else random words in the task's own tool format (a
    fenced python block for a task without tags, such as eppo/Code-v0).

    Seeded per (task, instance seed, group member, turn), so the same instance gets the same random play in every run.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._tags: dict[str, tuple[str, ...]] = {}

    def act(self, states: Sequence[TurnState], pool: EnvPool) -> list[Action]:
        return [Action(self._one(s)) for s in states]

    def _one(self, s: TurnState) -> str:
        rng = random.Random(f"{self.seed}/{s.env_id}/{s.seed}/{s.member}/{s.turn}")
        tags = self._tags.setdefault(s.env_id, tool_tags(s.env_id))
        admissible = s.info.get("admissible_actions")
        if admissible:
            content = rng.choice(list(admissible))
        else:
            content = " ".join(
                rng.choice([str(rng.randint(0, 100)), "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 8)))])
                for _ in range(rng.randint(1, 3))
            )
        if s.tools:  # the tools format: a call of one of the task's tools, every argument the random content
            tool = rng.choice(s.tools)["function"]
            return call_text(tool["name"], {p: content for p in tool["parameters"]["properties"]})
        if not tags:  # a task that reads no tag but a fenced python block (eppo/Code-v0)
            return f"```python\n{content}\n```"
        tag = rng.choice(tags)
        return f"<{tag}>{content}</{tag}>"


def as_agent(policy: Agent | PolicyBackend | ChatBackend, params: SamplingParams) -> Agent:
    """Wrap a backend in the agent that drives it; an Agent passes through."""
    if isinstance(policy, Agent):
        return policy
    if isinstance(policy, PolicyBackend):
        return PolicyAgent(policy, params)
    if isinstance(policy, ChatBackend):
        return ChatAgent(policy, params)
    raise TypeError(f"not a policy: {type(policy).__name__}")
