"""Chat formatting at the token level, without ever re-tokenizing what the model sampled.

A multi-turn transcript is built by appending: the first prompt (chat template with the generation prompt), the
sampled response tokens as they came out of the sampler, then the template's scaffolding that closes the
assistant turn, wraps the env's observation as a user turn and opens the next assistant turn. That scaffolding is
read off the tokenizer's own chat template with marker strings, so any template that renders turns as a prefix-
stable concatenation works (ChatML, Llama 3, Mistral, Gemma, ...). The learner then trains on exactly the tokens
the sampler conditioned on.

In the tools action format (`policy/tool_calls.py`) the task's tools go to the template as `tools=`, and an
observation that answers the reply's one call comes back as a `tool` message (a reply without exactly one call gets
its observation as a user message, as in the tags format). The text between two replies is then rendered by the
template itself, per turn, after a marker assistant turn: templates write a tool result their own way (Qwen's
`<tool_response>` inside a user turn, Llama 3.1's `ipython` turn holding the result as a JSON string), which no fixed
scaffold around the raw observation would reproduce.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from eppo_train.policy.tool_calls import Reply, assistant_message, detect_syntax, parse_reply

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_MARK_ASSISTANT = "\u2063EPPO_ASSISTANT_MARK\u2063"
_MARK_USER = "\u2063EPPO_USER_MARK\u2063"
CALL_ID = "call_0"  # one call per turn: the id its tool message answers (templates that check ids need one)


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

    def _render(self, messages: list[dict[str, Any]], tools: list[dict] | None, generation: bool = True) -> str:
        extra = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False, **extra)

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> list[int]:
        """Messages -> token ids, ending with the template's generation prompt (the assistant turn opened); `tools`
        (the task's JSON schemas, tools format) are rendered the template's way."""
        return self.tokenizer(self._render(messages, tools), add_special_tokens=False)["input_ids"]

    @staticmethod
    def observation_message(observation: str, role: str = "user") -> dict[str, Any]:
        """The message an observation becomes: a user turn, or (role "tool") the answer to the reply's one call."""
        if role == "tool":
            return {"role": "tool", "content": observation, "tool_call_id": CALL_ID}
        return {"role": "user", "content": observation}

    @cached_property
    def syntax(self) -> str:
        """The template's tool-call syntax (`tool_calls.detect_syntax`); a ToolTemplateError where it has none."""
        return detect_syntax(self.tokenizer)

    def parse(self, text: str) -> Reply:
        """A reply in the tools format: its calls, and the canonical text the env reads."""
        return parse_reply(self.syntax, text)

    def _between(self, observation: str, role: str, tools: list[dict] | None) -> str:
        """The text from the end of an assistant reply to the next generation prompt, the observation included."""
        messages = [*self.start("x"), {"role": "assistant", "content": _MARK_ASSISTANT},
                    self.observation_message(observation, role)]
        return self._render(messages, tools).split(_MARK_ASSISTANT, 1)[1]

    def reply_text(self, content: str, calls: list[dict[str, Any]], tools: list[dict]) -> str:
        """The assistant reply writing `content` and `calls` as this template renders them, without the text that
        closes the turn: what a model trained on the template writes (the expert's demonstrations in tools format)."""
        head = self.start("x")
        prefix = self._render(head, tools)
        text = self._render([*head, assistant_message(content, calls), {"role": "user", "content": _MARK_USER}],
                            tools, generation=False)
        close = self._between(_MARK_USER, "user", tools).split(_MARK_USER, 1)[0]
        body = text[len(prefix):].split(_MARK_USER, 1)[0] if text.startswith(prefix) else ""
        if not body.endswith(close):
            raise ValueError("the chat template does not render an assistant turn the way its generation prompt "
                             "opens it; its tool calls cannot be written token by token")
        return body[: len(body) - len(close)]

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

    def turn_ids(self, observation: str, last_response_token: int | None, role: str = "user",
                 tools: list[dict] | None = None) -> list[int]:
        """Scaffolding + observation between one response and the next generation (all non-model tokens). With
        `tools` (the tools format) the template renders it, the observation sent as `role`.

        When the response already ended with the end-of-turn token the template would write, it is not repeated.
        """
        if tools:
            text = self._between(observation, role, tools)
        else:
            close, reopen = self._scaffold
            text = close + observation + reopen
        eos_text = self._eos_texts.get(last_response_token) if last_response_token is not None else None
        if eos_text and text.startswith(eos_text):
            text = text[len(eos_text) :]
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]
