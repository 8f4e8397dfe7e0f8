"""The page model: the one description of a shop page that every mode shares.

The session (`session.py`) builds a `Page`; text mode renders it with `render_text`, the HTTP server renders the
same `Page` to HTML (`html.py`), and the browser env reads the DOM back into a `Page` and renders that with
`render_text` again. Which actions a page accepts is also decided here, from the page alone, so a command is
accepted or refused with the same words in every mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eppo_envs.core.spaces import to_printable

# Button labels, lower case as WebShop's text observations show them.
BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
BUY_NOW = "buy now"
SUB_PAGES = ("description", "features", "reviews")
SEARCH_TEMPLATE = "search[<your query>]"
MAX_QUERY_CHARS = 200

_COMMAND_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.DOTALL | re.IGNORECASE)


def clean(text: str) -> str:
    """One line of printable text with single spaces: what both text and HTML (which collapses space) show."""
    return " ".join(to_printable(text).split())


@dataclass(frozen=True)
class Element:
    """One line of a page. `kind`: text | search | nav | item | option | sub | buy (all but text/search are buttons)."""

    kind: str
    text: str
    group: str = ""  # an option's dimension ("size")
    selected: bool = False

    @property
    def clickable(self) -> bool:
        return self.kind not in ("text", "search")


@dataclass(frozen=True)
class Page:
    kind: str  # search | results | item | description | features | reviews | done
    elements: tuple[Element, ...]
    item: str = ""  # the asin on item and sub-pages
    reward: float | None = None  # on the done page
    seq: int = 0  # how many actions the session has applied (lets the browser see that a page changed)

    @property
    def has_search(self) -> bool:
        return any(e.kind == "search" for e in self.elements)

    @property
    def buttons(self) -> list[Element]:
        return [e for e in self.elements if e.clickable]

    def admissible_actions(self) -> list[str]:
        actions = [SEARCH_TEMPLATE] if self.has_search else []
        seen: set[str] = set()
        for button in self.buttons:
            key = button.text.lower()
            if key not in seen:
                seen.add(key)
                actions.append(f"click[{button.text}]")
        return actions

    def find_button(self, label: str) -> Element | None:
        key = clean(label).lower()
        return next((b for b in self.buttons if b.text.lower() == key), None)


def element_line(element: Element) -> str:
    if element.kind == "search":
        return "[Search]"
    if element.kind == "text":
        return element.text
    line = f"[{element.text}]"
    if element.kind == "option" and element.selected:
        line += " (selected)"
    return line


def render_text(page: Page) -> str:
    lines = [element_line(e) for e in page.elements]
    actions = page.admissible_actions()
    lines.append("")
    lines.append("Available actions: " + (", ".join(actions) if actions else "none (the episode is over)"))
    return "\n".join(lines)


@dataclass(frozen=True)
class Command:
    verb: str  # search | click
    arg: str


def parse_command(content: str) -> Command | str:
    """`search[...]` or `click[...]`, else a sentence saying what is wrong."""
    match = _COMMAND_RE.match(content)
    if not match:
        return f"{clean(content)[:60]!r} is not a command; use search[your query] or click[a button]."
    verb, arg = match.group(1).lower(), clean(match.group(2))
    if not arg:
        return f"{verb}[] is empty."
    if verb == "search":
        arg = arg[:MAX_QUERY_CHARS]
    return Command(verb, arg)


def check_command(page: Page, command: Command) -> str | None:
    """None if `page` accepts `command`, else why not (naming what it does accept)."""
    if command.verb == "search":
        if page.has_search:
            return None
        return "there is no search box on this page; click[back to search] first."
    if page.find_button(command.arg) is not None:
        return None
    options = ", ".join(page.admissible_actions()) or "nothing (the episode is over)"
    return f"{command.arg[:60]!r} is not clickable on this page. You can use: {options}"
