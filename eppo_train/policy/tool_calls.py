"""Tool calls in the model's own chat format (the `tools` action format, `env.action_format: tools`).

The env reads one canonical call, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (eppo_envs/core/tools.py).
A model writes calls in the syntax its chat template was trained on; which one is read off the template itself, by
rendering a probe call through it (`detect_syntax`):

    hermes       <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>   Qwen2.5/Qwen3, Hermes, verl's parser
    llama3_json  {"name": ..., "parameters": {...}}  (optionally after <|python_tag|>)   Llama 3.1/3.2/3.3

`parse_reply` turns a reply into its calls and the env's canonical text. It never raises and never judges: a reply
it cannot read goes to the env as written (or, JSON that does not parse, wrapped as a call), and the env says what is
wrong with it as an invalid action with a how-to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eppo_envs.core.parsing import find_tags, strip_think
from eppo_envs.core.tools import CALL_TAG, call_text
from eppo_train.core.registry import ConfigError
from eppo_train.policy.models import load_tokenizer

SYNTAXES = ("hermes", "llama3_json")
_PROBE_NAME = "eppo_probe_tool"
_PROBE_TOOL = {"type": "function", "function": {
    "name": _PROBE_NAME, "description": "probe",
    "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}
_LLAMA_PYTHON_TAG = "<|python_tag|>"


class ToolTemplateError(ValueError):
    """A chat template that cannot carry the tools format (one line for the user)."""


@dataclass
class Reply:
    """A reply read in the tools format: the text outside its calls, the calls ({"name", "arguments"}), and the text
    the env is sent."""

    content: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    env_text: str = ""


def assistant_message(content: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message of `calls` as `apply_chat_template` takes it (arguments as a dict)."""
    if not calls:  # no `tool_calls` key at all: Llama 3.1's template tests for the key, not for calls in it
        return {"role": "assistant", "content": content}
    return {"role": "assistant", "content": content,
            "tool_calls": [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                           for c in calls]}


def _render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)


def detect_syntax(tokenizer: Any) -> str:
    """The tool-call syntax `tokenizer`'s chat template writes, or a ToolTemplateError saying why there is none."""
    name = getattr(tokenizer, "name_or_path", "") or "the model"
    if getattr(tokenizer, "chat_template", None) is None:
        raise ToolTemplateError(f"{name} has no chat template; the tools format needs one that declares tools")
    user = [{"role": "user", "content": "x"}]
    try:
        plain = _render(tokenizer, user, add_generation_prompt=True)
        with_tools = _render(tokenizer, user, tools=[_PROBE_TOOL], add_generation_prompt=True)
        call = _render(tokenizer, [*user, assistant_message("", [{"name": _PROBE_NAME, "arguments": {"arg": "v"}}])],
                       tools=[_PROBE_TOOL])
    except Exception as exc:  # a template's raise_exception() or a jinja error: the template cannot do it
        raise ToolTemplateError(f"the chat template of {name} cannot render tools ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}); use env.action_format=tags") from None
    if plain == with_tools or _PROBE_NAME not in with_tools:
        raise ToolTemplateError(f"the chat template of {name} has no tool support (it ignores tools=); use "
                                "env.action_format=tags, or a model whose template declares tools")
    if f"<{CALL_TAG}>" in call:
        return "hermes"
    if f'"name": "{_PROBE_NAME}"' in call and '"parameters"' in call:
        return "llama3_json"
    raise ToolTemplateError(f"the chat template of {name} writes tool calls in a syntax EPPO does not read (it reads "
                            f"{' and '.join(SYNTAXES)}); use env.action_format=tags")


def check_tool_template(model: str) -> str:
    """`detect_syntax` for a model name or folder, as the run's one-line error: a run in the tools format checks its
    model's template before anything starts."""
    try:
        return detect_syntax(load_tokenizer(model))
    except ToolTemplateError as exc:
        raise ConfigError(f"env.action_format=tools: {exc}") from None


def _arguments(call: dict[str, Any]) -> Any:
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):  # some models (and the OpenAI API) send the arguments as a JSON string
        try:
            return json.loads(args)
        except (ValueError, RecursionError):
            return args
    return args


def parse_reply(syntax: str, text: str) -> Reply:
    """The calls of `text` written in `syntax`, and the canonical text the env is sent (see the module docstring)."""
    if syntax == "hermes":
        calls = []
        for _, body in find_tags(text, (CALL_TAG,)):
            try:
                call = json.loads(body)
            except (ValueError, RecursionError):
                continue
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                calls.append({"name": call["name"], "arguments": _arguments(call)})
        # the env reads this syntax itself (a call inside <think>, several calls, bad JSON: it says which)
        return Reply(text.split(f"<{CALL_TAG}>", 1)[0].strip() if calls else text, calls, text)
    if syntax == "llama3_json":
        return _parse_llama(text)
    raise ValueError(f"unknown tool-call syntax {syntax!r}; known: {', '.join(SYNTAXES)}")


def _parse_llama(text: str) -> Reply:
    body = strip_think(text.replace(_LLAMA_PYTHON_TAG, "")).strip()
    start = body.find("{")
    if start < 0:
        return Reply(text, [], text)  # no JSON at all: the env says no call was found
    decoder = json.JSONDecoder()
    objects, pos = [], start
    try:
        while pos < len(body):
            obj, end = decoder.raw_decode(body, pos)
            objects.append(obj)
            pos = end
            while pos < len(body) and body[pos] in " \t\r\n;":  # several calls: separated by ';' or new lines
                pos += 1
    except (ValueError, RecursionError):
        if not objects:  # JSON that does not parse: sent as one call, so the env says it is not valid JSON
            return Reply(body[:start].strip(), [], f"<{CALL_TAG}>{body[start:]}</{CALL_TAG}>")
    calls = [o for o in objects if isinstance(o, dict) and isinstance(o.get("name"), str)]
    if not calls:
        return Reply(text, [], text)
    # canonical calls; a key besides name and parameters stays, so the env refuses it as it would in any syntax
    canonical = []
    for call in calls:
        rest = {k: v for k, v in call.items() if k not in ("name", "parameters", "arguments")}
        canonical.append({"name": call["name"], "arguments": _arguments(call), **rest})
    env_text = "\n".join(f"<{CALL_TAG}>\n{json.dumps(c, ensure_ascii=False)}\n</{CALL_TAG}>" for c in canonical)
    return Reply(body[:start].strip(), [{"name": c["name"], "arguments": c["arguments"]} for c in canonical],
                 env_text)


def canonical_text(content: str, calls: list[dict[str, Any]]) -> str:
    """The env's text for a reply given as content plus structured calls (an OpenAI-compatible endpoint's)."""
    return "\n".join([*([content] if content else []), *(call_text(c["name"], c["arguments"]) for c in calls)])
