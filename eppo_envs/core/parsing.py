"""Reading the model's raw text: one tag vocabulary for every task.

`<think>...</think>` is reasoning and is ignored; `<action>`, `<search>`, `<python>` and `<answer>` are tool calls;
code answers come in a fenced python block. Parsing never raises: a malformed turn yields a `ToolCall` with an
`error` that the env turns into an observation saying how to act.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

TOOL_TAGS: tuple[str, ...] = ("action", "search", "python", "answer")
# Text longer than this is clipped before any regex runs, so a hostile 10 MB reply costs nothing.
MAX_PARSE_CHARS = 65_536

_THINK_MARK_RE = re.compile(r"<(/?)(think)>", re.IGNORECASE)
_FENCE_RE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_BOXED_RE = re.compile(r"\\boxed\s*\{")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class ToolCall:
    """One parsed turn: `tag` and `content` when valid, `error` (a sentence for the model) when not."""

    tag: str | None
    content: str
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


def clip(text: object) -> str:
    """Coerce whatever the caller passed into a bounded `str` (bytes are decoded, never raise). A NUL character
    becomes U+FFFD, as an undecodable byte does: dropped, it would join its neighbours, so "Par\\x00is" would win for
    "Paris" and "1\\x002" for 12, which the original rewards (Search-R1's exact match, math-verify, HumanEval's exec)
    do not. A lone surrogate ("\\ud800", what a JSON escape can decode to) becomes U+FFFD too: it cannot be encoded as
    UTF-8, so it would break every transcript that holds it (info's `answer`, `query`) and reach Code's sandbox as a
    host error; a pair written as two escapes becomes the one character it encodes."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = "" if text is None else str(text)
    text = text[:MAX_PARSE_CHARS].replace("\x00", "\ufffd")
    if _SURROGATE_RE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _spans(marks: list[re.Match[str]]) -> list[tuple[re.Match[str], re.Match[str] | None]]:
    """Pair each opening mark with the first closing mark of its tag after it, left to right, as the regex
    `<(t)>(.*?)</\\1>` under `finditer` does: a matched pair resumes the scan after its close; an opening mark with
    no close after it pairs with None. Marks come from one `<(/?)(tags)>` scan, so this is linear in the text (the
    regex itself scans to the end from every unclosed tag: seconds on a reply of thousands of them)."""
    closes: dict[str, list[int]] = {}  # tag -> positions (in `marks`) of its closing marks, ascending
    for i, m in enumerate(marks):
        if m.group(1):
            closes.setdefault(m.group(2).lower(), []).append(i)
    spans: list[tuple[re.Match[str], re.Match[str] | None]] = []
    resume_at = 0
    for i, m in enumerate(marks):
        if m.group(1) or m.start() < resume_at:
            continue
        after = closes.get(m.group(2).lower(), [])
        k = bisect.bisect_right(after, i)
        close = marks[after[k]] if k < len(after) else None
        spans.append((m, close))
        if close is not None:
            resume_at = close.end()
    return spans


def strip_think(text: str) -> str:
    """Drop `<think>` blocks; an unclosed `<think>` swallows the rest of the turn (it never ended its reasoning)."""
    pieces, pos = [], 0
    for start, close in _spans(list(_THINK_MARK_RE.finditer(text))):
        if start.start() < pos:
            continue  # inside the unclosed block that already swallowed the rest
        pieces += [text[pos : start.start()], " "]
        pos = close.end() if close is not None else len(text)
    return "".join([*pieces, text[pos:]])


def find_tags(text: str, tags: Sequence[str] = TOOL_TAGS) -> list[tuple[str, str]]:
    """All complete `<tag>content</tag>` pairs, in order of appearance, outside `<think>` blocks."""
    body = strip_think(clip(text))
    marks = list(re.finditer(rf"<(/?)({'|'.join(map(re.escape, tags))})>", body, re.IGNORECASE))
    return [(m.group(2).lower(), body[m.end() : close.start()].strip())
            for m, close in _spans(marks) if close is not None]


def format_hint(tags: Sequence[str]) -> str:
    return " or ".join(f"<{t}>...</{t}>" for t in tags)


def parse_tool_call(text: object, tags: Sequence[str], *, allow_many: bool = False) -> ToolCall:
    """Exactly one call among `tags` (or the first of several when `allow_many`); else a ToolCall with an error."""
    body = strip_think(clip(text))
    calls = find_tags(body, tags)
    if not calls:
        other = find_tags(body, [t for t in TOOL_TAGS if t not in tags])
        if other:
            return ToolCall(None, "", f"<{other[0][0]}> is not a tool of this task; use {format_hint(tags)}.")
        for tag in tags:
            if re.search(f"<{tag}>", body, re.IGNORECASE):
                return ToolCall(None, "", f"<{tag}> was opened but never closed with </{tag}>.")
        return ToolCall(None, "", f"no tool call found; write {format_hint(tags)}.")
    if len(calls) > 1 and not allow_many:
        return ToolCall(None, "", f"found {len(calls)} tool calls; write exactly one of {format_hint(tags)} per turn.")
    tag, content = calls[0]
    if not content:
        return ToolCall(tag, "", f"<{tag}></{tag}> is empty.")
    return ToolCall(tag, content)


def extract_code_block(text: object) -> str | None:
    """The last fenced python block outside `<think>` (models often draft first and correct later)."""
    blocks = _FENCE_RE.findall(strip_think(clip(text)))
    return blocks[-1] if blocks else None


def extract_boxed(text: object) -> str | None:
    """Content of the last `\\boxed{...}` with balanced braces, or None. Each brace is matched once, in one pass
    (scanning from every `\\boxed{` to its end takes 49 s on a reply of 9,000 unclosed ones)."""
    body = strip_think(clip(text))
    closing: dict[int, int] = {}  # the position of each "{" -> that of its matching "}"
    opened: list[int] = []
    for i, ch in enumerate(body):
        if ch == "{":
            opened.append(i)
        elif ch == "}" and opened:
            closing[opened.pop()] = i
    result = None
    for m in _BOXED_RE.finditer(body):
        end = closing.get(m.end() - 1)
        if end is not None:
            result = body[m.end():end].strip()
    return result
