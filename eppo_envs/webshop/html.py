"""The page model as HTML, and the DOM read back into the page model.

Every element of a `Page` becomes one top-level child of `#shop` carrying its kind (and an option's group and
selection) as data attributes; its words are its text content. `READ_PAGE_JS` collects exactly that from the
rendered DOM, and `page_from_dom` rebuilds the `Page`, so text mode and browser mode print the same observation.
"""

from __future__ import annotations

from html import escape
from typing import Any

from eppo_envs.webshop.pages import Element, Page, clean

_STYLE = """
body { font-family: sans-serif; max-width: 60em; margin: 1em auto; }
.el { margin: 0.2em 0; } form.el { display: inline-block; margin-right: 0.4em; }
form[data-selected="1"] button { font-weight: bold; outline: 2px solid #36c; }
form[data-kind="item"] { display: block; margin-top: 0.8em; }
"""


def _element_html(element: Element, sid: str) -> str:
    text = escape(element.text)
    if element.kind == "text":
        return f'<p class="el" data-kind="text">{text}</p>'
    if element.kind == "search":
        return (f'<form class="el" data-kind="search" method="post" action="/s/{sid}/search">'
                f'<input id="search-box" name="q" type="text" autocomplete="off">'
                f'<button id="search-button" type="submit">{text}</button></form>')
    selected = "1" if element.selected else "0"
    return (f'<form class="el" data-kind="{element.kind}" data-group="{escape(element.group)}" '
            f'data-selected="{selected}" method="post" action="/s/{sid}/click">'
            f'<input type="hidden" name="label" value="{text}"><button type="submit">{text}</button></form>')


def render_html(page: Page, sid: str) -> str:
    reward = "" if page.reward is None else repr(float(page.reward))
    body = "\n".join(_element_html(e, sid) for e in page.elements)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>WebShop</title>"
        f"<style>{_STYLE}</style></head>\n"
        f'<body data-kind="{page.kind}" data-item="{escape(page.item)}" data-reward="{reward}" data-seq="{page.seq}">\n'
        f'<div id="shop">\n{body}\n</div>\n</body></html>\n'
    )


# One round trip: the page's kind and every element's kind, text, group and selection, as the browser shows them.
READ_PAGE_JS = """
const shop = document.getElementById('shop');
if (!shop || document.readyState !== 'complete') { return null; }
const b = document.body.dataset;
return {kind: b.kind, item: b.item, reward: b.reward, seq: b.seq,
        els: Array.from(shop.children).filter(e => e.classList.contains('el')).map(
            e => [e.dataset.kind, e.textContent, e.dataset.group || '', e.dataset.selected === '1'])};
"""

# The <button> of the element whose label is arguments[0] (compared like `Page.find_button`), or null.
FIND_BUTTON_JS = """
const want = arguments[0];
for (const e of document.querySelectorAll('#shop > form.el')) {
  if (e.dataset.kind === 'search') continue;
  if (e.textContent.split(/\\s+/).filter(Boolean).join(' ').toLowerCase() === want) return e.querySelector('button');
}
return null;
"""


def page_from_dom(data: dict[str, Any]) -> Page:
    elements = tuple(Element(kind, clean(text), group, bool(selected)) for kind, text, group, selected in data["els"])
    reward = float(data["reward"]) if data.get("reward") else None
    return Page(data["kind"], elements, item=data.get("item") or "", reward=reward, seq=int(data["seq"]))
