"""What every generation backend offers the rollout: token ids in, sampled token ids and their log-probs out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


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
    seed: int | None = None


class PolicyBackend(ABC):
    """A policy the rollout can sample from. `tokenizer` is a transformers tokenizer with a chat template."""

    tokenizer: object

    @abstractmethod
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample one continuation per prompt (a batch; prompts may differ in length)."""

    def update_weights(self, state_dict: Mapping[str, object]) -> None:
        """Load new weights from the learner (in place, without a restart). Eval-only backends may refuse."""
        raise NotImplementedError(f"{type(self).__name__} cannot take weight updates")

    def close(self) -> None:  # noqa: B027  (optional hook: most backends hold nothing to release)
        """Release processes or GPU memory the backend holds."""
