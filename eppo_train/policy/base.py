"""What every generation backend offers the rollout: token ids in, sampled token ids and their log-probs out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Generation:
    token_ids: list[int]  # the sampled continuation (without the prompt), eos included when it ended there
    logprobs: list[float]  # log-prob of each sampled token under the sampling distribution
    text: str  # decoded continuation (special tokens skipped)
    finished: bool  # True when it ended on eos / a stop string, False when it hit max_new_tokens


@dataclass
class SamplingParams:
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None  # seeds torch's generator before the batch (same batch + seed -> same samples)
    stop: tuple[str, ...] = ()  # stop strings (e.g. "</action>"); the token completing one is kept, finished=True

    @property
    def greedy(self) -> bool:
        """temperature <= 0 means greedy decoding (log-probs are then those of the untempered softmax)."""
        return self.temperature <= 0

    def caps(self, count: int, budgets: Sequence[int] | None = None) -> list[int]:
        """New-token limit per row: `max_new_tokens`, lowered by each row's remaining budget when given."""
        if budgets is None:
            return [self.max_new_tokens] * count
        return [min(self.max_new_tokens, b) for b in budgets]


# Requests of one call get seeds `seed * _SEED_STRIDE + i`: distinct within the call, and never reused by another call
# whose seed differs (the rollout samples turn t with seed + t; `seed + i` would give turn t's request i + 1 the
# stream of turn t + 1's request i). The product stays far inside the 64 bits torch's generators and the OpenAI API
# take.
_SEED_STRIDE = 1_000_003


def request_seed(seed: int | None, index: int) -> int | None:
    """The sampling seed of request `index` of a batch sampled with `seed` (None: unseeded)."""
    if seed is None:
        return None
    if not 0 <= index < _SEED_STRIDE:
        raise ValueError(f"request index {index} outside 0..{_SEED_STRIDE - 1}: seeds would repeat")
    return seed * _SEED_STRIDE + index


class PolicyBackend(ABC):
    """A policy the rollout can sample from. `tokenizer` is a transformers tokenizer with a chat template."""

    tokenizer: object

    @abstractmethod
    def generate(
        self, prompts: Sequence[list[int]], params: SamplingParams, budgets: Sequence[int] | None = None
    ) -> list[Generation]:
        """Sample one continuation per prompt (a batch; prompts may differ in length).

        `budgets[i]`, when given, caps row i's new tokens below `params.max_new_tokens` (context-length limits).
        """

    def update_weights(self, state_dict: Mapping[str, object]) -> None:
        """Load new weights from the learner (in place, without a restart). Eval-only backends may refuse."""
        raise NotImplementedError(f"{type(self).__name__} cannot take weight updates")

    def close(self) -> None:  # noqa: B027  (optional hook: most backends hold nothing to release)
        """Release processes or GPU memory the backend holds."""


@dataclass
class ChatReply:
    """A chat reply with function calling: its text and its calls ({"name", "arguments"}, arguments a dict where
    they parsed as a JSON object, else the string the endpoint sent)."""

    content: str
    calls: list[dict[str, Any]] = field(default_factory=list)


class ChatBackend(ABC):
    """A text-only policy (e.g. an OpenAI-compatible endpoint): chat messages in, reply text out, no token ids.

    Good for evaluation only: the learner needs token ids and log-probs, which only a `PolicyBackend` gives.
    """

    name: str = "chat"

    @abstractmethod
    def chat(self, conversations: Sequence[list[dict[str, str]]], params: SamplingParams) -> list[str]:
        """One reply per conversation (each a list of {"role", "content"} messages)."""

    def chat_tools(self, conversations: Sequence[list[dict[str, Any]]], tools: Sequence[list[dict]],
                   params: SamplingParams) -> list[ChatReply]:
        """One reply per conversation, with `tools[i]` (JSON schemas) offered to conversation i: the tools action
        format. Messages may hold assistant `tool_calls` and `tool` results."""
        raise NotImplementedError(f"{type(self).__name__} does not support function calling; use "
                                  "env.action_format=tags (--action-format tags)")

    def close(self) -> None:  # noqa: B027
        """Release connections."""
