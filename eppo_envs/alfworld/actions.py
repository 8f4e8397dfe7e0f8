"""From the model's raw text to one ALFWorld command, with the fallbacks real model output needs.

Tried in order: the `<action>` tag's content; else (no tag at all) the bare text, or its last line, when that is a
command. A command is matched against the admissible ones after normalising case, spaces and trailing
punctuation, and the older ALFWorld phrasing "put X in/on Y" is read as today's "move X to Y".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eppo_envs.core.parsing import TOOL_TAGS, parse_tool_call, strip_think

_SPACES = re.compile(r"\s+")
# Any tool tag, opened or closed: a reply with one is tagged (well or badly), so no bare-command fallback reads it.
_ANY_TAG = r"</?(?:{})>"
_PUT = re.compile(r"^put (.+?) (?:in|on|in/on|into|onto) (.+)$")


@dataclass(frozen=True)
class Command:
    """`text` is the command to send (admissible, or as written when it is not); `error` when nothing usable."""

    text: str
    admissible: bool
    error: str | None = None


def normalise(text: str) -> str:
    text = _SPACES.sub(" ", text.strip().strip("`'\"").strip()).lower()
    return text.rstrip(".!").strip()


def match(text: str, admissible: list[str]) -> str | None:
    """The admissible command `text` means, or None."""
    by_norm = {normalise(a): a for a in admissible}
    norm = normalise(text)
    if norm in by_norm:
        return by_norm[norm]
    put = _PUT.match(norm)
    if put:
        return by_norm.get(f"move {put.group(1)} to {put.group(2)}")
    return None


def read_command(text: str, admissible: list[str], tag: str = "action") -> Command:
    call = parse_tool_call(text, (tag,))
    if call.valid:
        found = match(call.content, admissible)
        return Command(found or normalise(call.content), found is not None)
    body = strip_think(text).strip()
    # Only a reply with no tag at all is read bare: "<action>\ngo to desk 1" never closes its tag, and its last
    # line must not pass as the command (an unclosed tag is invalid in every task).
    if not re.search(_ANY_TAG.format("|".join(map(re.escape, {*TOOL_TAGS, tag}))), body, re.IGNORECASE):
        lines = [line for line in body.splitlines() if line.strip()]
        for candidate in ([body] if body else []) + lines[-1:]:
            found = match(candidate, admissible)
            if found:
                return Command(found, True)
    return Command("", False, call.error)
