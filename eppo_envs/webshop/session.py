"""One shopper's session: the page state machine of WebShop (search -> results -> item -> sub-pages -> buy).

`ShopSession.page()` describes the current page as a `Page`; `apply(command)` moves to the next one. Text mode
calls it directly; the HTTP server holds one session per browser session and calls the same two methods.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from eppo_envs.webshop.catalogue import Goal, Product
from eppo_envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    SUB_PAGES,
    Command,
    Element,
    Page,
    check_command,
    clean,
)
from eppo_envs.webshop.reward import RewardInfo, compute_reward
from eppo_envs.webshop.world import PAGE_SIZE, ShopWorld


def _text(text: str) -> Element:
    return Element("text", clean(text))


class ShopSession:
    def __init__(self, world: ShopWorld, goal: Goal, exact_options: tuple[str, ...] = ()) -> None:
        self.world = world
        self.goal = goal
        self.exact_options = exact_options  # option dimensions matched exactly by the reward (default: none)
        self.kind = "search"
        self.results: list[str] = []
        self.page_num = 1
        self.asin = ""
        self.options: dict[str, str] = {}
        self.reward_info: RewardInfo | None = None
        self.seq = 0

    @property
    def product(self) -> Product:
        return self.world.catalogue.by_asin[self.asin]

    @property
    def num_pages(self) -> int:
        return max(1, math.ceil(len(self.results) / PAGE_SIZE))

    # ------------------------------------------------------------------ transitions
    def apply(self, command: Command) -> str | None:
        """Apply an accepted command; return why not (and change nothing) if this page does not accept it."""
        page = self.page()
        error = check_command(page, command)
        if error:
            return error
        self.seq += 1
        if command.verb == "search":
            self.results = self.world.search(command.arg)
            self.page_num, self.kind = 1, "results"
            return None
        button = page.find_button(command.arg)
        assert button is not None  # check_command accepted it
        self._CLICKS[button.kind](self, button)
        return None

    def _nav(self, button: Element) -> None:
        label = button.text.lower()
        if label == BACK_TO_SEARCH:
            self.kind, self.results, self.asin, self.options = "search", [], "", {}
        elif label == NEXT_PAGE:
            self.page_num += 1
        elif self.kind == "results":  # < prev on results: the previous page
            self.page_num -= 1
        elif self.kind == "item":  # < prev on an item: back to the results it came from
            self.kind, self.options = "results", {}
        else:  # < prev on a sub-page: back to the item, options kept
            self.kind = "item"

    def _item(self, button: Element) -> None:
        self.kind, self.asin, self.options = "item", button.text, {}

    def _option(self, button: Element) -> None:
        # The product's own value, not its printable label: the reward compares values as the original does, and a
        # label's transliteration ("4\u00d76" shown as "4x6") would score the right option of WebShop's files as wrong.
        values = self.product.options.get(button.group, [])
        self.options[button.group] = next((v for v in values if clean(v) == button.text), button.text)

    def _sub(self, button: Element) -> None:
        self.kind = button.text.lower()

    def _buy(self, button: Element) -> None:
        self.reward_info = compute_reward(self.product, self.goal, self.options, self.world.catalogue.type_words,
                                          exact_options=self.exact_options)
        self.kind = "done"

    _CLICKS: dict[str, Callable[[ShopSession, Element], None]] = {
        "nav": _nav, "item": _item, "option": _option, "sub": _sub, "buy": _buy,
    }

    # ------------------------------------------------------------------ pages
    def page(self) -> Page:
        elements, item, reward = self._PAGES[self.kind if self.kind not in SUB_PAGES else "sub"](self)
        return Page(self.kind, tuple(elements), item=item, reward=reward, seq=self.seq)

    def _instruction(self) -> Element:
        return _text(f"Instruction: {self.goal.instruction}")

    def _search_page(self) -> tuple[list[Element], str, None]:
        return [_text("WebShop"), self._instruction(), Element("search", "Search")], "", None

    def _results_page(self) -> tuple[list[Element], str, None]:
        elements = [self._instruction(), Element("nav", BACK_TO_SEARCH),
                    _text(f"Page {self.page_num} of {self.num_pages} (Total results: {len(self.results)})")]
        if self.page_num > 1:
            elements.append(Element("nav", PREV_PAGE))
        if self.page_num < self.num_pages:
            elements.append(Element("nav", NEXT_PAGE))
        start = (self.page_num - 1) * PAGE_SIZE
        for asin in self.results[start:start + PAGE_SIZE]:
            product = self.world.catalogue.by_asin[asin]
            elements += [Element("item", asin), _text(product.title), _text(product.price_tag)]
        if not self.results:
            elements.append(_text("No products match your search. Try other words."))
        return elements, "", None

    def _item_page(self) -> tuple[list[Element], str, None]:
        product = self.product
        elements = [self._instruction(), Element("nav", BACK_TO_SEARCH), Element("nav", PREV_PAGE)]
        for dim, values in product.options.items():
            elements.append(_text(f"{dim}:"))
            elements += [Element("option", clean(v), group=dim, selected=self.options.get(dim) == v) for v in values]
        elements += [_text(product.title), _text(f"Price: {product.price_tag}"), _text(f"Rating: {product.rating}")]
        elements += [Element("sub", name) for name in SUB_PAGES]
        elements.append(Element("buy", BUY_NOW))
        return elements, product.asin, None

    def _sub_page(self) -> tuple[list[Element], str, None]:
        product = self.product
        elements = [self._instruction(), Element("nav", BACK_TO_SEARCH), Element("nav", PREV_PAGE)]
        if self.kind == "description":
            elements.append(_text(product.description or "(no description)"))
        elif self.kind == "features":
            elements += [_text(f"- {f}") for f in product.features] or [_text("(no features listed)")]
        else:
            elements += [_text(f"{r['score']}/5 {r.get('title', '')}: {r.get('body', '')}") for r in product.reviews]
            elements += [] if product.reviews else [_text("(no reviews yet)")]
        return elements, product.asin, None

    def _done_page(self) -> tuple[list[Element], str, float]:
        info = self.reward_info
        assert info is not None
        chosen = ", ".join(f"{k}: {v}" for k, v in self.options.items()) or "none"
        elements = [_text("Thank you for shopping with us!"), _text(f"Purchased: {self.product.title}"),
                    _text(f"Options: {chosen}"), _text(f"Price: {self.product.price_tag}"),
                    _text(f"Your score (min 0.0, max 1.0): {info.reward:.4f}")]
        return elements, self.asin, info.reward

    _PAGES: dict[str, Callable[[ShopSession], tuple[list[Element], str, float | None]]] = {
        "search": _search_page, "results": _results_page, "item": _item_page, "sub": _sub_page, "done": _done_page,
    }
