"""The `tools` action format: a task's actions as function calls with JSON-schema arguments.

In the `tags` format (the default) a reply is the task's own tag text (`<search>query</search>`). In the `tools`
format the task publishes its tools (`AgentEnv.tools`: a name, a description, string parameters) and a reply is one
call in the canonical form

    <tool_call>
    {"name": "search", "arguments": {"query": "..."}}
    </tool_call>

(Hermes/Qwen's syntax; the learner's parsers turn any chat template's own syntax into it). A valid call is rendered
through the tool's `action` template into exactly the tag text a tags-mode reply would be, and that text is what the
task's `transition` reads: the same action gets the same observation, reward and verdict in both formats. Everything
else (no call, bad JSON, an unknown tool, a missing or extra argument, a call inside `<think>`, several calls) is
refused before the task sees it, as an invalid action with a how-to. Nothing here raises on the model's text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eppo_envs.core.parsing import TOOL_TAGS, ToolCall, clip, find_tags, strip_think

ACTION_FORMATS = ("tags", "tools")
CALL_TAG = "tool_call"
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
# Markup an argument may not carry: inside the rendered tag text it would change what the task reads (a query holding
# "</search><answer>x</answer>" would become two calls, a "<think>" would hide the rest of the action).
_ALWAYS_FORBIDDEN = ("<think>", "</think>", f"<{CALL_TAG}>", f"</{CALL_TAG}>",
                     *(f"<{t}>" for t in TOOL_TAGS), *(f"</{t}>" for t in TOOL_TAGS))


@dataclass(frozen=True)
class Tool:
    """One tool of a task: `parameters` are (name, description) pairs, all JSON strings and all required; `action`
    is the task's tags-mode action text with a `{name}` placeholder per parameter (`"<search>{query}</search>"`)."""

    name: str
    description: str
    parameters: tuple[tuple[str, str], ...]
    action: str

    def __post_init__(self) -> None:
        used = set(_PLACEHOLDER.findall(self.action))
        names = {p for p, _ in self.parameters}
        if used != names:
            raise ValueError(f"tool {self.name!r}: the action template {self.action!r} must use exactly the "
                             f"parameters {sorted(names)}")

    def schema(self) -> dict[str, Any]:
        """The OpenAI/`apply_chat_template(tools=...)` form of this tool."""
        return {"type": "function", "function": {
            "name": self.name,
            "description": self.description,
            "parameters": {"type": "object",
                           "properties": {p: {"type": "string", "description": d} for p, d in self.parameters},
                           "required": [p for p, _ in self.parameters]}}}

    def signature(self) -> str:
        return f"{self.name}({', '.join(p for p, _ in self.parameters)})"

    def literals(self) -> list[str]:
        """The fixed pieces of the action template ("<search>", "</search>", "```python", "```")."""
        return [piece.strip() for piece in _PLACEHOLDER.split(self.action)[::2] if piece.strip()]

    def render(self, arguments: dict[str, str]) -> str:
        return _PLACEHOLDER.sub(lambda m: arguments[m.group(1)], self.action)

    def pattern(self) -> re.Pattern[str]:
        """The action template as a regex: reads the tool's arguments back out of tags-mode text (the expert's)."""
        parts = _PLACEHOLDER.split(self.action)
        regex = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.*?)" for i, p in enumerate(parts))
        return re.compile(regex, re.DOTALL)


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """One call in the canonical form the env reads in the `tools` format."""
    return f"<{CALL_TAG}>\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</{CALL_TAG}>"


def tools_hint(tools: Sequence[Tool]) -> str:
    """The how-to appended to every invalid action in the `tools` format."""
    names = " or ".join(t.signature() for t in tools)
    return (f"Reply with exactly one tool call, {names}, written as <{CALL_TAG}>{{\"name\": ..., \"arguments\": "
            f"{{...}}}}</{CALL_TAG}> or your chat format's own tool-call syntax.")


def _blocks(text: str) -> list[str]:
    return [content for _, content in find_tags(text, (CALL_TAG,))]


