"""Chat formatting at the token level, without ever re-tokenizing what the model sampled.

A multi-turn transcript is built by appending: the first prompt (chat template with the generation prompt), the
sampled response tokens as they came out of the sampler, then the template's scaffolding that closes the
assistant turn, wraps the env's observation as a user turn and opens the next assistant turn. That scaffolding is
read off the tokenizer's own chat template with marker strings, so any template that renders turns as a prefix-
stable concatenation works (ChatML, Llama 3, Mistral, Gemma, ...). The learner then trains on exactly the tokens
the sampler conditioned on.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_MARK_ASSISTANT = "\u2063EPPO_ASSISTANT_MARK\u2063"
_MARK_USER = "\u2063EPPO_USER_MARK\u2063"


class ChatFormat:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, system_prompt: str | None = None) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the model's tokenizer has no chat template; give a chat/instruct model")
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt

    def start(self, first_user: str) -> list[dict[str, str]]:
        """The messages of a new episode."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": first_user}]

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Messages -> token ids, ending with the template's generation prompt (the assistant turn opened)."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @cached_property
    def _scaffold(self) -> tuple[str, str]:
        """(text closing an assistant turn and opening a user turn, text closing it and opening the assistant)."""
        messages = [
            *self.start("x"),
            {"role": "assistant", "content": _MARK_ASSISTANT},
            {"role": "user", "content": _MARK_USER},
        ]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        after = text.split(_MARK_ASSISTANT, 1)[1]
        before_obs, after_obs = after.split(_MARK_USER, 1)
        return before_obs, after_obs

    @cached_property
    def _eos_texts(self) -> dict[int, str]:
        ids = self.tokenizer.eos_token_id
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        return {i: self.tokenizer.decode([i]) for i in ids}

    def turn_ids(self, observation: str, last_response_token: int | None) -> list[int]:
        """Scaffolding + observation between one response and the next generation (all non-model tokens).

        When the response already ended with the end-of-turn token the template would write, it is not repeated.
        """
        close, reopen = self._scaffold
        eos_text = self._eos_texts.get(last_response_token) if last_response_token is not None else None
        if eos_text and close.startswith(eos_text):
            close = close[len(eos_text) :]
        return self.tokenizer(close + observation + reopen, add_special_tokens=False)["input_ids"]
