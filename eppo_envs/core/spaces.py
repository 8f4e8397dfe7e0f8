"""Gymnasium spaces for text in, text out.

The default `Text` charset is letters and digits only, so any observation with a space or a newline would fail
gymnasium's env checker; every EPPO env uses printable ASCII instead.
"""

from __future__ import annotations

import string

from gymnasium.spaces import Text

PRINTABLE = frozenset(string.printable)

# Observations can be long (a WebShop item page, a HumanEval prompt): the bound only exists because Text needs one.
MAX_OBSERVATION_CHARS = 1 << 20
# `action_space.sample()` draws strings of up to this length (the env checker samples actions); the env itself
# accepts text of any length and clips it, so this is not a limit on what a model may write.
MAX_ACTION_CHARS = 4096


def observation_space() -> Text:
    return Text(max_length=MAX_OBSERVATION_CHARS, min_length=0, charset=string.printable)


def action_space() -> Text:
    return Text(max_length=MAX_ACTION_CHARS, min_length=0, charset=string.printable)


_TRANSLATE = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
        "\u2026": "...", "\u00a0": " ", "\u00d7": "x", "\u00b0": " deg",
        "\u00a3": "GBP ", "\u20ac": "EUR ", "\u00a5": "JPY ", "\u00e9": "e", "\u00f7": "/", "\u2212": "-",
    }
)


def to_printable(text: str) -> str:
    """Map text onto printable ASCII: common typography is transliterated, anything else becomes '?'."""
    text = text.translate(_TRANSLATE)
    if all(ch in PRINTABLE for ch in text):
        return text
    return "".join(ch if ch in PRINTABLE else "?" for ch in text)