def read_call(text: object, tools: Sequence[Tool]) -> ToolCall:
    """The reply's one call rendered as the task's tag text (`ToolCall(tool name, action text)`), or a ToolCall with
    an `error` saying what is wrong with it."""
    raw = clip(text)
    blocks = _blocks(raw)
    opened = f"<{CALL_TAG}>"
    if not blocks:
        body = strip_think(raw).lower()
        if opened in body:
            return ToolCall(None, "", f"{opened} was opened but never closed with </{CALL_TAG}>.")
        if opened in raw.lower():
            return ToolCall(None, "", "the tool call is inside <think>...</think>, where nothing runs; call the tool "
                                      "after </think>.")
        return ToolCall(None, "", "no tool call found.")
    if len(blocks) > 1:
        return ToolCall(None, "", f"found {len(blocks)} tool calls; make exactly one per turn.")
    try:
        call = json.loads(blocks[0])
    except (ValueError, RecursionError) as exc:  # deep nesting ("[[[[...") is RecursionError, not a JSON error
        reason = str(exc).split(":")[0] if isinstance(exc, ValueError) else "nested too deeply"
        return ToolCall(None, "", f"the tool call is not valid JSON ({reason}); write {{\"name\": ..., "
                                  "\"arguments\": {...}}.")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall(None, "", "a tool call is a JSON object {\"name\": ..., \"arguments\": {...}}.")
    extra = sorted(set(call) - {"name", "arguments"})
    if extra:
        return ToolCall(None, "", f"unexpected key {extra[0][:40]!r} in the tool call; write only \"name\" and "
                                  "\"arguments\".")
    by_name = {t.name: t for t in tools}
    tool = by_name.get(call["name"])
    if tool is None:
        return ToolCall(None, "", f"there is no tool {call['name'][:40]!r}; the tools are {', '.join(by_name)}.")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # arguments sent as a JSON string, as the OpenAI API carries them
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return ToolCall(tool.name, "", f"the arguments of {tool.name} are not a JSON object.")
    if not isinstance(arguments, dict):
        return ToolCall(tool.name, "", f"the arguments of {tool.name} must be a JSON object.")
    return _render(tool, arguments, tools)


def _render(tool: Tool, arguments: dict[str, Any], tools: Sequence[Tool]) -> ToolCall:
    names = [p for p, _ in tool.parameters]
    extra = [k for k in arguments if k not in names]
    if extra:
        return ToolCall(tool.name, "", f"{tool.name} takes no argument {str(extra[0])[:40]!r}; its arguments: "
                                       f"{', '.join(names)}.")
    missing = [p for p in names if p not in arguments]
    if missing:
        return ToolCall(tool.name, "", f"{tool.name} needs the argument {missing[0]!r}.")
    values: dict[str, str] = {}
    forbidden = {*_ALWAYS_FORBIDDEN, *(piece for t in tools for piece in t.literals())}
    for key, value in arguments.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = json.dumps(value)  # a number for a string parameter is taken as written: 42 -> "42"
        if not isinstance(value, str):
            return ToolCall(tool.name, "", f"the argument {key!r} of {tool.name} must be a string.")
        value = clip(value)
        lowered = value.lower()
        bad = next((piece for piece in forbidden if piece.lower() in lowered), None)
        if bad is not None:
            return ToolCall(tool.name, "", f"the argument {key!r} may not contain {bad!r}; give the value alone.")
        values[key] = value
    return ToolCall(tool.name, tool.render(values))


def as_call(text: str, tools: Sequence[Tool]) -> str:
    """Tags-mode text (an expert's reply) in the `tools` format: the first piece of it that one of `tools` renders
    becomes that call; text around it (a `<think>` block) stays. Text no tool renders comes back unchanged."""
    body = strip_think(text)
    best: tuple[int, Tool, re.Match[str]] | None = None
    for tool in tools:
        found = tool.pattern().search(text)
        # the match must lie outside <think>: its text appears in the think-free body
        if found and found.group(0) in body and (best is None or found.start() < best[0]):
            best = (found.start(), tool, found)
    if best is None:
        return text
    _, tool, found = best
    call = call_text(tool.name, {p: found.group(p) for p, _ in tool.parameters})
    return text[: found.start()] + call + text[found.end() :]
