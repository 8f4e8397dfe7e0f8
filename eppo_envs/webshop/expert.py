"""The expert: search with the instruction's key words, page through the results until a product that would
score 1.0 shows up, open it, pick the wanted options, buy.

It reads only the current `Page` (plus the catalogue, as an oracle that knows every product's attributes), so
the same expert drives the text env and the browser env, where the page is read back from the DOM.
"""

from __future__ import annotations

from eppo_envs.webshop.catalogue import Goal, Product
from eppo_envs.webshop.pages import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, Page, clean
from eppo_envs.webshop.reward import compute_reward, fuzzy_match, normalize_color
from eppo_envs.webshop.world import ShopWorld


def search_query(goal: Goal) -> str:
    return " ".join([goal.query, *goal.attributes])


def choose_options(product: Product, goal: Goal) -> dict[str, str]:
    """For each of the product's option dimensions, the value the goal asks for (by name, else by value)."""
    wanted = list(goal.options.values())
    chosen: dict[str, str] = {}
    for dim, values in product.options.items():
        named = goal.options.get(dim)
        if named is not None and named in values:
            chosen[dim] = named
            continue
        for value in values:
            if any(normalize_color(value) == normalize_color(w) or fuzzy_match(value, w) for w in wanted):
                chosen[dim] = value
                break
    return chosen


def _score(world: ShopWorld, goal: Goal, asin: str) -> float:
    product = world.catalogue.by_asin[asin]
    return compute_reward(product, goal, choose_options(product, goal), world.catalogue.type_words).reward


def expert_command(page: Page, goal: Goal, world: ShopWorld) -> str:
    """The next command (without the <action> tags) for `page`."""
    labels = {b.text.lower() for b in page.buttons}
    if page.kind == "search":
        return f"search[{search_query(goal)}]"
    if page.kind == "results":
        items = [b.text for b in page.buttons if b.kind == "item"]
        scores = {asin: _score(world, goal, asin) for asin in items}
        perfect = [asin for asin in items if scores[asin] >= 1.0]
        if perfect:
            return f"click[{perfect[0]}]"
        if NEXT_PAGE in labels:
            return f"click[{NEXT_PAGE}]"
        if items:  # nothing perfect anywhere: take the best of the last page
            return f"click[{max(items, key=lambda a: scores[a])}]"
        return f"click[{BACK_TO_SEARCH}]"
    if page.kind == "item":
        product = world.catalogue.by_asin[page.item]
        selected = {e.group: e.text for e in page.elements if e.kind == "option" and e.selected}
        for dim, value in choose_options(product, goal).items():
            if selected.get(dim) != clean(value):
                return f"click[{clean(value)}]"
        return f"click[{BUY_NOW}]"
    if PREV_PAGE in labels:  # a description/features/reviews page: back to the item
        return f"click[{PREV_PAGE}]"
    return f"click[{BUY_NOW}]"  # the done page accepts nothing; any command will do
