"""An OpenAI-compatible chat endpoint as a text-only policy, for evaluation (vLLM serve, llama.cpp, TGI, OpenAI).

Plain HTTP with the standard library (no extra dependency): POST `{base}/chat/completions`, one request per live
episode, a few in flight at once. No token ids or log-probs come back, so this backend evaluates; it cannot train.
In the tools action format each request carries the task's `tools` and the reply's `tool_calls` are read (the API's
function calling; `chat_tools`).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eppo_train.policy.base import ChatBackend, ChatReply, SamplingParams, request_seed


class EndpointError(RuntimeError):
    """The endpoint could not be reached or answered with an error (reported to the user in one line)."""


def completions_url(url: str) -> str:
    """Accept a base URL (`http://host:8000/v1`) or the full chat-completions URL."""
    url = url.rstrip("/")
    return url if url.endswith("/chat/completions") else f"{url}/chat/completions"


class OpenAIChat(ChatBackend):
    def __init__(
        self,
        url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        concurrency: int = 8,
        timeout: float = 120.0,
        retries: int = 2,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"openai endpoint must be an http(s) URL, got {url!r}")
        self.url = completions_url(url)
        self.model = model or os.environ.get("OPENAI_MODEL", "default")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.concurrency, self.timeout, self.retries = concurrency, timeout, retries
        self.name = f"openai:{self.model}"

    def chat(self, conversations: Sequence[list[dict[str, str]]], params: SamplingParams) -> list[str]:
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(conversations)))) as executor:
            return list(executor.map(lambda pair: self._one(pair[1], params, pair[0]), enumerate(conversations)))

    def chat_tools(self, conversations: Sequence[list[dict[str, Any]]], tools: Sequence[list[dict]],
                   params: SamplingParams) -> list[ChatReply]:
        def one(i: int) -> ChatReply:
            message = self._request(_api_messages(conversations[i]), params, i, tools[i])
            calls = []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                calls.append({"name": str(function.get("name", "")), "arguments": _arguments(function.get("arguments"))})
            # no stop-string cut here: a reply that calls a tool has no text to cut, and one that does not is invalid
            return ChatReply(str(message.get("content") or ""), calls)

        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(conversations)))) as executor:
            return list(executor.map(one, range(len(conversations))))

    def _one(self, messages: list[dict[str, str]], params: SamplingParams, index: int) -> str:
        return _cut(str(self._request(messages, params, index).get("content") or ""), params.stop)

    def _request(self, messages: list[dict[str, Any]], params: SamplingParams, index: int,
                 tools: list[dict] | None = None) -> dict[str, Any]:
        """The reply message of one chat-completions request."""
        body: dict = {
            "model": self.model,
            "messages": messages,
            "max_tokens": params.max_new_tokens,
            "temperature": max(0.0, params.temperature),
            "top_p": params.top_p,
        }
        if tools:
            body["tools"] = tools
        if params.seed is not None:  # one seed per conversation: with one for all, a server that honours seeds
            body["seed"] = request_seed(params.seed, index)  # would give the k samples of an instance one reply
        # No `stop` in the request: the API drops the stop string it matched from the reply, so "<action>go
        # north</action>" comes back as "<action>go north", an unclosed tag every task refuses, where the HF and vLLM
        # backends keep it. The reply is cut after its first stop string here instead (`_cut`).
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                # offline-ok: the user-given endpoint of `--policy openai:URL`, never a hub
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # offline-ok
                    data = json.loads(response.read().decode("utf-8"))
                message = data["choices"][0]["message"]
                if not isinstance(message, dict):
                    raise ValueError(f"a reply message that is not an object: {message!r:.80}")
                return message
            except urllib.error.HTTPError as exc:  # 4xx: our request is wrong; retrying will not help
                detail = exc.read().decode("utf-8", "replace")[:200]
                if exc.code < 500:
                    raise EndpointError(f"{self.url} answered {exc.code}: {detail}") from None
                last = exc
            except (urllib.error.URLError, TimeoutError, ConnectionError, KeyError, IndexError, ValueError) as exc:
                last = exc
            time.sleep(0.5 * (attempt + 1))
        raise EndpointError(f"{self.url} failed after {self.retries + 1} tries: {last}")


def _api_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rollout's messages as the API takes them: a call's arguments as a JSON string, no empty content beside
    calls."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [{**c, "function": {"name": c["function"]["name"],
                                        "arguments": c["function"]["arguments"]
                                        if isinstance(c["function"]["arguments"], str)
                                        else json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
                     for c in m["tool_calls"]]
            m = {**m, "content": m.get("content") or None, "tool_calls": calls}
        out.append(m)
    return out


def _arguments(raw: Any) -> Any:
    """A call's arguments: the API sends a JSON string; a dict where it parses as an object, else as sent."""
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError):
            return raw
        return parsed if isinstance(parsed, dict) else raw
    return raw if raw is not None else {}


def _cut(text: str, stop: Sequence[str]) -> str:
    """`text` up to and including the first stop string in it (as the HF and vLLM backends end a reply)."""
    ends = [i + len(s) for s in stop if s and (i := text.find(s)) >= 0]
    return text[: min(ends)] if ends else text
